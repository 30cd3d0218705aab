"""The premature-stop rule's command-line option, one name and one default for `eval`,
`translate` and `serve` (the default is `SearchOptions.premature_stops`)."""

from __future__ import annotations

import argparse

from simulmt.search.options import PrematureStops, SearchOptions

__all__ = ["add_premature_stops", "premature_stops"]


def add_premature_stops(parser: argparse.ArgumentParser) -> None:
    default = SearchOptions.premature_stops.value
    parser.add_argument(
        "--premature-stops",
        choices=[m.value for m in PrematureStops],
        default=default,
        help="a sentence end (. ! ?) before the source sentence is finished: mask it, keep it "
        "tentative and drop it if more words follow, or allow it (the rule off; the model "
        f"then often splits one sentence into two) (default {default})",
    )


def premature_stops(args: argparse.Namespace) -> PrematureStops:
    return PrematureStops(args.premature_stops)
