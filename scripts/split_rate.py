"""The split measure of `simulmt eval` (eval/splits.py) for runs already written: the percent of
outputs with a sentence end followed by more words, over the lines whose source has none.

python scripts/split_rate.py RUN/instances.log [RUN2/instances.log ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simulmt.eval.instances import read_instances
from simulmt.eval.splits import one_sentence, split_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("logs", type=Path, nargs="+")
    for path in parser.parse_args().logs:
        stats = read_instances(path)
        sources = [s.source for s in stats]
        rate = split_rate(sources, [s.prediction for s in stats])
        single = sum(one_sentence(s) for s in sources)
        shown = "-" if rate is None else f"{rate:.2f}"
        print(f"{path}\tsplits % {shown}\tof {single} single-sentence lines ({len(stats)} lines)")


if __name__ == "__main__":
    main()
