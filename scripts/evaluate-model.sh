#!/usr/bin/env bash
# README's results for a model folder (scripts/release-model.sh calls it after export):
#   [EVAL_FLAGS="--loop-guard 0"] scripts/evaluate-model.sh [MODEL_DIR] [CORPUS_DIR]
# every policy at word level (the default) on every 5th sentence of the held-out test split,
# wait-k also at token level (the earlier releases' writes, `--unit token`) to draw beside it,
# and both wait-k curves on the whole of newstest2015 (../shared/corpora/newstest, never trained
# on). Greedy, 1 torch thread per process, two processes at a time. The learned policy's rows
# come from scripts/release-model.sh (it trains the policy first). Then the plots.
# EVAL_FLAGS go to every `simulmt eval` (its defaults: float32, loop guard 8; the
# README rows marked "no loop guard" were measured with `--loop-guard 0`).
set -euo pipefail
M=${1:-simulmt/models/de-en}
CORPUS=${2:-cache/corpus-registry}
NEWS=${NEWS:-../shared/corpora/newstest}
BIN=${BIN:-.venv/bin}
R=${RESULTS:-results}
WAITK="wait-k:k=1,2,3,4,5,7,9"
read -r -a extra <<< "${EVAL_FLAGS:-}"
mkdir -p cache docs
rm -rf "$R/test" "$R/test-token" "$R/newstest2015" "$R/newstest2015-token"  # stale runs would be plotted
for f in de en source; do awk 'NR % 5 == 1' "$CORPUS/test.$f" > cache/test-1in5.$f; done
TEST=(--model "$M" --source cache/test-1in5.de --reference cache/test-1in5.en
      --groups cache/test-1in5.source --threads 1 --no-progress --json "${extra[@]}")
NT15=(--model "$M" --source "$NEWS/newstest2015-ende.de" --reference "$NEWS/newstest2015-ende.en"
      --threads 1 --no-progress --json "${extra[@]}")
( "$BIN/simulmt" eval "${TEST[@]}" --output "$R/test" --sweep "$WAITK" --policy full \
    --policy wait-if-worse --policy wait-if-diff --sweep "confidence:threshold=0.4,0.6,0.8" \
    --policy local-agreement:n=2 --sweep "alignatt:f=1,2,3,4,5,6" > docs/results/results-baselines.jsonl
  "$BIN/simulmt" eval "${TEST[@]}" --output "$R/test-token" --unit token --sweep "$WAITK" \
    > docs/results/results-token-waitk.jsonl ) &
"$BIN/simulmt" eval "${NT15[@]}" --output "$R/newstest2015" --sweep "$WAITK" \
  > docs/results/results-newstest2015.jsonl
"$BIN/simulmt" eval "${NT15[@]}" --output "$R/newstest2015-token" --unit token --sweep "$WAITK" \
  > docs/results/results-newstest2015-token.jsonl
wait
"$BIN/simulmt" plot "$R"/test/* "$R"/test-token/* -o docs/results/curve.png \
  --title "Held-out test (every 5th line): word-level vs token-level writes"
"$BIN/simulmt" plot "$R"/test/* "$R"/test-token/* -o docs/results/curve-low-latency.png \
  --xlim 0.5,6.5 --title "Held-out test, AL up to 6 (zoom)"
"$BIN/simulmt" plot "$R"/newstest2015/* "$R"/newstest2015-token/* -o docs/results/curve-newstest2015.png \
  --title "newstest2015 de→en: word-level vs token-level wait-k"
