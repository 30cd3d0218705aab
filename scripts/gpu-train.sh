#!/usr/bin/env bash
# One run of the GPU campaign (#53) on a machine that has python3 with torch, sentencepiece,
# sacrebleu and numpy (nothing installed from this repository: it runs from the source tree):
#   OUT=dir [PYTHON=python3] [PACK=cache/corpus-pack] scripts/gpu-train.sh teacher [options]
#   OUT=dir ... scripts/gpu-train.sh student --distill cache/gpu/train.distill.en.xz [options]
# Each stage unpacks the corpus pack, trains within --minutes (default 8.5), evaluates on
# newstest2013 and writes into OUT: recipe.log, STAGE.json (scores, steps, seconds per stage)
# and the teacher's train.distill.en.xz or the student's model.pt.000... pieces (<= 16 MiB).
# Options go to `python -m simulmt.train.recipe STAGE` (--set key=value, --config, --minutes,
# --init-from MODEL_DIR|PIECES_DIR). Plan and state: notes/engineering-notes.md, "GPU campaign".
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder whose files come back}"
STAGE=${1:?stage: teacher or student}
shift
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$OUT/recipe.log"
fi
exec "${PYTHON:-python3}" -m simulmt.train.recipe "$STAGE" --pack "${PACK:-cache/corpus-pack}" \
  --out "$OUT" "$@"
