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

from simulmt.cli.liveview import LiveView
from simulmt.cli.options import (
    add_deprecated,
    add_policy_argument,
    add_policy_file_argument,
    add_search_arguments,
    add_session_arguments,
    pacing_problem,
    search_settings,
    session_settings,
)
from simulmt.defaults import DEFAULT_POLICY
from simulmt.engine import Engine
from simulmt.input.kinds import InputKind
from simulmt.input.sentences import Segmentation
from simulmt.input.textcheck import clean_words, dropped_note, tolerate_bad_bytes
from simulmt.output.updates import Update
from simulmt.policies.base import PolicyError
from simulmt.policies.files import load_policy_files
from simulmt.search.options import SearchOptions
from simulmt.session import InputError, Session


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy_argument(parser, default=DEFAULT_POLICY)
    add_policy_file_argument(parser)
    add_search_arguments(parser)  # beam, scoring, speculation, guards, precision
    add_session_arguments(parser, old_spellings=False)  # segmentation, input kind, fillers, ...
    parser.add_argument(
        "--model", type=Path, help="model folder (default: the bundled de→en model)"
    )
    parser.add_argument(
        "--source", type=Path, metavar="FILE",
        help="read source lines from this file (default: stdin)",
    )  # fmt: skip
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="source words per second, to simulate a speaker (default 0: as fast as possible)",
    )
    parser.add_argument(
        "--jsonl", action="store_true", help="one JSON object per update instead of live text"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1, the fastest for one "
        "stream)",
    )  # fmt: skip
    # earlier spellings, one release more (here --lookahead was the beam's, --input the file)
    add_deprecated(parser, "--lookahead", dest="speculate", new="--speculate", type=int)
    add_deprecated(parser, "--input", dest="source", new="--source", type=Path)
    add_deprecated(parser, "--recognizer", dest="input_kind", new="--input-kind recognizer",
                   const=InputKind.RECOGNIZER.value)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if (problem := pacing_problem(args.rate)) is not None:
        print(f"simulmt translate: {problem}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(max(1, args.threads))
    try:
        load_policy_files(args.policy_file)
        opts = SearchOptions(**search_settings(args))
        engine = Engine.load(args.model, dtype=args.dtype, turn_streams=1)  # one session
        settings = session_settings(args)
        segmentation = settings["segmentation"]
        session = Session(engine, policy=args.policy, options=opts, **settings)
    except (PolicyError, ValueError, OSError) as e:
        print(f"simulmt translate: {e}", file=sys.stderr)
        return 2
    # bytes that are not UTF-8 arrive as lone surrogates: dropped below with a note naming the
    # line, never a crash that loses the rest of the input
    if args.source:
        source: TextIO = args.source.open(encoding="utf-8", errors="surrogateescape")
    else:
        source = sys.stdin
        tolerate_bad_bytes(source)
    view: JsonView | LiveView = JsonView(sys.stdout)
    if not args.jsonl:
        width = shutil.get_terminal_size().columns
        view = LiveView(sys.stdout, live=sys.stdout.isatty(), width=width)
    try:
        for lineno, line in enumerate(source, start=1):
            words, dropped = clean_words(line.split())
            if dropped is not None:
                print(f"line {lineno}: {dropped_note(dropped, rest='translated')}",
                      file=sys.stderr)
            line = " ".join(words)
            if not line:
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
        if args.source:
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
