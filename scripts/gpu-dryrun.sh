#!/usr/bin/env bash
# The GPU campaign's two runs (#53) on this CPU, under the GPU machine's Python and torch
# (python3.12, torch 2.11.0, sentencepiece, sacrebleu, numpy: ../.library/device/KINDS.md), on
# the real corpus packs with a 1-layer, 64-wide model: teacher -> distilled targets -> student
# -> pieces -> a model folder this checkout's engine loads. Run it before a session's first GPU
# run whenever training code changed; CI tests the same stages on torch 2.13 only.
#   scripts/gpu-dryrun.sh            # ~10 min on 2 cores (+ ~2 min for a new venv, 4.7 GB)
# Env: VENV (default /tmp/gpu-venv), PY312 (a python3.12), WORK (default /tmp/gpu-dryrun).
# Needs cache/corpus-pack and cache/corpus-pack-student (notes/engineering-notes.md, "GPU
# campaign"), and .venv (make setup-test) for the final load.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-/tmp/gpu-venv}
WORK=${WORK:-/tmp/gpu-dryrun}
PY312=${PY312:-$(command -v python3.12 || echo /root/.pyenv/versions/3.12.1/bin/python)}
# a pyenv shim is on PATH even where its global version is not 3.12: try the version's own
"$PY312" -c '' 2>/dev/null || PY312=/root/.pyenv/versions/3.12.1/bin/python
for pack in cache/corpus-pack cache/corpus-pack-student; do
  [[ -f $pack/pack.json ]] || { echo "missing $pack: build it first (notes, GPU campaign)" >&2; exit 2; }
done
if [[ ! -x $VENV/bin/python ]]; then
  "$PY312" -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.11.0 sentencepiece sacrebleu numpy
fi
VERSIONS=$("$VENV/bin/python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)')
echo "$VERSIONS"
rm -rf "$WORK"
TINY=(--set model.d_model=64 --set model.n_heads=4 --set model.enc_layers=1
      --set model.dec_layers=1 --set model.d_ff=128 --set max_steps=5 --set max_tokens=2000)
OUT=$WORK/teacher PYTHON=$VENV/bin/python scripts/gpu-train.sh teacher \
  --work "$WORK/w-teacher" --minutes 4 "${TINY[@]}"
OUT=$WORK/student PYTHON=$VENV/bin/python PACK=cache/corpus-pack-student \
  scripts/gpu-train.sh student --distill "$WORK/teacher/train.distill.en.xz" \
  --work "$WORK/w-student" --minutes 3 "${TINY[@]}"
.venv/bin/python -m simulmt.train.recipe join "$WORK/student" --out "$WORK/model"
echo "Das ist ein Test ." | .venv/bin/simulmt translate --model "$WORK/model" > /dev/null
echo "gpu-dryrun: teacher and student ran under $VERSIONS; $WORK/model loads"
