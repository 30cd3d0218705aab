"""Translate text as it streams in (`simulmt translate`): live terminal captions or JSON lines."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from simulmt.engine import Engine
from simulmt.inputs import InputKind
from simulmt.liveview import LiveView
from simulmt.policies.base import PolicyError
from simulmt.runtime import add_dtype_argument
from simulmt.search.options import CLI_LOOP_GUARD, Scoring, SearchOptions, WriteUnit
from simulmt.sentences import Segmentation
from simulmt.session import InputError, Session
from simulmt.stops_cli import add_premature_stops, premature_stops
from simulmt.updates import Update


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        default="wait-k:k=3",
        help="policy spec, e.g. wait-k:k=3 (see `simulmt policies`)",
    )
    parser.add_argument("--beam", type=int, default=1, help="beam size (default 1: greedy)")
    parser.add_argument(
        "--speculate",
        "--lookahead",  # its earlier name; `eval` and `client` use --lookahead for segmentation
        dest="speculate",
        type=int,
        default=SearchOptions.lookahead,
        metavar="N",
        help="with --beam > 1 and a simultaneous policy: commit a token once every hypothesis "
        "agrees on it or the beam has searched N tokens past what is committed (speculative "
        f"beam search; default {SearchOptions.lookahead}, as `eval` and `serve`)",
    )
    parser.add_argument("--scoring", choices=[s.value for s in Scoring], default=Scoring.GNMT.value)
    parser.add_argument(
        "--unit",
        choices=[u.value for u in WriteUnit],
        default=WriteUnit.WORD.value,
        help="what one WRITE writes: a whole word (default) or one subword token",
    )
    parser.add_argument(
        "--loop-guard",
        type=int,
        default=CLI_LOOP_GUARD,
        metavar="N",
        help="ban the token that would repeat a cycle of up to N tokens a third time, and a "
        "second sentence stop right after one "
        f"(default {CLI_LOOP_GUARD}; 0: off)",
    )
    add_premature_stops(parser)
    parser.add_argument(
        "--segmentation",
        choices=[m.value for m in Segmentation],
        default=Segmentation.PUNCTUATION.value,
        help="what ends a sentence: punctuation (. ! ? and each line's end; default), client "
        "(each line's end only) or auto (the model's boundary detector; line breaks are "
        "ignored, for a recognizer's unpunctuated output)",
    )
    parser.add_argument(
        "--segment-lookahead",
        type=int,
        default=2,
        help="--segmentation auto: words the detector reads past a boundary (default 2)",
    )
    parser.add_argument(
        "--recognizer",
        action="store_true",
        help="the lines are a speech recognizer's output (lowercase, no punctuation): restore "
        "case and commas (the model's restorer.pt) before translating",
    )
    parser.add_argument(
        "--restore-lookahead",
        type=int,
        default=None,
        help="--recognizer: words the restorer reads past a word before restoring it (0-2; "
        "default: 2 for the full-sentence policy without --segmentation auto, else 0)",
    )
    parser.add_argument(
        "--keep-fillers",
        action="store_true",
        help="translate hesitation sounds (äh, ähm, hm) too; by default they are dropped",
    )
    parser.add_argument(
        "--keep-number-format",
        action="store_true",
        help="write numbers as the model copies them (German 2.100, 16,1); by default a number "
        "copied in the source's notation is written in the target's (2,100, 16.1)",
    )
    parser.add_argument(
        "--model", type=Path, help="model folder (default: the bundled de→en model)"
    )
    parser.add_argument(
        "--input", type=Path, help="read source lines from this file instead of stdin"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="words per second to simulate a speaker (0: as fast as possible)",
    )
    parser.add_argument(
        "--jsonl", action="store_true", help="one JSON object per update instead of live text"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest for one stream)"
    )
    add_dtype_argument(parser)


def run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(max(1, args.threads))
    try:
        opts = SearchOptions(
            beam=args.beam,
            lookahead=args.speculate,
            scoring=Scoring(args.scoring),
            unit=WriteUnit(args.unit),
            loop_guard=args.loop_guard,
            premature_stops=premature_stops(args),
        )
        engine = Engine.load(args.model, dtype=args.dtype)
        segmentation = Segmentation(args.segmentation)
        session = Session(
            engine,
            policy=args.policy,
            options=opts,
            segmentation=segmentation,
            lookahead=args.segment_lookahead,
            drop_fillers=not args.keep_fillers,
            localise_numbers=not args.keep_number_format,
            input_kind=InputKind.RECOGNIZER if args.recognizer else InputKind.TEXT,
            restore_lookahead=args.restore_lookahead,
        )
    except (PolicyError, ValueError, OSError) as e:
        print(f"simulmt translate: {e}", file=sys.stderr)
        return 2
    source = args.input.open(encoding="utf-8") if args.input else sys.stdin
    view: JsonView | LiveView = JsonView(sys.stdout)
    if not args.jsonl:
        width = shutil.get_terminal_size().columns
        view = LiveView(sys.stdout, live=sys.stdout.isatty(), width=width)
    try:
        for lineno, line in enumerate(source, start=1):
            if not line.strip():
                print(f"line {lineno}: empty line skipped", file=sys.stderr)
                continue
            try:
                for chunk in _chunks(line, args.rate):
                    view.show(session.push(chunk))
                if segmentation is not Segmentation.AUTO:
                    view.show(session.flush())
            except InputError as e:
                print(f"line {lineno}: {e}", file=sys.stderr)
            _warn(session, lineno)
        view.show(session.finish())
    except KeyboardInterrupt:
        view.show(session.finish())
    finally:
        if args.input:
            source.close()
    return 0


def _chunks(line: str, rate: float) -> Iterator[str]:
    if rate <= 0:
        yield line
        return
    for word in line.split():
        time.sleep(1.0 / rate)
        yield word


def _warn(session: Session, lineno: int) -> None:
    for w in session.warnings:
        print(f"line {lineno}: note: {w}", file=sys.stderr)
    session.warnings.clear()


class JsonView:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def show(self, updates: Iterable[Update]) -> None:
        for u in updates:
            record = {
                "sentence_id": u.sentence_id,
                "committed_delta": u.committed_delta,
                "tentative": u.tentative,
                "delays": list(u.delays),
                "emitted_ms": [round(t, 1) for t in u.emitted_ms],
                "final": u.final,
            }
            if u.final:
                record.update(text=u.text, source=u.source)
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.out.flush()
