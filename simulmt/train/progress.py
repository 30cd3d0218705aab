"""Where training stands (saved in checkpoints), the log window and the stop signal."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so resume continues exactly."""

    step: int = 0
    epoch: int = 0
    batch_pos: int = 0  # index into this epoch's shuffled batch order
    best_bleu: float = -1.0
    n_batches: int = 0  # batches an epoch had (0: unknown, from an older checkpoint)
    # wall seconds spent in the training loop over all sittings (dev evaluations and saves
    # included; 0 before checkpoints kept it): the compute a model card reports
    seconds: float = 0.0


class Window:
    """Training progress since a step: mean loss, tokens/s and seconds per step.

    The losses are summed where they were computed (on the GPU, if training runs there) and read
    back once per log line: reading each step's loss would make the host wait for the device
    every step, which leaves the GPU idle while the next batch is prepared."""

    def __init__(self, step: int) -> None:
        self.step, self.start = step, time.time()
        self.total: torch.Tensor | float = 0.0  # sum of the losses, on the loss's device
        self.count = 0
        self.tokens = 0

    def add(self, loss: torch.Tensor | float, tokens: int) -> None:
        self.total = self.total + loss
        self.count += 1
        self.tokens += tokens

    def mean_loss(self) -> float:
        """The mean loss of the window (one device read)."""
        return float(self.total) / max(self.count, 1)

    def line(self, step: int) -> str:
        seconds = max(time.time() - self.start, 1e-6)
        return (
            f"step {step}: loss {self.mean_loss():.3f} (mean of {self.count}), "
            f"{self.tokens / seconds:.0f} tokens/s, {seconds / max(step - self.step, 1):.2f} s/step"
            f"{memory_note()}"
        )


def memory_note() -> str:
    """", RSS now/peak" of this process in GB, for the log line: a long run's memory is the
    first thing to watch on a shared machine (two runs side by side were OOM-killed)."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux
        with open("/proc/self/statm") as f:
            now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (ImportError, OSError, ValueError):  # not Linux: no figure rather than a wrong one
        return ""
    gpu = ""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gpu = f", GPU peak {torch.cuda.max_memory_allocated() / 1e9:.1f} GB"
    return f", RSS {now:.1f} GB (peak {peak:.1f} GB){gpu}"


class StopFlag:
    """Set by SIGTERM/SIGINT so the loop can save a checkpoint before it exits."""

    def __init__(self) -> None:
        self.requested = False

    def _handler(self, signum: int, frame: object) -> None:
        log.warning("signal %d: saving a checkpoint after this step", signum)
        self.requested = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {sig: signal.signal(sig, self._handler) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
