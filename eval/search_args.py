"""The search options of every way of running a policy on a test set, defined once.

`simulmt eval` and the SimulEval agent (`simulmt.eval.simuleval_agent`) both add these
arguments with this function, so they take the same names and the same defaults and a line
is translated alike by both (bench/eval_speed.py checks that on every sentence). The defaults
are the command lines' ones (`CLI_LOOP_GUARD`, `RunConfig`'s), not the library's.
"""

from __future__ import annotations

import argparse
from typing import Any

from simulmt.eval.options import RunConfig

from simulmt.runtime import add_dtype_argument
from simulmt.search.options import CLI_LOOP_GUARD, Scoring, WriteUnit

__all__ = ["add_search_arguments", "search_settings"]


def add_search_arguments(parser: argparse.ArgumentParser, *, dtype_flag: str = "--dtype") -> None:
    """Beam, scoring, speculation, coverage, write unit, loop guard, number notation and
    precision. `dtype_flag`: the precision's flag name (SimulEval owns ``--dtype``; the value
    lands under the flag's own name, e.g. ``args.precision``)."""
    a = parser.add_argument
    a("--beam", type=int, default=RunConfig.beam, help="beam size (default 1: greedy)")
    a(
        "--scoring",
        choices=[s.value for s in Scoring],
        default=RunConfig.scoring.value,
        help="how the beam ranks hypotheses of different lengths "
        f"(default {RunConfig.scoring.value})",
    )
    a(
        "--alpha",
        type=float,
        default=RunConfig.alpha,
        help=f"GNMT length-normalization exponent (default {RunConfig.alpha})",
    )
    a(
        "--speculate",
        type=int,
        default=RunConfig.speculate,
        metavar="N",
        help="with --beam > 1 and a simultaneous policy: commit a token once every hypothesis "
        "agrees on it or the beam has searched N tokens past what is committed (speculative "
        f"beam search, Zheng et al. 2019; default {RunConfig.speculate})",
    )
    a(
        "--coverage",
        type=float,
        default=RunConfig.beta,
        metavar="BETA",
        help="GNMT coverage penalty weight for beam search: favours finished hypotheses that "
        f"attended to every source token (default {RunConfig.beta}: off)",
    )
    a(
        "--unit",
        choices=[u.value for u in WriteUnit],
        default=RunConfig.unit.value,
        help="what one WRITE writes: a whole target word (default) or one subword token "
        "(the token-level schedules of earlier releases, for comparison)",
    )
    a(
        "--loop-guard",
        type=int,
        default=CLI_LOOP_GUARD,
        metavar="N",
        help="ban the token that would repeat a cycle of up to N tokens a third time in a row, "
        "and a second sentence stop right after one ('..') "
        f"(degenerate loops on unfamiliar input; default {CLI_LOOP_GUARD}; 0: off)",
    )
    a(
        "--keep-number-format",
        action="store_true",
        help="write numbers as the model copies them (German 2.100, 16,1); by default, as "
        "`serve` does, a number copied in the source's notation is written in the target's "
        "(2,100, 16.1)",
    )
    # every command line's precision option (auto: the fastest on this CPU, issue #55); its
    # int8 gives a row the same output in any batch, so outputs still do not vary by batch
    add_dtype_argument(parser, flag=dtype_flag)


def search_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `RunConfig` fields these arguments set (the precision is the engine's: `args.dtype`)."""
    return {
        "beam": args.beam,
        "scoring": Scoring(args.scoring),
        "alpha": args.alpha,
        "beta": args.coverage,
        "speculate": args.speculate,
        "unit": WriteUnit(args.unit),
        "loop_guard": args.loop_guard,
        "localise_numbers": not args.keep_number_format,
    }
