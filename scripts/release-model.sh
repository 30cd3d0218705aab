#!/usr/bin/env bash
# How the bundled model and README's results were produced from a training run:
#   scripts/release-model.sh RUN_DIR [CORPUS_DIR]
# 1. export (average of the last $AVERAGE (2) checkpoints, fp16) into simulmt/models/de-en
# 2. train the learned read/write policy on it
# 3. evaluate every policy on every 5th sentence of the held-out test split (all sources),
#    with per-source scores; plot the BLEU–AL curves
set -euo pipefail
RUN=${1:?training run folder}
CORPUS=${2:-cache/corpus}
BIN=${BIN:-.venv/bin}
M=simulmt/models/de-en
rm -rf results  # one folder per evaluated policy: stale ones would show up in the plot
mkdir -p cache results docs
$BIN/simulmt export --run "$RUN" --out $M --average "${AVERAGE:-2}" --name simulmt-de-en-small
for f in de en source; do awk 'NR % 5 == 1' "$CORPUS/test.$f" > cache/test-1in5.$f; done
EVAL=($BIN/simulmt eval --model $M --source cache/test-1in5.de --reference cache/test-1in5.en
      --groups cache/test-1in5.source --threads 1 --no-progress --json --output results)
# two processes on two cores: policy training + baselines, then the rest
# the learned policy: word-level oracle (4000 pairs), then one DAgger round of that policy
# on 2000 pairs (README, "Adaptive policies at word level")
( $BIN/simulmt train-policy --model $M --data "$CORPUS" --out cache/policy-round0.pt \
    --dev-pairs 500 --threads 1 &&
  $BIN/simulmt train-policy --model $M --data "$CORPUS" --out $M/policy.pt --pairs 2000 \
    --dev-pairs 500 --dagger cache/policy-round0.pt --threads 1 &&
  "${EVAL[@]}" --sweep "learned:threshold=0.5,0.7,0.8,0.9,lag_min=0" \
    --sweep "learned:threshold=0.4,0.5,0.7,0.8,0.9" \
    --sweep "learned:threshold=0.5,0.8,k_max=2,lag_min=1" > docs/results-learned.jsonl ) &
"${EVAL[@]}" --sweep "wait-k:k=1,2,3,4,5,7,9" --policy full --policy wait-if-worse --policy wait-if-diff \
  --sweep "alignatt:f=1,2,3,4,5,6" \
  --sweep "confidence:threshold=0.4,0.6,0.8" --policy local-agreement:n=2 > docs/results-baselines.jsonl
"${EVAL[@]}" --policy full --beam 5 --output cache/results-beam5 > docs/results-beam5.jsonl
wait
$BIN/simulmt plot results/* -o docs/curve.png
$BIN/simulmt plot results/* -o docs/curve-low-latency.png --xlim 2.6,4.6 --ylim 19.5,23 --title "Quality–latency, AL 2.6–4.6 (zoom)"
