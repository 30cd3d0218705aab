"""How much a busy event loop slows the model worker that shares its process (issue #55).

`simulmt serve` runs the model in a worker thread beside the asyncio event loop. Both are
Python and share one GIL; every torch op called from Python releases it and takes it back,
and a traced graph releases it for the call. When the loop thread is running Python (parsing,
serializing and sending messages of 50-100 sessions), the worker waits for the GIL at each of
those hand-overs, up to the switch interval each time. This times the bundled model's decoder
step (traced graph and eager), one thread, alone and while another Python thread is busy for
`--duty` of the time (bursts of 1 ms), at CPython's switch interval (5 ms) and at serve's
(`--switch-interval-ms`, 0.5 ms). Best of 3 windows of 20 calls each.

    .venv/bin/python bench/gil.py [--model DIR] [--dtype int8] [--rows 1 8] [--duty 1.0 0.5]
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graphs import step_inputs  # noqa: E402  (bench/ is not a package)
from machine import describe  # noqa: E402
from simulmt.server.cli import add_arguments  # noqa: E402

from simulmt.engine import Engine  # noqa: E402
from simulmt.model import graphs  # noqa: E402
from simulmt.model.transformer import SimulTransformer  # noqa: E402


class Busy:
    """A Python thread that computes for `duty` of the time, in 1-ms bursts, like a loaded
    event loop (it takes the GIL whenever it runs)."""

    def __init__(self, duty: float) -> None:
        self.duty = duty
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Busy:
        if self.duty > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        burst = 0.001
        pause = burst * (1 - self.duty) / self.duty
        while not self._stop.is_set():
            end = time.perf_counter() + burst
            n = 0
            while time.perf_counter() < end:  # pure Python: holds the GIL between checks
                n += 1
            if pause > 0:
                time.sleep(pause)


def best_call_ms(call: Callable[[], object], *, calls: int = 20, windows: int = 3) -> float:
    call()
    best = float("inf")
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) * 1000 / calls)
    return best


def step_calls(
    model: SimulTransformer, inputs: tuple[torch.Tensor, ...], traced: graphs.Graphs | None
) -> dict[str, Callable[[], object]]:
    """The decoder step on `inputs` in eager mode (the module the graph is traced from) and,
    if the model has one, as its graph."""
    calls: dict[str, Callable[[], object]] = {
        "eager": functools.partial(graphs._Step(model), *inputs)
    }
    if traced is not None:
        calls["graph"] = functools.partial(traced.step, *inputs)
    return calls


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, help="model folder (default: the bundled model)")
    p.add_argument("--dtype", default="int8", help="float32, bfloat16 or int8 (default: int8)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    p.add_argument("--duty", type=float, nargs="+", default=[1.0, 0.5],
                   help="shares of the time the other thread runs Python")  # fmt: skip
    args = p.parse_args()
    serve = argparse.ArgumentParser()
    add_arguments(serve)
    serve_interval = serve.get_default("switch_interval_ms") / 1000
    print(describe(), flush=True)
    torch.set_num_threads(1)
    engine = Engine.load(args.model, dtype=args.dtype)
    model = engine.model
    traced = graphs.graphs_of(model)
    print(f"\n{engine.info.name}, {engine.precision}, decoder step, one thread; ms a call\n")
    print("| call | rows | switch interval | alone | " + " | ".join(
        f"other thread busy {d:.0%}" for d in args.duty) + " |")  # fmt: skip
    print("|---|---:|---:|---:|" + "---:|" * len(args.duty))
    torch.set_grad_enabled(False)  # as the server steps
    for rows in args.rows:
        calls = step_calls(model, step_inputs(model, rows), traced)
        for name, call in calls.items():
            for interval in (0.005, serve_interval):
                sys.setswitchinterval(interval)
                alone = best_call_ms(call)
                busy = []
                for duty in args.duty:
                    with Busy(duty):
                        busy.append(best_call_ms(call))
                cells = " | ".join(f"{b:.2f} ({b / alone:.1f}x)" for b in busy)
                print(f"| {name} | {rows} | {interval * 1000:g} ms | {alone:.2f} | {cells} |",
                      flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
