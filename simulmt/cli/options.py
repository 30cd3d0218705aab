"""The options every command line shares, defined once: one name, one meaning, one default.

`translate`, `eval`, `serve`, `client` and the SimulEval agent add their options with these
functions, so a flag means the same thing in each, and its default is read from the one place
that owns it (`SearchOptions`, `simulmt.defaults`, `Segmentation`, `InputKind`, the precision
and device modules). docs/options.md lists them all; tests/test_options.py checks that table
against these parsers.

Earlier spellings (`--lookahead`, `--input`, `--recognizer`, `--source-style`) still work for
one release, hidden from `--help`, with a warning on stderr that names the new flag.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from simulmt.defaults import DEFAULT_POLICY, SEGMENT_LOOKAHEAD
from simulmt.input.kinds import InputKind
from simulmt.input.sentences import Segmentation
from simulmt.search.options import PrematureStops, Scoring, SearchOptions, WriteUnit

__all__ = [
    "add_deprecated",
    "add_device_argument",
    "add_dtype_argument",
    "add_guard_arguments",
    "add_policy_argument",
    "add_policy_file_argument",
    "add_search_arguments",
    "add_session_arguments",
    "pacing_problem",
    "search_settings",
    "session_settings",
]

_OPTS = SearchOptions()


class _Deprecated(argparse.Action):
    """An earlier spelling of an option: accepted until the next release, with a warning."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        new: str,
        convert: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.new, self.convert = new, convert
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"{parser.prog}: warning: {option_string} is deprecated and will be removed in the "
            f"next release; use {self.new}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, self.convert(values) if self.convert else values)


def add_deprecated(
    parser: argparse.ArgumentParser,
    flag: str,
    *,
    dest: str,
    new: str,
    const: Any = None,
    values: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> None:
    """Keep `flag` as a hidden alias of `new` (whose value lands in `dest`). `const`: a flag
    without a value that sets `dest` to it; `values`: old value -> new value."""
    if const is not None:
        kwargs["nargs"] = 0
        convert: Callable[[Any], Any] | None = lambda _: const  # noqa: E731
    elif values is not None:
        kwargs["choices"] = list(values)
        convert = values.__getitem__
    else:
        convert = None
    parser.add_argument(
        flag, dest=dest, action=_Deprecated, new=new, convert=convert,
        default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs,
    )  # fmt: skip


# ---- the policy ---------------------------------------------------------------------------
def add_policy_argument(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    """`--policy SPEC` of a command that runs one policy (`default` None: the server's)."""
    shown = f"default {default}" if default else f"default: the server's, {DEFAULT_POLICY}"
    parser.add_argument(
        "--policy", default=default, metavar="SPEC",
        help=f"policy spec, e.g. wait-k:k=3 (`simulmt policies` lists them; {shown})",
    )  # fmt: skip


def add_policy_file_argument(parser: argparse.ArgumentParser) -> None:
    """`--policy-file FILE` of a command that runs policies in this process (not `client`: its
    policy runs on the server)."""
    parser.add_argument(
        "--policy-file", type=Path, action="append", metavar="FILE",
        help="a Python file whose BasePolicy subclasses become policies of this run under their "
             "ClassVar name, to try a policy out before packaging it (repeatable)",
    )  # fmt: skip


def pacing_problem(rate: float) -> str | None:
    """Why a `--rate` that paces the words sent (`translate`, `client`) is refused, if it is."""
    if rate >= 0:  # NaN fails this too
        return None
    return f"--rate must be >= 0 words per second (0: as fast as possible), got {rate}"


# ---- the search ---------------------------------------------------------------------------
def add_beam_arguments(parser: argparse.ArgumentParser, *, beam_only: bool = False) -> None:
    """Beam size and, unless `beam_only` (a client: the server owns the rest), how the beam
    ranks, speculates and writes."""
    a = parser.add_argument
    a("--beam", type=int, default=_OPTS.beam, help=f"beam size (default {_OPTS.beam}: greedy)")
    if beam_only:
        return
    a(
        "--scoring",
        choices=[s.value for s in Scoring],
        default=_OPTS.scoring.value,
        help=f"how the beam ranks hypotheses of different lengths (default {_OPTS.scoring.value})",
    )
    a(
        "--alpha",
        type=float,
        default=_OPTS.alpha,
        help=f"GNMT length-normalization exponent (default {_OPTS.alpha:g})",
    )
    a(
        "--speculate",
        type=int,
        default=_OPTS.speculate,
        metavar="N",
        help="with --beam > 1 and a simultaneous policy: commit a token once every hypothesis "
        "agrees on it or the beam has searched N tokens past what is committed (speculative "
        f"beam search, Zheng et al. 2019; default {_OPTS.speculate})",
    )
    a(
        "--coverage",
        type=float,
        default=_OPTS.beta,
        metavar="BETA",
        help="GNMT coverage penalty weight for beam search: favours finished hypotheses that "
        f"attended to every source token (default {_OPTS.beta:g}: off)",
    )
    a(
        "--unit",
        choices=[u.value for u in WriteUnit],
        default=_OPTS.unit.value,
        help="what one WRITE writes: a whole target word (default) or one subword token "
        "(the token-level schedules of earlier releases, for comparison)",
    )


def add_guard_arguments(parser: argparse.ArgumentParser) -> None:
    """The guards against degenerate output (loops, sentence ends too early) and against
    mangled names."""
    parser.add_argument(
        "--loop-guard",
        type=int,
        default=_OPTS.loop_guard,
        metavar="N",
        help="ban the token that would repeat a cycle of up to N tokens a third time in a row, "
        "and a second sentence stop right after one ('..') "
        f"(degenerate loops on unfamiliar input; default {_OPTS.loop_guard}; 0: off)",
    )
    default = _OPTS.premature_stops.value
    parser.add_argument(
        "--premature-stops",
        choices=[m.value for m in PrematureStops],
        default=default,
        help="a sentence end (. ! ?) before the source sentence is finished: mask it, keep it "
        "tentative and drop it if more words follow, or allow it (the rule off; the model "
        f"then often splits one sentence into two) (default {default})",
    )
    parser.add_argument(
        "--copy-bonus",
        type=float,
        default=_OPTS.copy_bonus,
        metavar="B",
        help="add B to the log-probability of each piece of the source's names (capitalised "
        "words after the first, of two or more pieces), which the model often mangles "
        f"(default {_OPTS.copy_bonus:g}; 0: off)",
    )


def add_dtype_argument(parser: argparse.ArgumentParser, *, flag: str = "--dtype") -> None:
    """The precision (`flag`: its name, for a host program that owns ``--dtype``, as SimulEval
    does; the value lands under that name)."""
    from simulmt.model.runtime import AUTO_DTYPE, CLI_DTYPE, DTYPE_NAMES

    parser.add_argument(
        flag,
        choices=(AUTO_DTYPE, *DTYPE_NAMES),
        default=CLI_DTYPE,
        help=f"inference precision (default {CLI_DTYPE}: time each precision this CPU runs "
        "natively at load and keep the fastest, never one slower than float32; int8: int8 "
        "weights in every linear layer, a row's output independent of its batch; bfloat16: "
        "fast on AMX/AVX512-BF16 CPUs, emulated and slow elsewhere)",
    )


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """Where the model runs."""
    parser.add_argument(
        "--device", default="cpu",
        help="where the model runs: cpu (default), cuda, cuda:N or auto (cuda if there is a "
        "GPU); cuda runs float32 or bfloat16 (--dtype auto means float32 there), not int8",
    )  # fmt: skip


def add_search_arguments(parser: argparse.ArgumentParser, *, dtype_flag: str = "--dtype") -> None:
    """Everything a command that runs the search itself takes: beam, scoring, speculation,
    coverage, write unit, the guards and the precision."""
    add_beam_arguments(parser)
    add_guard_arguments(parser)
    add_dtype_argument(parser, flag=dtype_flag)


def search_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `SearchOptions` fields that `add_search_arguments` set (`RunConfig` takes them too,
    naming the coverage weight `beta`, as `SearchOptions` does)."""
    return {
        "beam": args.beam,
        "scoring": Scoring(args.scoring),
        "alpha": args.alpha,
        "beta": args.coverage,
        "speculate": args.speculate,
        "unit": WriteUnit(args.unit),
        "loop_guard": args.loop_guard,
        "premature_stops": PrematureStops(args.premature_stops),
        "copy_bonus": args.copy_bonus,
    }


# ---- the session: what ends a sentence, what the words are ---------------------------------
def add_session_arguments(
    parser: argparse.ArgumentParser,
    *,
    server_decides: bool = False,
    input_auto: bool = False,
    restore: bool = True,
    old_spellings: bool = True,
) -> None:
    """Segmentation, the input kind, fillers and number notation.

    `server_decides`: a client's options, None unless given (the server applies its own
    defaults). `input_auto`: `--input-kind auto` (eval: from `--source-view`). `restore`:
    offer `--restore-lookahead` (the protocol leaves it to the server). `old_spellings`: accept
    `--lookahead` and `--input` in their meaning here (`translate` had other meanings for
    them, and keeps those itself)."""
    a = parser.add_argument
    seg_default = None if server_decides else Segmentation.PUNCTUATION.value
    a(
        "--segmentation",
        choices=[m.value for m in Segmentation],
        default=seg_default,
        help="what ends a sentence: punctuation (. ! ? and the end of a line or document), "
        "client (only a line's or document's end, a flush, and the length limit) or auto "
        "(the model's boundary detector, for a speech recognizer's unpunctuated stream) "
        + (
            "(default: the server's: auto when its model has a detector, else punctuation)"
            if server_decides
            else f"(default {seg_default})"
        ),
    )
    look_default = None if server_decides else SEGMENT_LOOKAHEAD
    a(
        "--segment-lookahead",
        type=int,
        default=look_default,
        metavar="N",
        help="--segmentation auto: words the detector reads past a possible boundary before "
        f"it decides; each adds its wait to every delay (default {SEGMENT_LOOKAHEAD})",
    )
    kinds = [k.value for k in InputKind]
    kind_default = "auto" if input_auto else (None if server_decides else InputKind.TEXT.value)
    a(
        "--input-kind",
        choices=(["auto"] if input_auto else []) + kinds,
        default=kind_default,
        help="what the source words look like: text (as written) or recognizer (a speech "
        "recognizer's lowercase output without punctuation: case and commas are restored "
        "first, by the model's restorer.pt) "
        + (
            "(default auto: recognizer for --source-view recognizer when the model has a "
            "restorer, else text)"
            if input_auto
            else f"(default {InputKind.TEXT.value})"
        ),
    )
    if restore:
        a(
            "--restore-lookahead",
            type=int,
            default=None,
            metavar="N",
            help="--input-kind recognizer: words the restorer reads past a word before "
            "restoring it (0-2; default: 2 for the full-sentence policy, where waiting costs "
            "no latency, except with --segmentation auto; else 0, which is best at equal AL)",
        )
    a(
        "--keep-fillers",
        action="store_true",
        help="translate hesitation sounds (äh, ähm, hm) too; by default they never reach the "
        "model",
    )
    a(
        "--keep-number-format",
        action="store_true",
        help="let the model read and copy numbers and currency signs itself (it writes German "
        "2.100, 16,1 and drops digit groups: 700.000 as 70,000); by default a number it would "
        "miscopy reaches it as a placeholder and is written from the source in the target's "
        "notation (700,000, 16.1), and currency signs (£ € ¥ $) reach it as words",
    )
    if not old_spellings:
        return
    # earlier spellings, one release more
    add_deprecated(parser, "--lookahead", dest="segment_lookahead", new="--segment-lookahead",
                   type=int)  # fmt: skip
    add_deprecated(parser, "--input", dest="input_kind", new="--input-kind",
                   values={k: k for k in (["auto"] if input_auto else []) + kinds})  # fmt: skip


def session_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `Session` keywords that `add_session_arguments` set. Input kind `auto` (eval) is
    text here: the caller turns it into recognizer once it knows the model has a restorer."""
    kind = InputKind.TEXT if args.input_kind == "auto" else InputKind(args.input_kind)
    return {
        "segmentation": Segmentation(args.segmentation),
        "segment_lookahead": args.segment_lookahead,
        "input_kind": kind,
        "restore_lookahead": args.restore_lookahead,
        "drop_fillers": not args.keep_fillers,
        "localise_numbers": not args.keep_number_format,
    }

