"""How finely a test set measures the BLEU gap between two runs of it (paired bootstrap).

python scripts/bleu_gap.py --reference REF.en A B [--threshold 3] [--level 0.95]

A and B are files of translations, one a line, or `instances.log` files that `simulmt eval
--output` wrote, of the same source sentences: typically the written and the recognizer view
of one model (issue #15 asks for a gap within 3 BLEU). Prints BLEU(A) - BLEU(B), its interval
over resampled sentences, and the share of resamples at or below --threshold. A gap a few
tenths from a bar is only "met" or "missed" if the interval says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simulmt.eval.instances import read_predictions
from simulmt.eval.matched import difference_interval
from simulmt.eval.quality import segment_statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--threshold", type=float, default=0.0)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--samples", type=int, default=1000)
    args = parser.parse_args()
    refs = args.reference.read_text(encoding="utf-8").splitlines()
    runs = [segment_statistics(read_predictions(p), refs) for p in (args.a, args.b)]
    d = difference_interval(*runs, level=args.level, threshold=args.threshold,
                            samples=args.samples)
    print(f"BLEU(A) - BLEU(B) = {d.delta:.2f}; {args.level:.0%} interval over resampled "
          f"sentences [{d.low:.2f}, {d.high:.2f}]; at or below {d.threshold:g} in "
          f"{d.at_most:.1%} of {args.samples} resamples")


if __name__ == "__main__":
    main()
