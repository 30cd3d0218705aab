"""A pool of append-only K/V caches: many streams' caches in one buffer, batched as views.

A decoder step over N streams needs their cross-attention K/V as one (2L, N, H, S, dh) batch.
Gathering that from per-stream tensors copies every stream's whole cache at every step (for
hundreds of streams that copy costs as much as the step's arithmetic). In a pool, stream r's
cache is row `slot_r` of one buffer, so streams in consecutive slots *are* a batch: a view, no
copy. The buffer doubles (slots or positions) when full, so appends are amortized O(new).

Each slot has two planes, moved together: the *source* plane (`data`: the append-only
cross-attention K/V of the stream's source) and the *target* plane (`target`: the decoder
self-attention K/V of the stream's beam while it is one hypothesis, see
`simulmt.model.cache.DecoderCache`). A decoder step over streams in consecutive slots reads both
as views and writes each row's new target K/V in place, so no stream's cache is copied or
concatenated at a step.

The pool is memory, not stream state: each stream owns its slot through a `KVSlot` handle held
by its `SourceState` (and by the decoder cache kept in its target plane, the slot's *tenant*);
the slot returns to the pool when the handle is released or collected. Padding positions after a
slot's length hold zeros or an earlier stream's values (always finite); readers mask them out.
"""

from __future__ import annotations

import heapq
import math
import mmap
import threading
import weakref
from dataclasses import dataclass
from typing import Protocol

import torch

from simulmt.model.attention import aligned

MIN_SLOTS = 8  # first allocation; doubles when full
MIN_WIDTH = 32  # positions per slot at first; doubles when a stream outgrows it
# Every slot is as wide as the longest stream, so one very long sentence would widen them all:
# a shared pool stops here and longer streams move to a pool of their own (`spill`).
SHARED_MAX_WIDTH = 256


@dataclass(frozen=True)
class PoolShape:
    """The shape of one slot's K/V, which every slot of a pool shares (the decoder's)."""

    layers2: int  # 2 x layers (keys and values of every layer, as `stack_kv`)
    heads: int
    head_dim: int
    dtype: torch.dtype


class Tenant(Protocol):
    """What lives in a slot's target plane: a decoder cache that can take its K/V back into a
    tensor of its own when the slot is needed elsewhere."""

    def vacate(self) -> None: ...


class KVPool:
    """Caches of many streams in one buffer per plane: `data` (2L, R, H, W, dh) for sources and
    `target` (2L, R, H, W_t, dh) for single-hypothesis beams; row r of both is slot r."""

    def __init__(
        self,
        shape: PoolShape,
        *,
        slots: int = MIN_SLOTS,
        width: int = MIN_WIDTH,
        max_width: int | None = SHARED_MAX_WIDTH,
    ) -> None:
        self.shape = shape
        self.max_width = max_width  # None: no limit
        device = torch.get_default_device()  # the model worker's (`use_device`)
        self.data = _zeros(
            (shape.layers2, slots, shape.heads, aligned(width), shape.head_dim), shape.dtype, device
        )  # (2L, R, H, W, dh): W aligned, so an aligned view of up to W positions fits
        self.lengths = [0] * slots  # positions in use per slot
        self.target = _zeros(
            (shape.layers2, slots, shape.heads, MIN_WIDTH, shape.head_dim), shape.dtype, device
        )  # (2L, R, H, W_t, dh)
        self.target_lengths = [0] * slots
        self._free = list(range(slots))  # a heap: the lowest free slot is handed out first
        # slot -> (its handle, the handle's index cell); a release names the cell, so one that
        # comes late (the slot was moved or reclaimed since) finds a different cell and is void
        self._owners: dict[int, tuple[weakref.ref[KVSlot], list[int]]] = {}
        # re-entrant: a handle collected while the pool holds the lock releases from inside
        # (cyclic GC can run on any allocation); releases may also come from other threads
        self._lock = threading.RLock()
        self._released = False  # a slot was released since the last compaction (holes maybe)

    @property
    def slots(self) -> int:
        return int(self.data.shape[1])

    @property
    def width(self) -> int:
        return int(self.data.shape[3])

    def claim(self) -> KVSlot:
        """A free slot (the lowest), as a handle that releases it when dropped."""
        with self._lock:
            if not self._free:
                self._grow(slots=2 * self.slots)
            index = heapq.heappop(self._free)
            self.lengths[index] = self.target_lengths[index] = 0
            handle = KVSlot(self, index)
            self._owners[index] = (weakref.ref(handle), handle._cell)
        return handle

    def reserve(self, slots: int) -> None:
        """Make room for `slots` streams at once (saves the doublings on the way there)."""
        with self._lock:
            if slots > self.slots:
                self._grow(slots=slots)

    def release(self, cell: list[int]) -> None:
        """Return the slot in `cell` (a handle's index cell, see `KVSlot`) to the pool."""
        with self._lock:
            index = cell[0]
            owner = self._owners.get(index)
            if owner is None or owner[1] is not cell:
                return  # released already (e.g. found dead by `compact`)
            del self._owners[index]
            self.lengths[index] = self.target_lengths[index] = 0
            heapq.heappush(self._free, index)
            self._released = True

    def compact(self) -> bool:
        """Move the streams in the highest slots into the lowest free ones, so the slots in
        use are 0..n-1 (one copy per moved stream; their handles follow). False if nothing
        needed to move. Only a release makes holes, so without one since the last call this
        is O(1) (a server asks at nearly every step)."""
        with self._lock:
            if not self._released:
                return False
            self._released = False
            for index, (ref, _) in list(self._owners.items()):
                if ref() is None:  # collected, its finalizer not run yet: free it now
                    del self._owners[index]
                    self.lengths[index] = self.target_lengths[index] = 0
            used = sorted(self._owners)
            n = len(used)
            movers = [i for i in used if i >= n]
            holes = [i for i in range(n) if i not in self._owners]
            for src, dst in zip(movers, holes, strict=True):
                length = self.lengths[src]
                self.data[:, dst, :, :length] = self.data[:, src, :, :length]
                self.lengths[dst], self.lengths[src] = length, 0
                length = self.target_lengths[src]
                self.target[:, dst, :, :length] = self.target[:, src, :, :length]
                self.target_lengths[dst], self.target_lengths[src] = length, 0
                ref, cell = self._owners.pop(src)
                self._owners[dst] = (ref, cell)
                cell[0] = dst
            self._free = [i for i in range(self.slots) if i not in self._owners]  # sorted: a heap
            return bool(movers)

    def fits(self, length: int) -> bool:
        return self.max_width is None or length <= self.max_width

    def append(self, index: int, new: torch.Tensor) -> None:
        """Write new positions (2L, 1, H, n, dh) after slot `index`'s current length."""
        start = self.lengths[index]
        end = start + int(new.shape[3])
        if not self.fits(end):
            raise ValueError(f"a cache of {end} positions exceeds this pool's {self.max_width}")
        if end > self.width:
            with self._lock:
                self._grow(width=max(2 * self.width, end))
        self.data[:, index : index + 1, :, start:end] = new
        self.lengths[index] = end

    def view(self, index: int) -> torch.Tensor:
        """Slot `index`'s cache: (2L, 1, H, length, dh), a view valid until the next append."""
        return self.data[:, index : index + 1, :, : self.lengths[index]]

    def rows(self, lo: int, hi: int, width: int) -> torch.Tensor:
        """Slots lo..hi-1 as one batch (2L, hi-lo, H, width, dh): a view, no copy."""
        return self.data[:, lo:hi, :, :width]

    # ---- the target plane ---------------------------------------------------------------
    def target_rows(self, lo: int, hi: int, width: int) -> torch.Tensor:
        """Target caches of slots lo..hi-1 as one batch (2L, hi-lo, H, width, dh): a view (the
        plane widened first if needed, within `max_width`); a step writes new K/V into it."""
        if width > self.target.shape[3]:
            with self._lock:
                self._grow(target_width=max(2 * self.target.shape[3], width))
        return self.target[:, lo:hi, :, :width]

    def target_view(self, index: int) -> torch.Tensor:
        """Slot `index`'s target cache (2L, 1, H, length, dh), a view valid until the pool next
        changes."""
        return self.target[:, index : index + 1, :, : self.target_lengths[index]]

    def write_target(self, index: int, start: int, new: torch.Tensor) -> None:
        """Write target K/V (2L, 1, H, n, dh) at positions start.. of slot `index`; its length
        becomes start + n."""
        end = start + int(new.shape[3])
        if not self.fits(end):
            raise ValueError(f"a cache of {end} positions exceeds this pool's {self.max_width}")
        if end > self.target.shape[3]:
            with self._lock:
                self._grow(target_width=max(2 * self.target.shape[3], end))
        self.target[:, index : index + 1, :, start:end] = new
        self.target_lengths[index] = end

    def _grow(self, *, slots: int = 0, width: int = 0, target_width: int = 0) -> None:
        old_slots = self.slots
        r = max(slots, old_slots)
        # widths stay multiples of ALIGN: a batch reads aligned widths (attention.aligned)
        self.data = _grown(self.data, r, aligned(max(width, self.data.shape[3])), self.lengths)
        self.target = _grown(
            self.target, r, aligned(max(target_width, self.target.shape[3])), self.target_lengths
        )
        for i in range(old_slots, r):
            heapq.heappush(self._free, i)
        self.lengths += [0] * (r - old_slots)
        self.target_lengths += [0] * (r - old_slots)


def _grown(old: torch.Tensor, slots: int, width: int, lengths: list[int]) -> torch.Tensor:
    """`old` (2L, R, H, W, dh) in a zeroed (2L, slots, H, width, dh), each slot's first
    `lengths[r]` positions copied (the rest is padding, zero either way); itself if equal."""
    if old.shape[1] == slots and old.shape[3] == width:
        return old
    new = _zeros((old.shape[0], slots, old.shape[2], width, old.shape[4]), old.dtype, old.device)
    for r, n in enumerate(lengths[: old.shape[1]]):
        if n:
            new[:, r, :, :n] = old[:, r, :, :n]
    return new


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Zeros whose memory becomes resident only where written. On the CPU a private anonymous
    mapping reads as the kernel's zero page until a write, so the positions a plane never uses
    (most of a slot's width when sentences are short) cost no memory and no page fault:
    `torch.zeros` of eval's two grown planes (256 slots x 128 positions, 151 MB each) took
    ~300 ms each in page faults on a 2-core VM. Elsewhere (a GPU, no mmap): `torch.zeros`."""
    numel = math.prod(shape)
    private = getattr(mmap, "MAP_PRIVATE", None)
    if device.type != "cpu" or private is None or numel == 0:
        return torch.zeros(shape, dtype=dtype, device=device)
    try:
        buf = mmap.mmap(-1, numel * dtype.itemsize, flags=private)
    except (OSError, ValueError):
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.frombuffer(buf, dtype=dtype, count=numel).view(shape)  # holds `buf`


class KVSlot:
    """One stream's slot in a pool; the slot is released when the handle is released or
    garbage-collected (whichever comes first, once). `KVPool.compact` may move the stream to
    another slot: `index` follows it."""

    def __init__(self, pool: KVPool, index: int) -> None:
        self.pool = pool
        self._cell = [index]  # shared with the finalizer, which must not hold the handle
        self._finalizer = weakref.finalize(self, pool.release, self._cell)
        self._tenant: weakref.ref[Tenant] | None = None  # the cache in the target plane

    @property
    def index(self) -> int:
        return self._cell[0]

    @property
    def length(self) -> int:
        return self.pool.lengths[self.index]

    def append(self, new: torch.Tensor) -> None:
        if not self._finalizer.alive:
            raise RuntimeError("append to a released cache slot")
        self.pool.append(self.index, new)

    def tensor(self) -> torch.Tensor:
        return self.pool.view(self.index)  # (2L, 1, H, length, dh)

    def release(self) -> None:
        self.evict()
        self._finalizer()

    # ---- the target plane: one tenant at a time ----------------------------------------
    @property
    def target_length(self) -> int:
        return self.pool.target_lengths[self.index]

    def set_target_length(self, n: int) -> None:
        """Positions 0..n-1 of the target plane are in use (a step wrote position n-1)."""
        self.pool.target_lengths[self.index] = n

    def truncate_target(self, n: int) -> None:
        lengths = self.pool.target_lengths
        lengths[self.index] = min(lengths[self.index], n)

    def target(self) -> torch.Tensor:
        return self.pool.target_view(self.index)  # (2L, 1, H, length, dh)

    def held_by(self, tenant: Tenant) -> bool:
        return self._tenant is not None and self._tenant() is tenant

    def adopt(self, tenant: Tenant, cache: torch.Tensor | None) -> None:
        """Make `tenant` the holder of the target plane, its K/V (2L, 1, H, T, dh) copied in; a
        previous tenant still alive takes its K/V back first."""
        if not self._finalizer.alive:
            raise RuntimeError("adopt into a released cache slot")
        self.evict()
        self.pool.target_lengths[self.index] = 0
        if cache is not None and cache.shape[3]:
            self.pool.write_target(self.index, 0, cache)
        self._tenant = weakref.ref(tenant)

    def disown(self) -> None:
        self._tenant = None

    def evict(self) -> None:
        """The tenant (if any) takes its K/V back into a tensor of its own."""
        tenant = None if self._tenant is None else self._tenant()
        if tenant is not None:
            tenant.vacate()  # reads the plane, then disowns
        self._tenant = None

    def spill(self) -> KVSlot:
        """This stream's cache moved to a one-slot pool of its own without a width limit (for a
        stream too long for a shared pool); this slot is released (its tenant takes its K/V
        back first)."""
        own = KVPool(self.pool.shape, slots=1, width=max(MIN_WIDTH, self.length), max_width=None)
        moved = own.claim()
        moved.append(self.tensor())
        self.release()
        return moved
