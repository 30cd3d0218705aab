"""Insert hesitation fillers into source lines, as a verbatim speech recognizer writes them.

A test-set generator for the filler benchmark (README, "Hesitation fillers"): spontaneous
speech has a few filled pauses per hundred words; this puts one before a word with
probability --rate (seeded, so the file is reproducible).

    python scripts/add_fillers.py --rate 0.04 < cache/nt15-1in5.de > cache/nt15-1in5-fillers.de
"""

from __future__ import annotations

import argparse
import random
import sys

FILLERS = (("äh", 0.5), ("ähm", 0.35), ("hm", 0.15))


def add_fillers(line: str, *, rate: float, rng: random.Random) -> str:
    words = []
    for word in line.split():
        if rng.random() < rate:
            words.append(rng.choices([f for f, _ in FILLERS], [w for _, w in FILLERS])[0])
        words.append(word)
    return " ".join(words)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.04, help="fillers per word (0.04)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 0 <= args.rate < 1:
        parser.error(f"--rate must be in [0, 1), got {args.rate}")
    rng = random.Random(args.seed)
    for line in sys.stdin:
        print(add_fillers(line, rate=args.rate, rng=rng))
    return 0


if __name__ == "__main__":
    sys.exit(main())
