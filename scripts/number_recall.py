"""How often a translation writes the source's numbers as the reference does (`simulmt eval`'s
"num %" column, for translations made elsewhere): of the numbers in a source sentence that its
reference repeats (in the target's notation: German 2.100 as 2,100), the share the hypothesis
has too.

python scripts/number_recall.py --source SRC.de --reference REF.en [--src de --tgt en] HYP [HYP ...]

Each HYP is a file of translations, one a line, or an `instances.log` that `simulmt eval
--output` wrote (its predictions).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simulmt.eval.instances import read_predictions
from simulmt.eval.numbers import number_counts


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
    for path in args.hypotheses:
        hit, total = number_counts(
            sources, references, read_predictions(path), src=args.src, tgt=args.tgt
        )
        share = 100.0 * hit / total if total else 0.0
        print(f"{path}\t{hit}/{total}\t{share:.1f}%")


if __name__ == "__main__":
    main()
