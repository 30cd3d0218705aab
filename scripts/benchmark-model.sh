#!/usr/bin/env bash
# The model table of issue 15: a model (and, beside it, the previous release) on
#   the project's held-out test split (every 5th line, per source: tatoeba, europarl and the
#   registry sources), newstest2014 and newstest2015 (../shared/corpora/newstest; never trained
#   on), each in its written view and its recognizer view (lowercase, no punctuation);
#   full sentence (beam 5 and greedy), wait-1/3/5/7 (greedy, word level) and wait-3 with beam 5
#   (speculative beam search, `eval --beam 5`'s default depth 3; WAITK_BEAM="k …" sets the k, ""
#   skips it: it costs about as much as the four greedy wait-k runs together).
#   [EVAL_FLAGS="--loop-guard 8 --dtype int8"] scripts/benchmark-model.sh MODEL_DIR [OUT_DIR] [CORPUS_DIR]
# SETS=dev measures on the dev sets instead, to choose between candidate models without touching
# a test set: newstest2013 every 10th line (300, the news dev set) and the corpus's dev split
# every 20th line (per source), into OUT_DIR/MODEL_NAME.jsonl as well (give it another OUT_DIR);
# VIEWS="text" skips the recognizer view (default "text asr"); ONLY="newstest2015" measures only
# the named sets (space-separated) of the chosen SETS.
# EVAL_FLAGS go to every `simulmt eval` (e.g. what `simulmt serve` runs by default: the line
# above); run once without and once with them (into another OUT_DIR) to show both.
# Writes one JSON line per (test set, view, policy) into OUT_DIR/MODEL_NAME.jsonl, each with
# `loops`: the % of outputs that loop (eval/loops.py). Each finished run also keeps its lines in
# OUT_DIR/MODEL_NAME/SET-VIEW-TAG.jsonl, so running it again after an interruption skips those
# (delete them, or use another OUT_DIR, to measure again).
set -euo pipefail
MODEL=${1:?model folder}
OUT=${2:-cache/benchmarks}
CORPUS=${3:-cache/corpus}
NEWS=${NEWS:-../shared/corpora/newstest}
BIN=${BIN:-.venv/bin}
JOBS=${JOBS:-2}
read -r -a extra <<< "${EVAL_FLAGS:-}"
name=$(basename "$MODEL")
mkdir -p "$OUT/$name" cache
# every 5th line of the corpus's test split, under a name of its own (cache/test-1in5.* is the
# registry corpus's, which README's older tables use)
own=cache/$(basename "$CORPUS")-test-1in5
for f in de en source; do awk 'NR % 5 == 1' "$CORPUS/test.$f" > "$own.$f"; done
sets=("own:$own.de:$own.en:$own.source"
      "newstest2014:$NEWS/newstest2014-deen.de:$NEWS/newstest2014-deen.en:"
      "newstest2015:$NEWS/newstest2015-ende.de:$NEWS/newstest2015-ende.en:")
if [ "${SETS:-test}" = dev ]; then
  nt13=cache/newstest2013-1in10
  dev=cache/$(basename "$CORPUS")-dev-1in20
  for f in de en; do awk 'NR % 10 == 1' "$NEWS/newstest2013.$f" > "$nt13.$f"; done
  for f in de en source; do awk 'NR % 20 == 1' "$CORPUS/dev.$f" > "$dev.$f"; done
  sets=("newstest2013-1in10:$nt13.de:$nt13.en:" "dev-1in20:$dev.de:$dev.en:$dev.source")
fi
if [ -n "${ONLY:-}" ]; then
  chosen=()
  for entry in "${sets[@]}"; do
    for want in $ONLY; do [ "${entry%%:*}" = "$want" ] && chosen+=("$entry"); done
  done
  [ ${#chosen[@]} -gt 0 ] || { echo "ONLY=$ONLY names none of: ${sets[*]%%:*}" >&2; exit 2; }
  sets=("${chosen[@]}")
fi
read -r -a views <<< "${VIEWS:-text asr}"
: > "$OUT/$name.jsonl"
for entry in "${sets[@]}"; do
  IFS=: read -r set src ref groups <<< "$entry"
  for view in "${views[@]}"; do
    source_view=text; [ "$view" = asr ] && source_view=recognizer  # "asr": the tables' label
    args=(--model "$MODEL" --source "$src" --reference "$ref" --source-view "$source_view"
          --jobs "$JOBS" --threads 1 --no-progress --json "${extra[@]}")
    [ -n "$groups" ] && args+=(--groups "$groups")
    runs=("beam5 --policy full --beam 5" "greedy --policy full --sweep wait-k:k=1,3,5,7")
    for k in ${WAITK_BEAM-3}; do runs+=("wait$k-beam5 --policy wait-k:k=$k --beam 5"); done
    for run in "${runs[@]}"; do
      read -r tag flags <<< "$run"
      part="$OUT/$name/$set-$view-$tag.jsonl"  # a finished run is kept: a rerun resumes
      if [ ! -s "$part" ]; then
        # shellcheck disable=SC2086
        $BIN/simulmt eval "${args[@]}" --output "$OUT/$name/$set-$view-$tag" $flags \
          | sed "s/^{/{\"set\": \"$set\", \"view\": \"$view\", \"model\": \"$name\", /" \
          > "$part.tmp"
        mv "$part.tmp" "$part"
      fi
      cat "$part" >> "$OUT/$name.jsonl"
    done
  done
done
echo "wrote $OUT/$name.jsonl"
