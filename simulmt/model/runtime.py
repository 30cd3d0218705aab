"""Process-level performance settings for the command-line tools.

Incremental decoding allocates and frees many mid-sized tensors (cache blocks of a few MB) at
every step. glibc serves allocations above its mmap threshold with fresh pages, so each step
pays page faults and kernel page zeroing for them. Raising the thresholds keeps that memory in
the heap for reuse: measured on the 2-core benchmark machine, a 64-stream decoder step went
from 29 ms to 24 ms (bench/RESULTS.md). Only the CLI sets the allocator; a library user's
process is left alone. The one exception is oneDNN's primitive cache: a `Trainer` limits it
itself, since any process that trains in bf16 grows with it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

# inference precisions (`Engine.load(dtype=...)`); int8 = dynamic int8 linear layers, float32 rest
DTYPE_NAMES = ("float32", "bfloat16", "int8")
AUTO_DTYPE = "auto"  # time each precision this CPU runs natively at load, keep the fastest
# every command line's precision (serve, eval, translate): what is fastest on the CPU at hand,
# measured (simulmt.model.precision); a fixed int8 default made an AVX2-only server 5x slower
CLI_DTYPE = AUTO_DTYPE

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_allocator(*, mmap_threshold: int = 256 << 20, trim_threshold: int = 1 << 30) -> bool:
    """Set glibc's mmap/trim thresholds (fixed values also switch off glibc's dynamic mmap
    threshold); returns False (and changes nothing) elsewhere."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
    log.debug("allocator thresholds raised: %s", ok)
    return ok


def tune_allocator_for_training() -> bool:
    """The thresholds for training: blocks above 64 MB (the logits of a batch, tens to hundreds
    of MB and a new shape every step) are mmapped and go back to the kernel when freed, so they
    cannot fragment the heap; everything smaller (activations, dropout masks, loss chunks) is
    reused from the heap. A 1 MB threshold kept the heap small too, but paid page faults on
    every mid-sized block: real training steps of the 22M model took 3.6 s instead of 2.4 s
    (bench/RESULTS.md, "Training step")."""
    return tune_allocator(mmap_threshold=64 << 20, trim_threshold=128 << 10)


def limit_onednn_primitive_cache() -> None:
    """Switch off oneDNN's primitive cache unless the user set its size. Under bf16 autocast it
    keeps a primitive for every new matmul shape (up to 1,024), and every training batch brings
    new shapes: a 22M-parameter run grew to 10-12 GB with it and stayed at 2.6-2.9 GB without it,
    with the same losses (notes/engineering-notes.md). oneDNN reads the setting at its first
    call, so this must run before any."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")
