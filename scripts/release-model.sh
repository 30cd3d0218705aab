#!/usr/bin/env bash
# How the bundled model and README's results were produced from a training run:
#   [EVAL_CORPUS=DIR] [EVAL_FLAGS=...] scripts/release-model.sh RUN_DIR|MODEL_DIR [CORPUS_DIR]
# 1. export (average of the last $AVERAGE (2) checkpoints, fp16) into simulmt/models/de-en,
#    named $NAME (default: simulmt-<run folder>, e.g. simulmt-de-en-base for runs/de-en-base);
#    a model folder (one with model.pt, e.g. a `simulmt soup`) is copied instead, its name and
#    policy.pt (if any) kept; simulmt/models/de-en itself is evaluated as it is;
#    the sentence-boundary detector segmenter.pt stays as it is: it reads hashed source words,
#    not the translation model (docs/SEGMENTER.md)
# 2. train the learned read/write policy on it (TRAIN_POLICY=0: keep the folder's policy.pt)
# 3. evaluate every policy on every 5th sentence of the held-out test split (all sources),
#    with per-source scores, and wait-k on newstest2015 (scripts/evaluate-model.sh); plot
set -euo pipefail
RUN=${1:?training run folder}
CORPUS=${2:-cache/corpus}
# the held-out split README's policy tables are measured on (default: CORPUS's own; README's
# tables since the first release use cache/corpus-registry's, 948 lines at 1 in 5)
EVAL_CORPUS=${EVAL_CORPUS:-$CORPUS}
BIN=${BIN:-.venv/bin}
M=simulmt/models/de-en
mkdir -p cache docs
NAME=${NAME:-simulmt-$(basename "$(realpath "$RUN")")}
if [ "$(realpath "$RUN")" = "$(realpath $M)" ]; then
  :  # the bundled folder itself: evaluate it as it is
elif [ -f "$RUN/model.pt" ]; then
  cp "$RUN/model.pt" "$RUN/spm.model" "$RUN/config.json" $M/
  if [ -f "$RUN/policy.pt" ]; then cp "$RUN/policy.pt" $M/; fi
else
  $BIN/simulmt export --run "$RUN" --out $M --average "${AVERAGE:-2}" --name "$NAME"
fi
# the learned policy: word-level oracle on the model's own full-sentence translations (top-1,
# a word only once the next one's first token is predicted too; 4000 pairs), then one DAgger
# round of that policy on 2000 pairs (README, "Adaptive policies")
# (TRAIN_POLICY=0 keeps the folder's policy.pt: a model folder whose policy is already trained)
ORACLE=(--targets model --oracle top-r --r 1 --word-end)
if [ "${TRAIN_POLICY:-1}" != 0 ]; then
  $BIN/simulmt train-policy --model $M --data "$CORPUS" --out cache/policy-round0.pt \
    --dev-pairs 500 --threads 1 "${ORACLE[@]}"
  $BIN/simulmt train-policy --model $M --data "$CORPUS" --out $M/policy.pt --pairs 2000 \
    --dev-pairs 500 --dagger cache/policy-round0.pt --threads 1 "${ORACLE[@]}"
fi
# every other policy, word level with token-level wait-k beside it, both test sets, the plots
# (EVAL_FLAGS: extra `simulmt eval` options, as evaluate-model.sh takes them)
scripts/evaluate-model.sh $M "$EVAL_CORPUS"
EVAL=($BIN/simulmt eval --model $M --source cache/test-1in5.de --reference cache/test-1in5.en
      --groups cache/test-1in5.source --threads 1 --no-progress --json)
read -r -a extra <<< "${EVAL_FLAGS:-}"
EVAL+=("${extra[@]}")
"${EVAL[@]}" --output results/test --sweep "learned:threshold=0.5,0.7,0.8,0.9,lag_min=0" \
  --sweep "learned:threshold=0.4,0.5,0.7,0.8,0.9" \
  --sweep "learned:threshold=0.5,0.8,k_max=2,lag_min=1" > docs/results/results-learned.jsonl &
"${EVAL[@]}" --policy full --beam 5 --output cache/results-beam5 > docs/results/results-beam5.jsonl
wait
$BIN/simulmt plot results/test results/test-token -o docs/results/curve.png \
  --title "Held-out test (every 5th line): word-level vs token-level writes"
$BIN/simulmt plot results/test results/test-token -o docs/results/curve-low-latency.png \
  --xlim 0.5,6.5 --title "Held-out test, AL up to 6 (zoom)"
