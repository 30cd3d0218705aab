"""Stream text to a captioning server and show live captions; write WebVTT/SRT from finals.

A dropped connection is resumed (or, if the server process stopped, a new session gets the
words that have no final yet), so the captions go on without a lost or repeated word.

simulmt client talk.de.txt --url ws://127.0.0.1:8765/ws --policy wait-k:k=3 --vtt talk.vtt
echo "Ich habe gestern einen Brief geschrieben ." | simulmt client - --rate 0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from simulmt.cli.liveview import LiveView
from simulmt.cli.options import (
    add_beam_arguments,
    add_policy_argument,
    add_session_arguments,
    pacing_problem,
)
from simulmt.client.stream import StartOptions, StreamLog, run_stream
from simulmt.client.subtitles import build_cues, to_srt, to_webvtt
from simulmt.input.textcheck import clean_words, dropped_note, tolerate_bad_bytes
from simulmt.server.auth import read_token_file

DEFAULT_URL = "ws://127.0.0.1:8765/ws"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default="-", help="source text file, or - for stdin")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"server URL (default {DEFAULT_URL})")
    add_policy_argument(parser, default=None)
    add_beam_arguments(parser, beam_only=True)
    add_session_arguments(parser, server_decides=True, restore=False)
    parser.add_argument(
        "--rate", type=float, default=2.5, help="source words per second (default 2.5; 0 = max)"
    )
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument(
        "--token",
        default=os.environ.get("SIMULMT_TOKEN"),
        help="server token, sent in the `start` frame (default: $SIMULMT_TOKEN)",
    )
    secret.add_argument(
        "--token-file", type=Path, help="read the server token from this file (out of `ps`)"
    )
    parser.add_argument("--vtt", type=Path, help="write WebVTT captions here")
    parser.add_argument("--srt", type=Path, help="write SRT captions here")


async def _stdin_words() -> AsyncIterator[str]:
    tolerate_bad_bytes(sys.stdin)  # bytes that are not UTF-8: see `_clean`
    lineno = 0
    while line := await asyncio.to_thread(sys.stdin.readline):
        lineno += 1
        for word in _clean(line, f"stdin line {lineno}"):
            yield word


async def _file_words(path: Path) -> AsyncIterator[str]:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    for lineno, line in enumerate(text.splitlines(), start=1):
        for word in _clean(line, f"{path} line {lineno}"):
            yield word


def _clean(line: str, where: str) -> tuple[str, ...]:
    """The line's words without what no text may hold (bytes that are not UTF-8, read as lone
    surrogates, and control characters), with a note naming the line: sent as they were, they
    made the client fail (a file's stream hung, stdin's raised UnicodeEncodeError)."""
    words, dropped = clean_words(line.split())
    if dropped is not None:
        print(f"simulmt client: {where}: {dropped_note(dropped, rest='sent')}", file=sys.stderr)
    return words


def _words(source: str, rate: float) -> AsyncIterator[str]:
    words = _stdin_words() if source == "-" else _file_words(Path(source))
    return _pace(words, rate)


async def _pace(words: AsyncIterator[str], rate: float) -> AsyncIterator[str]:
    """At most `rate` words per second (0 = no limit); a live stdin is never read ahead."""
    next_at = time.monotonic()
    async for word in words:
        if rate > 0:
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            next_at = max(time.monotonic(), next_at) + 1 / rate
        yield word


def write_captions(log: StreamLog, *, vtt: Path | None, srt: Path | None) -> int:
    cues = build_cues(log.timed_sentences())
    if vtt is not None:
        vtt.write_text(to_webvtt(cues), encoding="utf-8")
    if srt is not None:
        srt.write_text(to_srt(cues), encoding="utf-8")
    return len(cues)


def start_options(args: argparse.Namespace) -> StartOptions:
    """The session this command line asks for; unset options are left to the server."""
    return StartOptions(
        policy=args.policy,
        beam=args.beam,
        segmentation=args.segmentation,
        segment_lookahead=args.segment_lookahead,
        fillers="keep" if args.keep_fillers else None,
        numbers="keep" if args.keep_number_format else None,
        input_kind=args.input_kind,
    )


def run(args: argparse.Namespace) -> int:
    if args.file != "-" and not Path(args.file).is_file():
        print(f"simulmt client: no such file: {args.file}", file=sys.stderr)
        return 2
    if (problem := pacing_problem(args.rate)) is not None:
        print(f"simulmt client: {problem}", file=sys.stderr)
        return 2
    try:
        token = read_token_file(args.token_file) if args.token_file else args.token or None
    except ValueError as e:
        print(f"simulmt client: {e}", file=sys.stderr)
        return 2
    view = LiveView(sys.stdout, live=sys.stdout.isatty(), width=shutil.get_terminal_size().columns)
    try:
        log = asyncio.run(
            run_stream(
                args.url,
                _words(args.file, args.rate),
                start=start_options(args),
                token=token,
                on_message=view,
            )
        )
    except (OSError, TimeoutError) as e:
        print(f"simulmt client: cannot reach {args.url}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # e.g. InvalidStatus for 401/403/503 at the handshake
        print(f"simulmt client: {e}", file=sys.stderr)
        return 1
    if args.vtt or args.srt:
        n = write_captions(log, vtt=args.vtt, srt=args.srt)
        print(f"wrote {n} cues", file=sys.stderr)
    ok = log.close_code == 1000  # fatal errors of earlier sessions were recovered from
    if not ok:
        print(f"simulmt client: closed with {log.close_code} {log.close_reason}", file=sys.stderr)
    return 0 if ok else 1
