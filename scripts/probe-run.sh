#!/usr/bin/env bash
# A trend check of a training run on the news dev set, in a few minutes: the average of the
# run's last N step checkpoints (default 4) and, beside it, the bundled model; full sentence and
# wait-3, greedy, int8, on newstest2013 every 10th line (300 sentences, the news dev set).
#   scripts/probe-run.sh runs/de-en-sr [N]
# Not a verdict (a mid-run average against a finished, averaged model): compare the probes of
# one run over its steps (notes/engineering-notes.md keeps them), and judge a run at its end with
# SETS=dev scripts/benchmark-model.sh.
set -euo pipefail
RUN=${1:?training run folder}
N=${2:-4}
BIN=${BIN:-.venv/bin}
NEWS=${NEWS:-../shared/corpora/newstest}
nt13=cache/newstest2013-1in10
mkdir -p cache
for f in de en; do awk 'NR % 10 == 1' "$NEWS/newstest2013.$f" > "$nt13.$f"; done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$BIN/simulmt" export --run "$RUN" --average "$N" --out "$out/$(basename "$RUN")"
for model in "$out/$(basename "$RUN")" simulmt/models/de-en; do
  echo "== $model"
  "$BIN/simulmt" eval --model "$model" --source "$nt13.de" --reference "$nt13.en" --threads 1 \
    --dtype int8 --no-progress --policy full --policy wait-k:k=3
done
