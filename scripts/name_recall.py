"""How often a model writes the names it should copy: of the capitalised source words (not the
first of a sentence) that the reference repeats unchanged, the share the hypothesis has too.

python scripts/name_recall.py --source SRC.de --reference REF.en HYP [HYP ...]

Each HYP is a file of translations, one a line, or an `instances.log` that `simulmt eval
--output` wrote (its predictions). SRC is the written German (case kept) even when the model
read the recognizer view. BLEU hides this failure: names are few, but a caption that mangles
"Karratha" or "Modi" is the one a reader notices.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simulmt.eval.instances import read_predictions

from simulmt.data.names import WORD, copied_words


def recall(sources: list[str], references: list[str], hypotheses: list[str]) -> tuple[int, int]:
    """(names written, names to copy) over the whole set."""
    if not len(sources) == len(references) == len(hypotheses):
        raise ValueError(f"line counts differ: {len(sources)} sources, {len(references)} "
                         f"references, {len(hypotheses)} hypotheses")
    hit = total = 0
    for src, ref, hyp in zip(sources, references, hypotheses, strict=True):
        names = copied_words(src, ref)
        written = set(WORD.findall(hyp))
        total += len(names)
        hit += sum(name in written for name in names)
    return hit, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("hypotheses", type=Path, nargs="+")
    args = parser.parse_args()
    sources = args.source.read_text(encoding="utf-8").splitlines()
    references = args.reference.read_text(encoding="utf-8").splitlines()
    for path in args.hypotheses:
        hit, total = recall(sources, references, read_predictions(path))
        share = 100.0 * hit / total if total else 0.0
        print(f"{path}\t{hit}/{total}\t{share:.1f}%")


if __name__ == "__main__":
    main()
