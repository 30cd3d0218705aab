"""Is the model worker alive? A dead or stuck worker leaves every session hanging, so the
server must say so (/healthz 503) and the process must end (non-zero) for its supervisor to
start a new one.

Dead: the worker thread is gone although nobody stopped it. Stuck: one turn (a batched model
step, or building a session) has run for longer than `stall_s`; a step of the bundled model
takes milliseconds, so a minute means the worker will not come back. Load hung: the model is
still loading after the load timeout (`CaptionServer` checks it while it waits).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable

from simulmt.server.worker import Worker

logger = logging.getLogger(__name__)
EXIT_WORKER_FAILED = 3  # `simulmt serve`'s exit status when its worker failed (1: never started)


class WorkerState(enum.Enum):
    LOADING = "loading"  # the model is being loaded
    OK = "ok"
    LOAD_FAILED = "load_failed"
    LOAD_HUNG = "load_hung"  # still loading after the load timeout: it will not load
    DEAD = "dead"  # the thread ended while the server runs
    STUCK = "stuck"  # one turn has run for longer than the stall time
    STOPPED = "stopped"  # the server stopped it

    @property
    def failed(self) -> bool:
        """The worker will not come back: the process should end."""
        return self in (WorkerState.DEAD, WorkerState.STUCK, WorkerState.LOAD_HUNG)


def worker_state(worker: Worker, *, stall_s: float) -> WorkerState:
    if worker.stopping:
        return WorkerState.STOPPED
    if worker.load_error is not None:
        return WorkerState.LOAD_FAILED
    if worker.engine is None:
        return WorkerState.LOADING
    if not worker.alive:
        return WorkerState.DEAD
    if worker.turn_s() > stall_s:
        return WorkerState.STUCK
    return WorkerState.OK


async def watch(
    worker: Worker, *, stall_s: float, on_failure: Callable[[WorkerState], None]
) -> None:
    """Check the worker a few times per stall time until it fails (then tell `on_failure`)
    or this task is cancelled."""
    interval = min(1.0, stall_s / 4)
    while True:
        await asyncio.sleep(interval)
        state = worker_state(worker, stall_s=stall_s)
        if state.failed:
            logger.critical(
                "the model worker is %s (turn running for %.1f s, thread alive: %s)",
                state.value,
                worker.turn_s(),
                worker.alive,
            )
            on_failure(state)
            return
