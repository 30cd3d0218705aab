#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim & Rush 2016): the teacher translates every training
# source with full-sentence beam search; the student then trains on those translations:
#   [EVERY=N] scripts/distill.sh TEACHER_MODEL_DIR [CORPUS_DIR] [OUT_FILE]
#   simulmt train --config configs/de-en-base.toml --set distill=OUT_FILE --set out=runs/kd
# The teacher's outputs come from `simulmt eval` (batched, --jobs), read back from instances.log.
# EVERY=N translates only every N-th training line (a full beam-5 pass over 282k sources takes
# hours on 2 cores); the other lines of OUT_FILE are empty, which keeps their references.
set -euo pipefail
TEACHER=${1:?teacher model folder}
CORPUS=${2:-cache/corpus}
OUT=${3:-$CORPUS/train.distill.en}
BIN=${BIN:-.venv/bin}
EVERY=${EVERY:-1}
RUNS=$(mktemp -d)
awk -v n="$EVERY" '(NR - 1) % n == 0' "$CORPUS/train.de" > "$RUNS/src.de"
awk -v n="$EVERY" '(NR - 1) % n == 0' "$CORPUS/train.en" > "$RUNS/ref.en"
$BIN/simulmt eval --model "$TEACHER" --policy full --beam "${BEAM:-5}" --alpha "${ALPHA:-1.0}" \
  --source "$RUNS/src.de" --reference "$RUNS/ref.en" --jobs "${JOBS:-2}" --threads 1 \
  --output "$RUNS" > "$RUNS/scores.txt"
$BIN/python - "$RUNS/full/instances.log" "$OUT" "$EVERY" "$(wc -l < "$CORPUS/train.de")" <<'PY'
import json, sys
log, out_path, every, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(line) for line in open(log, encoding="utf-8") if line.strip()]
rows.sort(key=lambda r: r["index"])
lines = [""] * total  # empty: keep the reference
for r in rows:
    lines[r["index"] * every] = r["prediction"].replace("\n", " ")
with open(out_path, "w", encoding="utf-8") as out:
    out.writelines(line + "\n" for line in lines)
print(f"wrote {len(rows)} teacher translations (every {every}. line of {total}) to {out_path}")
PY
cat "$RUNS/scores.txt"
