#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim & Rush 2016): the teacher translates every training
# source with full-sentence beam search; the student then trains on those translations:
#   [EVERY=N] [BEAM=5] [WORK=dir] scripts/distill.sh TEACHER_MODEL_DIR [CORPUS_DIR] [OUT_FILE]
#   simulmt train --config configs/de-en-base.toml --set distill=OUT_FILE --set out=runs/kd
# The teacher's outputs come from `simulmt eval` (batched, --jobs), read back from instances.log.
# EVERY=N translates only every N-th training line (a full beam-5 pass over 282k sources takes
# hours on 2 cores); the other lines of OUT_FILE are empty, which keeps their references.
# The sources are translated in chunks of CHUNK lines under WORK (default OUT_FILE.work): a
# rerun skips the chunks already done, so an interrupted pass resumes where it stopped.
set -euo pipefail
TEACHER=${1:?teacher model folder}
CORPUS=${2:-cache/corpus}
OUT=${3:-$CORPUS/train.distill.en}
BIN=${BIN:-.venv/bin}
EVERY=${EVERY:-1}
CHUNK=${CHUNK:-5000}
WORK=${WORK:-$OUT.work}
mkdir -p "$WORK"
awk -v n="$EVERY" '(NR - 1) % n == 0' "$CORPUS/train.de" > "$WORK/src.de"
awk -v n="$EVERY" '(NR - 1) % n == 0' "$CORPUS/train.en" > "$WORK/ref.en"
total_src=$(wc -l < "$WORK/src.de")
for ((start = 0; start < total_src; start += CHUNK)); do
  part="$WORK/part-$(printf '%07d' "$start")"
  [[ -s "$part/scores.txt" ]] && continue
  rm -rf "$part" && mkdir -p "$part"
  sed -n "$((start + 1)),$((start + CHUNK))p" "$WORK/src.de" > "$part/src.de"
  sed -n "$((start + 1)),$((start + CHUNK))p" "$WORK/ref.en" > "$part/ref.en"
  $BIN/simulmt eval --model "$TEACHER" --policy full --beam "${BEAM:-5}" --alpha "${ALPHA:-2.0}" \
    --dtype "${DTYPE:-int8}" --loop-guard "${LOOP_GUARD:-8}" --no-progress \
    --source "$part/src.de" --reference "$part/ref.en" --jobs "${JOBS:-2}" --threads 1 \
    --output "$part" > "$part/scores.tmp"
  mv "$part/scores.tmp" "$part/scores.txt"
  echo "distill: lines $start..$((start + CHUNK - 1)) of $total_src done ($(date +%T))" >&2
done
$BIN/python - "$WORK" "$OUT" "$EVERY" "$(wc -l < "$CORPUS/train.de")" "$CHUNK" <<'PY'
import json, sys
from pathlib import Path
work, out_path, every, total, chunk = Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:])
lines = [""] * total  # empty: keep the reference
n = 0
for part in sorted(work.glob("part-*")):
    start = int(part.name.split("-")[1])
    for line in open(part / "full" / "instances.log", encoding="utf-8"):
        if line.strip():
            r = json.loads(line)
            lines[(start + r["index"]) * every] = r["prediction"].replace("\n", " ")
            n += 1
with open(out_path, "w", encoding="utf-8") as out:
    out.writelines(line + "\n" for line in lines)
print(f"wrote {n} teacher translations (every {every}. line of {total}) to {out_path}")
PY
