#!/usr/bin/env bash
# Sequence-level knowledge distillation (Kim & Rush 2016): the teacher translates every training
# source with full-sentence beam search; the student then trains on those translations:
#   [EVERY=N] [BEAM=5] [WORK=dir] scripts/distill.sh TEACHER_MODEL_DIR [CORPUS_DIR] [OUT_FILE]
#   simulmt train --config configs/de-en-base.toml --set distill=OUT_FILE --set out=runs/kd
# The teacher's outputs come from `simulmt eval` (batched, --jobs), read back from instances.log.
# EVERY=N translates only every N-th training line (a full beam-5 pass over 282k sources takes
# hours on 2 cores); the other lines of OUT_FILE are empty, which keeps their references.
# OFFSET=J (0 <= J < N) starts at line J+1 instead of line 1, so a second pass with another
# teacher can distill a slice the first did not (lines J+1, J+1+N, ...).
# The sources are translated in chunks of CHUNK lines under WORK (default OUT_FILE.work): a
# rerun skips the chunks already done, so an interrupted pass resumes where it stopped.
set -euo pipefail
TEACHER=${1:?teacher model folder}
CORPUS=${2:-cache/corpus}
OUT=${3:-$CORPUS/train.distill.en}
BIN=${BIN:-.venv/bin}
EVERY=${EVERY:-1}
OFFSET=${OFFSET:-0}
if ((OFFSET < 0 || OFFSET >= EVERY)); then
  echo "distill: OFFSET=$OFFSET must be at least 0 and below EVERY=$EVERY" >&2; exit 2
fi
CHUNK=${CHUNK:-5000}
WORK=${WORK:-$OUT.work}
mkdir -p "$WORK"
# the teacher's lines: every EVERY-th from OFFSET, except those a session refuses (a "word" over
# SessionLimits.max_word_chars, e.g. a URL), which keep their references; lines.idx holds each
# chosen line's 0-based number in train.de
$BIN/python - "$CORPUS" "$WORK" "$EVERY" "$OFFSET" <<'PY'
import sys
from pathlib import Path
from simulmt.session import SessionLimits
corpus, work = Path(sys.argv[1]), Path(sys.argv[2])
every, offset = int(sys.argv[3]), int(sys.argv[4])
limit = SessionLimits().max_word_chars
# split at "\n" only, as awk, sed and `wc -l` count lines
src = (corpus / "train.de").read_text(encoding="utf-8").removesuffix("\n").split("\n")
ref = (corpus / "train.en").read_text(encoding="utf-8").removesuffix("\n").split("\n")
chosen, refused = [], 0
for i in range(offset, len(src), every):
    if all(len(w) <= limit for w in src[i].split()):
        chosen.append(i)
    else:
        refused += 1
(work / "src.de").write_text("".join(src[i] + "\n" for i in chosen), encoding="utf-8")
(work / "ref.en").write_text("".join(ref[i] + "\n" for i in chosen), encoding="utf-8")
(work / "lines.idx").write_text("".join(f"{i}\n" for i in chosen), encoding="utf-8")
if refused:
    print(f"distill: {refused} lines with a word over {limit} characters keep their references",
          file=sys.stderr)
PY
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
$BIN/python - "$WORK" "$OUT" "$EVERY" "$OFFSET" "$(wc -l < "$CORPUS/train.de")" <<'PY'
import json, sys
from pathlib import Path
work, out_path = Path(sys.argv[1]), sys.argv[2]
every, offset, total = map(int, sys.argv[3:])
line_of = [int(x) for x in (work / "lines.idx").read_text().split()]  # src.de line -> train.de
lines = [""] * total  # empty: keep the reference
n = 0
for part in sorted(work.glob("part-*")):
    start = int(part.name.split("-")[1])
    for line in open(part / "full" / "instances.log", encoding="utf-8"):
        if line.strip():
            r = json.loads(line)
            lines[line_of[start + r["index"]]] = r["prediction"].replace("\n", " ")
            n += 1
with open(out_path, "w", encoding="utf-8") as out:
    out.writelines(line + "\n" for line in lines)
print(f"wrote {n} teacher translations (every {every}. line from line {offset + 1}, of {total})"
      f" to {out_path}")
PY
