"""How often a translation writes the source's numbers as the reference does: of the numbers in a
source sentence that its reference repeats (in the target's notation: German 2.100 as 2,100),
the share the hypothesis has too.

python scripts/number_recall.py --source SRC.de --reference REF.en [--src de --tgt en] HYP [HYP ...]

Each HYP is a file of translations, one a line, or an `instances.log` that `simulmt eval
--output` wrote (its predictions). A caption that writes "25,000" for 250.000 or "2.100" for
2,100 misleads its reader while BLEU barely moves; this counts it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from simulmt.eval.instances import read_predictions

from simulmt.output.numbers import NumberNotation

NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def recall(
    sources: list[str], references: list[str], hypotheses: list[str],
    notation: NumberNotation | None,
) -> tuple[int, int]:
    """(numbers written, numbers to write) over the whole set."""
    if not len(sources) == len(references) == len(hypotheses):
        raise ValueError(f"line counts differ: {len(sources)} sources, {len(references)} "
                         f"references, {len(hypotheses)} hypotheses")
    hit = total = 0
    for src, ref, hyp in zip(sources, references, hypotheses, strict=True):
        in_ref, in_hyp = set(NUMBER.findall(ref)), set(NUMBER.findall(hyp))
        for number in NUMBER.findall(src):
            target = (notation.convert(number) if notation else None) or number
            if target in in_ref:
                total += 1
                hit += target in in_hyp
    return hit, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--src", default="de", help="source language (default de)")
    parser.add_argument("--tgt", default="en", help="target language (default en)")
    parser.add_argument("hypotheses", type=Path, nargs="+")
    args = parser.parse_args()
    sources = args.source.read_text(encoding="utf-8").splitlines()
    references = args.reference.read_text(encoding="utf-8").splitlines()
    notation = NumberNotation.for_pair(args.src, args.tgt)
    for path in args.hypotheses:
        hit, total = recall(sources, references, read_predictions(path), notation)
        share = 100.0 * hit / total if total else 0.0
        print(f"{path}\t{hit}/{total}\t{share:.1f}%")


if __name__ == "__main__":
    main()
