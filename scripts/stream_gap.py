"""Where a policy's StreamLAAL departs from its sentence-level LAAL, sentence by sentence.

Reads the `instances.log` of a long-form run and of a sentence-level run of the same policy on
the same sentences (`simulmt eval --long-form ... --output A` and `simulmt eval ... --output B`,
the sentence-level source being the documents' lines in order) and prints the means, the
medians, and the mean gap without the N sentences that differ most: a mean carried by a few
sentences points at resegmentation of degenerate output rather than at the policy's lag.

    python scripts/stream_gap.py A/POLICY_DIR B/POLICY_DIR [--drop 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from simulmt.eval.latency import length_adaptive_average_lagging


def read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (path / "instances.log").open(encoding="utf-8")
            if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("long_form", type=Path, help="a long-form run's policy folder")
    ap.add_argument("sentences", type=Path, help="a sentence-level run's policy folder")
    ap.add_argument("--drop", type=int, default=10, help="sentences left out of the last column")
    args = ap.parse_args()
    docs = read(args.long_form)
    stream = [float(x) for d in docs for x in d["stream_laal"]]  # type: ignore[attr-defined]
    refs = [str(r) for d in docs for r in d["references"]]  # type: ignore[attr-defined]
    rows = sorted(read(args.sentences), key=lambda r: int(r["index"]))  # type: ignore[call-overload]
    if len(rows) != len(stream):
        raise SystemExit(f"{len(rows)} sentence-level instances for {len(stream)} reference "
                         "sentences in the long-form run: run both on the same sentences")
    laal = []
    for row, ref in zip(rows, refs, strict=True):
        delays = [float(d) for d in row["delays"]]  # type: ignore[attr-defined]
        x = float(row["source_length"])  # type: ignore[arg-type]
        laal.append(length_adaptive_average_lagging(delays, x, len(ref.split())))
    gaps = sorted(s - la for s, la in zip(stream, laal, strict=True))
    kept = gaps[: len(gaps) - args.drop] or gaps
    print(f"{len(gaps)} sentences: LAAL mean {statistics.mean(laal):.2f} median "
          f"{statistics.median(laal):.2f}; StreamLAAL mean {statistics.mean(stream):.2f} median "
          f"{statistics.median(stream):.2f}; mean gap {statistics.mean(gaps):+.2f}, without the "
          f"{args.drop} largest {statistics.mean(kept):+.2f}")


if __name__ == "__main__":
    main()
