"""`simulmt serve --workers N`: run N server processes, pass signals on, and restart a process
whose model worker failed (it exits with EXIT_WORKER_FAILED: its worker thread died or got
stuck), so that one broken process does not leave its port dark until someone notices."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

from simulmt.server.liveness import EXIT_WORKER_FAILED

logger = logging.getLogger(__name__)
POLL_S = 0.2
MAX_BACKOFF_S = 30.0  # a process that fails again at once is restarted ever more slowly
HEALTHY_S = 60.0  # a process that ran this long before failing is restarted at once


def supervise(commands: Sequence[list[str]], *, env: Mapping[str, str]) -> int:
    """Run one child per command until all have exited; return the exit status furthest from 0.
    SIGTERM/SIGINT are passed on to the children (and end the restarting)."""
    children = [subprocess.Popen(cmd, env=dict(env)) for cmd in commands]
    started = [time.monotonic()] * len(children)
    backoff = [0.0] * len(children)
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes: dict[int, int] = {}
    while len(codes) < len(children):
        time.sleep(POLL_S)
        for i, child in enumerate(children):
            code = child.poll()
            if code is None or i in codes:
                continue
            if code != EXIT_WORKER_FAILED or stopping:
                codes[i] = code
                continue
            ran = time.monotonic() - started[i]
            backoff[i] = 0.0 if ran >= HEALTHY_S else min(MAX_BACKOFF_S, 2 * backoff[i] or 1.0)
            logger.error(
                "server process %d (%s) lost its model worker; restarting it in %g s",
                i,
                " ".join(commands[i][-2:]),
                backoff[i],
            )
            time.sleep(backoff[i])
            if not stopping:
                children[i] = subprocess.Popen(commands[i], env=dict(env))
                started[i] = time.monotonic()
    return max(codes.values(), key=abs)
