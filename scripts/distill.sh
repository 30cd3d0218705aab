#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim & Rush 2016): the teacher translates every training
# source with full-sentence beam search; the student then trains on those translations:
#   scripts/distill.sh TEACHER_MODEL_DIR [CORPUS_DIR] [OUT_FILE]
#   simulmt train --config configs/de-en-base.toml --set distill=OUT_FILE --set out=runs/kd
# The teacher's outputs come from `simulmt eval` (batched, --jobs), read back from instances.log.
set -euo pipefail
TEACHER=${1:?teacher model folder}
CORPUS=${2:-cache/corpus}
OUT=${3:-$CORPUS/train.distill.en}
BIN=${BIN:-.venv/bin}
RUNS=$(mktemp -d)
$BIN/simulmt eval --model "$TEACHER" --policy full --beam "${BEAM:-5}" --alpha "${ALPHA:-1.0}" \
  --source "$CORPUS/train.de" --reference "$CORPUS/train.en" --jobs "${JOBS:-2}" --threads 1 \
  --output "$RUNS" > "$RUNS/scores.txt"
$BIN/python - "$RUNS/full/instances.log" "$OUT" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
rows.sort(key=lambda r: r["index"])
with open(sys.argv[2], "w", encoding="utf-8") as out:
    out.writelines(r["prediction"].replace("\n", " ") + "\n" for r in rows)
print(f"wrote {len(rows)} teacher translations to {sys.argv[2]}")
PY
cat "$RUNS/scores.txt"
