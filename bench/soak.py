"""Fault soak of `simulmt serve`: N captioning sessions for M minutes, with seeded random faults.

Two `simulmt serve` processes behind deploy/nginx.conf (as deployed), clients on loopback. Each
client speaks its slice of a test set at a speech-like rate, and a seeded schedule injects
faults: abrupt disconnects mid-sentence (the client resumes), clients that stop reading for
seconds, bursts of 500 words, malformed frames, unknown message types, oversize frames and
idle pauses; near the end one server process gets SIGTERM (its sessions finish their
sentences, are told to start over, and go to the other process). Reported: lost and
duplicated source words (each word sent must be in exactly one `final`), seq gaps,
sessions that ended in error, p50/p95/p99 added delay, and server RSS after warm-up and at
the end.

    python bench/soak.py --tiny --sessions 10 --minutes 1
    python bench/soak.py --sessions 100 --minutes 10 --threads 1 --source cache/test-1in5.de
    python bench/soak.py --sessions 100 --minutes 10 --faults 0      # the same, without faults
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import added_delays, load_sentences  # noqa: E402  (bench/ is not a package)
from machine import facts  # noqa: E402
from soak_deploy import Deployment  # noqa: E402
from soak_hostile import KINDS, hostile  # noqa: E402

from simulmt.client.stream import StartOptions, StreamClient  # noqa: E402

FAULTS = ("drop", "stall", "burst", "malformed", "unknown_type", "oversize", "idle", "surrogates")


@dataclass
class ClientResult:
    words: int = 0
    lost: int = 0
    duplicated: int = 0
    seq_gaps: int = 0
    ended_ok: bool = False
    resumes: int = 0
    sessions: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    delays_ms: list[float] = field(default_factory=list)


class SoakClient:
    """One speaker with its own seeded fault schedule."""

    def __init__(self, url: str, index: int, args: argparse.Namespace, words: list[str]):
        self.rng = random.Random(args.seed * 100_003 + index)
        self.args, self.words = args, words
        self.client = StreamClient(
            url, start=StartOptions(policy=args.policy), on_message=self._on_message
        )
        self.result = ClientResult()
        self.segments: list[list[int]] = []  # seqs seen, per session
        self.burst = False
        self.idle_s = 0.0

    def _on_message(self, message: dict[str, Any]) -> None:
        if message.get("type") == "session" and "resumed" not in message:
            self.segments.append([])
        if self.segments:
            self.segments[-1].append(int(message.get("seq", 0)))
        if message.get("type") == "error":
            self.result.errors[str(message.get("code"))] += 1

    async def texts(self, deadline: float) -> AsyncIterator[str]:
        i, rate = 0, self.args.rate
        while i < len(self.words) and time.monotonic() < deadline:
            if self.burst:
                self.burst = False
                yield " ".join(self.words[i : i + 500])
                i += 500
                continue
            await asyncio.sleep(1 / rate + self.idle_s)
            self.idle_s = 0.0
            yield self.words[i]
            i += 1

    async def faults(self, deadline: float) -> None:
        if self.args.faults <= 0:
            return
        mean_gap = 60 / self.args.faults
        while True:
            await asyncio.sleep(self.rng.expovariate(1 / mean_gap))
            if time.monotonic() > deadline - 5:
                return
            fault = self.rng.choice(FAULTS)
            self.result.faults[fault] += 1
            await self.inject(fault)

    async def inject(self, fault: str) -> None:
        c = self.client
        if fault == "drop":
            c.drop()
        elif fault == "stall":
            c.reading.clear()
            await asyncio.sleep(self.rng.uniform(2, 6))
            c.reading.set()
        elif fault == "burst":
            self.burst = True
        elif fault == "malformed":
            await c.send_raw('{"type": "source", "text": ')
        elif fault == "unknown_type":
            await c.send_raw(json.dumps({"type": "caption_style", "color": "red"}))
        elif fault == "oversize":
            await c.send_raw(json.dumps({"type": "source", "text": "zu " * 40_000}))
        elif fault == "idle":
            self.idle_s = self.rng.uniform(5, 15)
        elif fault == "surrogates":  # words of lone surrogates only: `bad_text`, nothing taken
            await c.send_raw(json.dumps({"type": "source", "text": "\ud800 \udfff\x00"}))

    async def run(self, deadline: float) -> ClientResult:
        await asyncio.sleep(self.rng.random() * 2)  # clients do not start in lockstep
        faults = asyncio.create_task(self.faults(deadline))
        try:
            log = await self.client.run(self.texts(deadline))
            self.result.ended_ok = log.close_code == 1000
        except Exception as e:  # counted as a session that ended in error
            print(f"client failed: {e!r}", file=sys.stderr)
            log = self.client.log
        finally:
            faults.cancel()
        self._score(log)
        return self.result

    def _score(self, log: Any) -> None:
        r, sent = self.result, self.client.words
        got = " ".join(m["source"] for m in log.messages if m["type"] == "final").split()
        matched = sum(b.size for b in SequenceMatcher(None, sent, got, autojunk=False)
                      .get_matching_blocks())  # fmt: skip
        r.words, r.lost, r.duplicated = len(sent), len(sent) - matched, len(got) - matched
        for seqs in self.segments:
            r.seq_gaps += sum(b - a != 1 for a, b in zip(seqs, seqs[1:], strict=False))
        r.resumes, r.sessions = self.client.resumes, self.client.sessions
        r.delays_ms = [d for d, _ in added_delays(log)]


def client_words(sentences: list[str], index: int, count: int) -> list[str]:
    rng = random.Random(index)
    words: list[str] = []
    i = rng.randrange(len(sentences))
    while len(words) < count:
        words += sentences[i % len(sentences)].split()
        i += 1
    return words


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    sentences = load_sentences(args.source)
    seconds = args.minutes * 60
    count = int(seconds * args.rate) + 1000  # bursts take more
    async with Deployment(args) as deployment:
        start = time.monotonic()
        deadline = start + seconds
        clients = [
            SoakClient(deployment.url, i, args, client_words(sentences, i, count))
            for i in range(args.sessions)
        ]
        tasks = [asyncio.create_task(c.run(deadline)) for c in clients]
        hostiles = {
            f"{kind}_{i}": asyncio.create_task(
                hostile(
                    kind,
                    (deployment.url, f"ws://127.0.0.1:{deployment.ports[-1]}/ws"),
                    deadline,
                    seed=args.seed * 1000 + n,
                )
            )
            for n, (kind, i) in enumerate((k, i) for k in KINDS for i in range(args.hostile))
        }
        await asyncio.sleep(min(seconds * 0.25, 60))  # warm-up: every session started
        rss_warm = deployment.rss_mb()
        await asyncio.sleep(max(0.0, deadline - 0.15 * seconds - time.monotonic()))
        rss_end = deployment.rss_mb()
        if args.sigterm:
            deployment.processes[0].send_signal(signal.SIGTERM)
        results = await asyncio.gather(*tasks)
        elapsed = time.monotonic() - start
        hostile_results = dict(zip(hostiles, await asyncio.gather(*hostiles.values()), strict=True))
    delays = [d for r in results for d in r.delays_ms]
    faults: Counter[str] = sum((r.faults for r in results), Counter())
    errors: Counter[str] = sum((r.errors for r in results), Counter())
    return {
        "sessions": args.sessions,
        "minutes": round(elapsed / 60, 2),
        "seed": args.seed,
        "faults_per_session_minute": args.faults,
        "words": sum(r.words for r in results),
        "lost_words": sum(r.lost for r in results),
        "duplicated_words": sum(r.duplicated for r in results),
        "seq_gaps": sum(r.seq_gaps for r in results),
        "ended_in_error": sum(not r.ended_ok for r in results),
        "resumes": sum(r.resumes for r in results),
        "new_sessions": sum(max(0, r.sessions - 1) for r in results),
        "faults": dict(sorted(faults.items())),
        "errors_received": dict(sorted(errors.items())),
        "added_delay_ms": {f"p{q}": round(percentile(delays, q)) for q in (50, 95, 99)},
        "rss_mb": {"after_warmup": round(rss_warm), "end": round(rss_end)},
        "rss_growth": round(rss_end / rss_warm - 1, 3) if rss_warm else None,
        "hostile": {name: r.report() for name, r in hostile_results.items()},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", type=Path, help="model folder (default: the bundled model)")
    model.add_argument("--tiny", action="store_true", help="the random tiny test model")
    p.add_argument("--source", type=Path, help="German sentences, one a line (default: assets)")
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=2.5, help="source words per second per client")
    p.add_argument("--faults", type=float, default=2.0, help="faults per session-minute (0: none)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policy", default="wait-k:k=3")
    p.add_argument("--threads", type=int, default=1, help="torch threads per server process")
    p.add_argument("--no-sigterm", dest="sigterm", action="store_false")
    p.add_argument("--hostile", type=int, default=1, help="hostile clients of each kind (0: none)")
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=10.0,
        help="the servers' --drain-timeout-s (the stall fault lasts up to 6 s)",
    )
    p.add_argument("--json", type=Path, help="also write the report here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(soak(args))
    report["machine"] = facts()  # bench/machine.py: where this ran
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    clean = not (report["lost_words"] or report["duplicated_words"] or report["seq_gaps"])
    return 0 if clean and not report["ended_in_error"] else 1


if __name__ == "__main__":
    sys.exit(main())
