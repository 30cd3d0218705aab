"""Load benchmark of `simulmt serve`: N concurrent captioning clients on loopback.

Each client streams its own slice of a test set at a speech-like rate (2.5 words/s) for
60–100% of a fixed time (seeded per client, so sessions end at different moments), then ends
its session. Reported per run: sessions completed, target words/s
delivered, p50/p95/p99 of the delay the server adds (arrival of a committed word at the
client minus the send time of the source word it needed, i.e. word d_t of its sentence), and
the server's memory. `--capacity` steps N up until p95 exceeds the budget, once with
cross-session batching and once one session at a time (--max-batch 1), and prints the ratio.

    python bench/load.py --tiny --sessions 50 --duration 20
    python bench/load.py --model runs/de-en --capacity --duration 30 --source test.de

The server runs as a separate process (`simulmt serve`), the clients in this one; both share
the machine's cores, so this is a conservative figure for a dedicated server.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import random
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from simulmt.client.stream import StartOptions, StreamLog, paced, run_stream

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402  (bench/ is not a package)
from soak_deploy import free_port, nginx_conf  # noqa: E402

SERVING = re.compile(r"serving (\S+) on http://127\.0\.0\.1:(\d+)/")
ASSET = Path(__file__).resolve().parents[1] / "simulmt" / "assets" / "tiny.tsv"


@dataclass(frozen=True)
class RunResult:
    sessions: int
    completed: int
    source_words: int
    target_words: int
    seconds: float
    delays_ms: list[float]
    end_delays_ms: list[float]  # those of words written after their sentence's last word
    rss_mb: float
    peak_rss_mb: float
    mean_batch: float
    busy: float  # share of the wall time the model worker computed
    server_cpu_s: float  # CPU time of all server processes over the run
    client_cpu_s: float  # CPU time of this process (the clients) over the run
    errors: int

    def percentile(self, q: float, delays: list[float] | None = None) -> float:
        delays = self.delays_ms if delays is None else delays
        if len(delays) < 2:
            return float("nan")
        return statistics.quantiles(delays, n=100, method="inclusive")[int(q) - 1]

    def split(self) -> str:
        """Where the p95 comes from: words written mid-sentence, or once the sentence ended."""
        ends = self.end_delays_ms
        within = sorted(self.delays_ms)
        for d in ends:  # the multiset difference
            del within[bisect.bisect_left(within, d)]
        return (
            f"server CPU {self.server_cpu_s:.1f} s "
            f"({1000 * self.server_cpu_s / self.source_words:.2f} ms a source word), "
            f"clients {self.client_cpu_s:.1f} s; "
            f"p95 of words written mid-sentence {self.percentile(95, within):.0f} ms "
            f"({len(within)}), after the sentence's last word {self.percentile(95, ends):.0f} ms "
            f"({len(ends)})"
        )

    def row(self, label: str) -> str:
        return (
            f"| {label} | {self.sessions} | {self.completed} | "
            f"{self.target_words / self.seconds:.1f} | {self.percentile(50):.0f} | "
            f"{self.percentile(95):.0f} | {self.percentile(99):.0f} | {self.mean_batch:.1f} | "
            f"{100 * self.busy:.0f}% | {self.peak_rss_mb:.0f} | {self.errors} |"
        )


HEADER = (
    "| setting | sessions | completed | target words/s | p50 ms | p95 ms | p99 ms "
    "| mean batch | worker busy | server RSS MB | errors |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def load_sentences(path: Path | None) -> list[str]:
    if path is None:
        return [line.split("\t")[0] for line in ASSET.read_text(encoding="utf-8").splitlines()]
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if 3 <= len(line.split()) <= 60]


def client_words(sentences: list[str], index: int, count: int) -> list[str]:
    """Up to `count` words from the sentences, starting at a different place for each client.
    Clients speak for 60–100% of the time (seeded per client): real sessions do not all end
    at the same instant, and N streams ending together would measure one synchronized burst
    of end-of-stream flushes rather than the steady load of N speakers."""
    rng = random.Random(index)
    count = max(1, round(count * rng.uniform(0.6, 1.0)))
    start = rng.randrange(len(sentences))
    words: list[str] = []
    i = start
    while len(words) < count:
        words += sentences[i % len(sentences)].split()
        i += 1
    return words[:count]


def added_delays(log: StreamLog) -> list[tuple[float, bool]]:
    """For each committed word: arrival time minus the send time of the source word it needed,
    and whether that word was its sentence's last (the tail written once the source ended)."""
    out: list[tuple[float, bool]] = []
    first_word = 0  # stream index of the current sentence's first source word
    pending: list[tuple[float, int]] = []  # (delay, needed) of the current sentence
    for message, recv in zip(log.messages, log.recv_ms, strict=True):
        if message["type"] == "partial":
            for d in message["delays"]:
                needed = first_word + d - 1
                if 0 <= needed < len(log.sent_ms):
                    pending.append((recv - log.sent_ms[needed], needed))
        elif message["type"] == "final":
            first_word += len(message["source"].split())
            out += [(delay, needed == first_word - 1) for delay, needed in pending]
            pending = []
    return out + [(delay, False) for delay, _ in pending]


async def one_client(
    url: str, words: list[str], *, policy: str, rate: float, segmentation: str | None = None
) -> StreamLog:
    await asyncio.sleep(random.random() / rate)  # clients do not speak in lockstep
    start = StartOptions(policy=policy, segmentation=segmentation)
    return await run_stream(url, paced(words, rate), start=start)


class ServerProcess:
    """`simulmt serve` in a child process; its port, health and memory."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0

    async def __aenter__(self) -> ServerProcess:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "simulmt.cli",
            "serve",
            "--port",
            "0",
            *self.argv,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        async with asyncio.timeout(600):
            while line := (await self.proc.stdout.readline()).decode():
                if match := SERVING.search(line):
                    self.port = int(match.group(2))
                    return self
        raise RuntimeError(f"simulmt serve {' '.join(self.argv)} did not start")

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        await self.proc.wait()

    def pids(self) -> list[int]:
        """The server process and its descendants (a model worker or helper process it may
        start), read from /proc: their CPU and memory count as the server's."""
        assert self.proc is not None
        parents: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # the process ended meanwhile
                continue
            parents[int(stat.parent.name)] = int(fields[1])
        tree = [self.proc.pid]
        for pid in tree:
            tree += [child for child, parent in parents.items() if parent == pid]
        return tree

    def memory_mb(self) -> tuple[float, float]:
        """(current, peak) resident memory of the server's processes, summed."""
        rss = peak = 0.0
        for pid in self.pids():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            rss += int(fields["VmRSS"].split()[0]) / 1024
            peak += int(fields["VmHWM"].split()[0]) / 1024
        return rss, peak

    def cpu_s(self) -> float:
        """CPU time (user + system) the server's processes have used so far."""
        total = 0.0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def health(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=10) as r:
            return dict(json.loads(r.read()))


async def run_load(
    servers: list[ServerProcess],
    sentences: list[str],
    *,
    sessions: int,
    duration: float,
    rate: float,
    policy: str,
    front: str | None = None,
    segmentation: str | None = None,
) -> RunResult:
    # several server processes: clients are dealt round-robin, as a least-connections proxy
    # would for sessions of equal length, or (front=URL) all go through nginx
    urls = [front] if front else [f"ws://127.0.0.1:{server.port}/ws" for server in servers]
    count = max(1, int(duration * rate))
    before = [server.health() for server in servers]
    cpu_before = sum(server.cpu_s() for server in servers)
    client_before = time.process_time()
    start = time.monotonic()
    logs = await asyncio.gather(
        *(
            one_client(
                urls[i % len(urls)],
                client_words(sentences, i, count),
                policy=policy,
                rate=rate,
                segmentation=segmentation,
            )
            for i in range(sessions)
        ),
        return_exceptions=True,
    )
    seconds = time.monotonic() - start
    after = [server.health() for server in servers]
    server_cpu = sum(server.cpu_s() for server in servers) - cpu_before
    client_cpu = time.process_time() - client_before
    ok = [log for log in logs if isinstance(log, StreamLog)]
    memory = [server.memory_mb() for server in servers]
    rss, peak = sum(m[0] for m in memory), sum(m[1] for m in memory)
    delays = [d for log in ok for d in added_delays(log)]

    def total(key: str) -> float:
        return sum(a[key] - b[key] for a, b in zip(after, before, strict=True))

    batches, advanced = total("batches"), total("sessions_advanced")
    return RunResult(
        sessions=sessions,
        completed=sum(log.close_code == 1000 for log in ok),
        source_words=sum(len(log.sent_ms) for log in ok),
        target_words=sum(len(" ".join(log.finals()).split()) for log in ok),
        seconds=seconds,
        delays_ms=[d for d, _ in delays],
        end_delays_ms=[d for d, end in delays if end],
        rss_mb=rss,
        peak_rss_mb=peak,
        mean_batch=advanced / batches if batches else 0.0,
        busy=total("busy_s") / seconds / len(servers),  # mean over the processes
        server_cpu_s=server_cpu,
        client_cpu_s=client_cpu,
        errors=len(logs) - len(ok) + sum(len(log.errors) for log in ok),
    )


def server_argv(args: argparse.Namespace, max_batch: int) -> list[str]:
    argv = ["--max-batch", str(max_batch), "--max-sessions", "2000"]
    # every load client comes from 127.0.0.1: lift the per-address admission limits (#52), as
    # an operator's load test would (bench/soak_deploy.py lifts nginx's the same way)
    argv += ["--max-sessions-per-ip", "100000", "--max-connections-per-ip", "100000",
             "--max-unstarted", "100000"]  # fmt: skip
    argv += ["--tiny"] if args.tiny else (["--model", str(args.model)] if args.model else [])
    argv += ["--dtype", args.dtype, *shlex.split(args.server_args)]
    return argv + (["--threads", str(args.threads)] if args.threads else [])


@asynccontextmanager
async def nginx_front(backends: list[int]) -> AsyncIterator[str]:
    """deploy/nginx.conf in front of the backends (least_conn), on a free loopback port."""
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if nginx is None:
        raise SystemExit("--nginx needs Debian's nginx (`apt-get install nginx`)")
    with tempfile.TemporaryDirectory(prefix="simulmt-nginx-") as tmp_dir:
        tmp, listen = Path(tmp_dir), free_port()
        conf = nginx_conf(tmp, listen, backends)  # deploy/nginx.conf pointed at the backends
        proc = await asyncio.create_subprocess_exec(
            nginx, "-p", str(tmp), "-c", str(conf),
            "-g", f"daemon off; pid {tmp / 'nginx.pid'}; error_log {tmp / 'error.log'};",
        )  # fmt: skip
        try:
            async with asyncio.timeout(20):
                while True:
                    try:
                        _, writer = await asyncio.open_connection("127.0.0.1", listen)
                        writer.close()
                        break
                    except OSError:
                        await asyncio.sleep(0.1)
            yield f"ws://127.0.0.1:{listen}/ws"
        finally:
            proc.terminate()
            await proc.wait()


@asynccontextmanager
async def servers(
    args: argparse.Namespace, max_batch: int
) -> AsyncIterator[tuple[list[ServerProcess], str | None]]:
    """`--processes` server processes, started together, and the nginx URL with --nginx."""
    async with AsyncExitStack() as stack:
        procs = [ServerProcess(server_argv(args, max_batch)) for _ in range(args.processes)]
        await asyncio.gather(*(stack.enter_async_context(p) for p in procs))
        front = None
        if args.nginx:
            front = await stack.enter_async_context(nginx_front([p.port for p in procs]))
        yield procs, front


def label(args: argparse.Namespace, max_batch: int) -> str:
    return f"max_batch={max_batch} x{args.processes}" + (" via nginx" if args.nginx else "")


async def capacity(args: argparse.Namespace, sentences: list[str], max_batch: int) -> int:
    """Largest session count (on the --steps ladder) whose p95 added delay meets the budget."""
    best = 0
    for n in args.steps:
        async with servers(args, max_batch) as (procs, front):
            result = await run_load(
                procs,
                sentences,
                sessions=n,
                duration=args.duration,
                rate=args.rate,
                policy=args.policy,
                front=front,
                segmentation=args.segmentation,
            )
        print(result.row(label(args, max_batch)), flush=True)
        if result.completed < n or result.percentile(95) > args.budget_ms:
            break
        best = n
    return best


async def main(args: argparse.Namespace) -> int:
    sentences = load_sentences(args.source)
    print(describe())
    print(f"policy {args.policy}, {args.rate} words/s per client, {args.duration:g} s each\n")
    print(HEADER, flush=True)
    if not args.capacity:
        async with servers(args, args.max_batch) as (procs, front):
            result = await run_load(
                procs,
                sentences,
                sessions=args.sessions,
                duration=args.duration,
                rate=args.rate,
                policy=args.policy,
                front=front,
                segmentation=args.segmentation,
            )
        print(result.row(label(args, args.max_batch)))
        print(result.split())
        return 0 if result.completed == args.sessions else 1
    batched = await capacity(args, sentences, args.max_batch)
    single = await capacity(args, sentences, 1)
    print(
        f"\ncapacity at p95 <= {args.budget_ms:g} ms: {batched} sessions batched, "
        f"{single} one at a time; ratio {batched / max(single, 1):.1f}x"
        + (" (the ladder's top: raise --steps)" if batched == args.steps[-1] else "")
    )
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", type=Path, help="model folder (default: the bundled model)")
    model.add_argument("--tiny", action="store_true", help="the random tiny test model")
    p.add_argument("--source", type=Path, help="German sentences, one a line (default: assets)")
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--duration", type=float, default=30.0, help="seconds each client speaks")
    p.add_argument("--rate", type=float, default=2.5, help="source words per second per client")
    p.add_argument("--policy", default="wait-k:k=3")
    p.add_argument(
        "--segmentation",
        choices=("punctuation", "client", "auto"),
        help="how sessions end sentences (default: the server's; auto holds words back for "
        "the boundary detector's lookahead, which adds its wait to every delay)",
    )
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--threads", type=int, help="torch threads of the server process")
    p.add_argument(
        "--dtype", default="auto", help="server inference precision (default auto, as serve's)"
    )
    p.add_argument("--server-args", default="", help="more `simulmt serve` options, one string")
    p.add_argument(
        "--processes", type=int, default=1, help="server processes; clients dealt round-robin"
    )
    p.add_argument("--nginx", action="store_true", help="clients connect through deploy/nginx.conf")
    p.add_argument("--capacity", action="store_true", help="find capacity, batched vs not")
    p.add_argument(
        "--steps",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[10, 25, 50, 75, 100, 150, 200, 300],
        help="session counts to try",
    )
    p.add_argument("--budget-ms", type=float, default=200.0, help="p95 added-delay budget")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
