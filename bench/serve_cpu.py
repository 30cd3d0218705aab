"""The serve worker's compute per source word, replayed in one process on a simulated clock.

`bench/load.py` measures the whole deployment (nginx, two processes, 100 websocket clients)
and its p95 moves by half between runs of the same code: the 2 cores are saturated, so the
figure is mostly queueing. This replays the same traffic through the worker's own loop without
sockets: N sessions speak slices of a test set at a speech-like rate, each turn feeds the words
that have arrived by the simulated time and calls `advance(..., max_steps=1)` on every session
with work, as `server/worker.py` does, and the turn's CPU time moves the clock on. Reported: CPU
ms per source word (the capacity figure: steadier than a load run), turns and their mean
batch, and the added delays the clock implies for one process with a core to itself (load.py's
definition, split into words written mid-sentence and after the sentence's last word).

    .venv/bin/python bench/serve_cpu.py --source cache/test-1in5.de --sessions 50 --seconds 20
    .venv/bin/python bench/serve_cpu.py --repeats 3   # best CPU per word of three replays
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from simulmt.server.config import ServerConfig

from simulmt.engine import Engine
from simulmt.input.sentences import Segmentation
from simulmt.search.options import SearchOptions
from simulmt.session import Session, advance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import client_words, load_sentences  # noqa: E402  (bench/ is not a package)
from machine import describe  # noqa: E402


@dataclass
class Speaker:
    """One simulated client: its words, their arrival times, and what came back."""

    session: Session
    words: list[str]
    arrivals: list[float]  # seconds on the simulated clock
    fed: int = 0
    ended: bool = False
    sentence_start: int = 0  # stream index of the current sentence's first source word
    pending: list[tuple[float, int]] = field(default_factory=list)  # (delay ms, needed word)
    delays: list[tuple[float, bool]] = field(default_factory=list)  # (ms, after the last word)

    def due(self, now: float) -> list[str]:
        """Words that have arrived by `now` and were not fed yet."""
        start = self.fed
        while self.fed < len(self.words) and self.arrivals[self.fed] <= now:
            self.fed += 1
        return self.words[start : self.fed]


@dataclass(frozen=True)
class Replay:
    cpu_s: float
    source_words: int
    turns: int
    rows: int  # sessions advanced, summed over turns
    updates: int  # what a server would send as `partial`/`final` messages
    delays: list[tuple[float, bool]]

    def p(self, q: int, *, end: bool | None = None) -> float:
        values = [d for d, e in self.delays if end is None or e == end]
        if len(values) < 2:
            return float("nan")
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def replay(engine: Engine, sentences: list[str], args: argparse.Namespace) -> Replay:
    now = 0.0
    rng = random.Random(args.seed)
    options = SearchOptions()
    speakers = []
    for i in range(args.sessions):
        words = client_words(sentences, i, round(args.seconds * args.rate))
        offset = rng.random() / args.rate  # clients do not speak in lockstep
        session = Session(
            engine,
            policy=args.policy,
            options=options,
            segmentation=Segmentation.PUNCTUATION,
            clock=lambda: now,
            tentative_hold_ms=args.tentative_hold_ms,
        )
        arrivals = [offset + j / args.rate for j in range(len(words))]
        speakers.append(Speaker(session, words, arrivals))
    cpu = 0.0
    turns = rows = updates = 0
    while True:
        active = []
        for s in speakers:
            words = s.due(now)
            if words:
                s.session.feed(" ".join(words))
            if s.fed == len(s.words) and not s.ended:
                s.session.end_source()
                s.ended = True
            if s.session.has_work:
                active.append(s)
        if not active:
            upcoming = [s.arrivals[s.fed] for s in speakers if s.fed < len(s.words)]
            if not upcoming:
                break
            now = min(upcoming)
            continue
        t0 = time.thread_time()
        outs = advance(engine, [s.session for s in active], max_steps=args.steps_per_turn)
        spent = time.thread_time() - t0
        cpu += spent
        now += spent if args.turn_ms is None else args.turn_ms / 1000
        turns += 1
        rows += len(active)
        for s, session_updates in zip(active, outs, strict=True):
            updates += len(session_updates)
            for update in session_updates:
                for d in update.delays:
                    needed = s.sentence_start + d - 1
                    s.pending.append(((now - s.arrivals[needed]) * 1000, needed))
                if update.final:
                    s.sentence_start += len(update.source.split())
                    s.delays += [(ms, n == s.sentence_start - 1) for ms, n in s.pending]
                    s.pending = []
    delays = [d for s in speakers for d in s.delays + [(ms, False) for ms, _ in s.pending]]
    return Replay(cpu, sum(len(s.words) for s in speakers), turns, rows, updates, delays)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", type=Path, help="model folder (default: the bundled model)")
    model.add_argument("--tiny", action="store_true", help="the random tiny test model")
    p.add_argument("--source", type=Path, help="German sentences, one a line (default: assets)")
    p.add_argument("--sessions", type=int, default=50, help="one server process's share")
    p.add_argument("--seconds", type=float, default=20.0, help="how long each client speaks")
    p.add_argument("--rate", type=float, default=2.5, help="source words per second per client")
    p.add_argument("--policy", default="wait-k:k=3")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--steps-per-turn", type=int, default=1, help="decoder steps a turn (as serve's option)"
    )
    p.add_argument(
        "--tentative-hold-ms",
        type=float,
        default=ServerConfig.tentative_hold_ms,
        help="as serve's option (default: serve's)",
    )
    p.add_argument(
        "--turn-ms",
        type=float,
        help="move the clock on by this much per turn instead of the turn's CPU time: the same "
        "turns and batches every replay, so CPU per word compares code versions alone",
    )
    p.add_argument("--repeats", type=int, default=1, help="replays; the best CPU time is kept")
    args = p.parse_args()
    print(describe(), flush=True)
    torch.set_num_threads(1)
    engine = Engine.tiny() if args.tiny else Engine.load(args.model, dtype=args.dtype)
    sentences = load_sentences(args.source)
    print(
        f"{args.sessions} sessions, {args.policy}, {args.rate} words/s for 60-100% of "
        f"{args.seconds:g} s, {engine.precision} on one thread\n"
    )
    print("| replay | CPU ms / source word | turns | mean batch | updates / source word "
          "| p50 ms | p95 ms | p95 mid-sentence | p95 after the last word |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    best = None
    for r in range(args.repeats):
        run = replay(engine, sentences, args)
        per_word = 1000 * run.cpu_s / run.source_words
        best = per_word if best is None else min(best, per_word)
        print(
            f"| {r + 1} | {per_word:.2f} | {run.turns} | {run.rows / max(run.turns, 1):.1f} "
            f"| {run.updates / run.source_words:.2f} | {run.p(50):.0f} | {run.p(95):.0f} "
            f"| {run.p(95, end=False):.0f} | {run.p(95, end=True):.0f} |",
            flush=True,
        )
    print(f"\nbest: {best:.2f} ms of CPU per source word")
    return 0


if __name__ == "__main__":
    sys.exit(main())
