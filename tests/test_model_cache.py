"""`DecoderCache`: its operations equal those on a plain tensor, and caches kept in the pool's
target plane survive many steps of batched decoding with the chores of a real search in between
(truncation, a beam that widens and narrows again, streams that finish and are replaced, caches
that outgrow the pool): every step equals full recomputation."""

from __future__ import annotations

import random
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.model import batch as step_module
from simulmt.model.attention import ALIGN
from simulmt.model.cache import DecoderCache, StepKV
from simulmt.model.layers import stack_kv
from simulmt.model.pool import KVPool, PoolShape
from simulmt.model.state import SourceState
from simulmt.search.state import BeamState, reorder, truncate
from simulmt.search.step import StepRequest, run_step
from tests.test_model_incremental import CFG, MODEL

OPS = ("step", "step", "step", "step", "truncate", "finish", "widen", "narrow")


class _Stream:
    """A stream and what a full recomputation needs: its source and every fed position's
    visible source length."""

    def __init__(self, rng: random.Random, pool: KVPool) -> None:
        n = rng.randint(2, 7)
        self.src = torch.tensor([[rng.randrange(4, CFG.vocab_size) for _ in range(n)]])  # (1, S)
        with torch.no_grad():
            memory, _ = MODEL.encode(self.src)
        self.source = SourceState(ids=self.src[0].tolist(), ends=list(range(1, n + 1)))
        self.source.append_cross(stack_kv(MODEL.cross_kv(memory)), pool)
        self.beam = BeamState.start()
        self.vis: list[int] = []  # per fed position (BOS first): as many as beam.length

    def expected(self) -> torch.Tensor:
        """(Bm, V) log-probabilities of the next token, recomputed from scratch."""
        tokens = self.beam.tokens  # (Bm, T)
        vis = torch.tensor([self.vis]).expand(tokens.shape[0], -1)  # (Bm, T)
        src = self.src.expand(tokens.shape[0], -1)
        with torch.no_grad():
            return torch.log_softmax(MODEL(src, tokens, vis), dim=-1)[:, -1]  # (Bm, V)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(2, 5),
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 10_000)), min_size=4, max_size=40),
    st.integers(0, 10_000),
)
def test_pooled_caches_over_many_steps_equal_full_recomputation(
    n_streams: int, script: list[tuple[str, int]], seed: int
) -> None:
    rng = random.Random(seed)
    # narrow and short: the pool grows in slots and widths, and long beams outgrow it (their
    # caches go back to tensors of their own while the rest stay in the pool)
    pool = KVPool(
        PoolShape(2 * CFG.dec_layers, CFG.n_heads, CFG.head_dim, torch.float32),
        slots=2,
        width=2,
        max_width=9,
    )
    streams = [_Stream(rng, pool) for _ in range(n_streams)]
    limit = step_module.MAX_FILLER_SHARE
    step_module.MAX_FILLER_SHARE = 10.0  # take the pooled path whatever the gaps
    try:
        for op, arg in script:
            s = streams[arg % n_streams]
            if op == "step":
                _step([x for i, x in enumerate(streams) if (arg >> i) & 1 or x is s], rng)
            elif op == "truncate" and s.beam.length:
                n = arg % s.beam.length
                truncate(s.beam, n)
                s.vis = s.vis[:n]
            elif op == "finish":  # its slot is released (the stream is dropped) ...
                i = arg % n_streams
                was_top = _top_slot(streams) == i
                del s
                streams[i] = None  # type: ignore[call-overload]
                if arg & 1:  # ... and the stream in the highest slot moves down into the hole
                    assert pool.compact() == (not was_top)
                streams[i] = _Stream(rng, pool)  # takes the lowest free slot
            elif op == "widen" and s.beam.size == 1:
                reorder(s.beam, torch.tensor([0, 0]))
            elif op == "narrow" and s.beam.size > 1:
                reorder(s.beam, torch.tensor([s.beam.size - 1]))
    finally:
        step_module.MAX_FILLER_SHARE = limit
    for s in streams:  # every cache, pooled or not, still holds what recomputation gives
        _step([s], rng)


def _top_slot(streams: list[_Stream | None]) -> int:
    """The list index of the stream in the highest slot."""
    slots = {i: x.source.slot.index for i, x in enumerate(streams) if x and x.source.slot}
    return max(slots, key=slots.__getitem__) if slots else -1


def _step(streams: list[_Stream], rng: random.Random) -> None:
    for s in streams:
        s.vis.append(rng.randint(max(s.vis[-1:] or [1]), len(s.source.ids)))
    results = run_step(MODEL, [StepRequest(s.source, s.beam, s.vis[-1]) for s in streams])
    for s, res in zip(streams, results, strict=True):
        assert (res.log_probs - s.expected()).abs().max() <= 1e-4
        s.beam.cache.extend(list(range(s.beam.size)))  # every hypothesis goes on in place
        new = torch.tensor([[rng.randrange(4, CFG.vocab_size)] for _ in range(s.beam.size)])
        s.beam.tokens = torch.cat([s.beam.tokens, new], dim=1)  # (Bm, T+1)
        s.beam.token_lp = torch.zeros(s.beam.size, s.beam.tokens.shape[1] - 1)


def test_a_second_beam_over_a_slot_takes_it_over_and_the_first_keeps_its_cache() -> None:
    """Re-translation starts a new beam over the same source: placing its cache in the slot
    moves the first one's cache back into a tensor of its own, intact."""
    pool = KVPool(PoolShape(2 * CFG.dec_layers, CFG.n_heads, CFG.head_dim, torch.float32))
    rng = random.Random(1)
    a = _Stream(rng, pool)
    for _ in range(3):
        _step([a], rng)
    assert a.beam.cache.pooled and a.beam.cache.length == 3
    cache = _view(a.beam.cache).clone()
    b = _Stream(rng, pool)
    b.source, b.src = a.source, a.src
    _step([b], rng)
    assert b.beam.cache.pooled and not a.beam.cache.pooled
    assert torch.equal(_view(a.beam.cache), cache)
    _step([a], rng)  # and it decodes on correctly (taking the slot back)
    assert a.beam.cache.pooled and not b.beam.cache.pooled and b.beam.cache.length == 1


def test_releasing_a_slot_hands_its_cache_back_first() -> None:
    pool = KVPool(PoolShape(2 * CFG.dec_layers, CFG.n_heads, CFG.head_dim, torch.float32))
    rng = random.Random(2)
    a = _Stream(rng, pool)
    _step([a], rng)
    _step([a], rng)
    cache = _view(a.beam.cache).clone()
    assert a.source.slot is not None and a.beam.cache.pooled
    a.source.slot.release()
    assert not a.beam.cache.pooled and torch.equal(_view(a.beam.cache), cache)
    other = pool.claim()  # takes the freed slot and overwrites it: a's cache is not there
    tenant = DecoderCache()
    other.adopt(tenant, torch.ones_like(cache))
    assert torch.equal(_view(a.beam.cache), cache)


def _view(cache: DecoderCache) -> torch.Tensor:
    view = cache.view()
    assert view is not None
    return view


# ---- the operations against a plain tensor ------------------------------------------------
CACHE_OPS = ("extend", "extend", "extend", "select", "truncate", "drop")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(CACHE_OPS), st.integers(0, 10_000)), max_size=30),
    st.booleans(),
)
def test_cache_operations_equal_those_on_a_tensor(
    script: list[tuple[str, int]], pooled: bool
) -> None:
    """extend/select/truncate (and a staged step that is dropped) give what the same edits
    of a plain (2L, Bm, H, T, dh) tensor give, in a tensor of its own or in a pool slot."""
    rng = random.Random(len(script))
    pool = KVPool(PoolShape(2, 1, 2, torch.float32), width=2, max_width=6)
    slot = pool.claim()
    cache, ref = DecoderCache(), torch.zeros(2, 1, 1, 0, 2)  # (2L, Bm, H, T, dh)
    for op, arg in script:
        rows = ref.shape[1]
        if pooled and rows == 1 and pool.fits(cache.length + 1):
            cache.place_in(slot)  # as a pooled step does (a long cache moves out again)
        new = torch.randn(2, rows, 1, 1, 2)  # the step's new position, (2L, Bm, H, 1, dh)
        written = cache.pooled and pool.fits(cache.length + 1)
        if written:  # a pooled step writes it into the slot itself
            pool.write_target(slot.index, cache.length, new)
            pool.target_lengths[slot.index] -= 1
        cache.stage(StepKV(new), 0, rows, written=written)
        if op == "extend":
            parents = [rng.randrange(rows) for _ in range(rng.randint(1, 3))] if arg % 4 else [0]
            cache.extend(parents)
            ref = torch.cat([ref, new], dim=3)[:, parents]
        elif op == "select":
            keep = torch.tensor([rng.randrange(rows) for _ in range(rng.randint(1, 3))])
            cache.select(keep)
            ref = ref[:, keep]
        elif op == "truncate":
            n = arg % (ref.shape[3] + 1)
            cache.truncate(n)
            ref = ref[:, :, :, :n]
        assert cache.length == ref.shape[3]
        view = cache.view()
        assert torch.equal(view, ref) if view is not None else ref.shape[3] == 0


def test_extend_needs_a_staged_step() -> None:
    """A dropped step (the search READ instead) can not be extended by later: truncation or
    selection in between drops it."""
    cache = DecoderCache()
    cache.stage(StepKV(torch.ones(2, 1, 1, 1, 2)), 0, 1)
    cache.truncate(0)
    with pytest.raises(ValueError, match="no decoder step staged"):
        cache.extend([0])


def test_a_growing_pool_keeps_each_slots_positions_and_pads_with_zeros() -> None:
    """Growth copies each slot's used positions into fresh zeroed memory (an anonymous
    mapping on the CPU, resident only where written): what a slot held stays, the padding an
    earlier stream left behind reads as zeros, and every new position is zero and writable."""
    assert KVPool(PoolShape(4, 2, 8, torch.float32), slots=2, width=4).width == ALIGN  # aligned
    pool = KVPool(PoolShape(4, 2, 8, torch.float32), slots=2, width=ALIGN)
    a, b = pool.claim(), pool.claim()
    ka, kb = torch.randn(4, 1, 2, 3, 8), torch.randn(4, 1, 2, 1, 8)  # (2L, 1, H, n, dh)
    a.append(ka)
    b.append(kb)
    pool.data[:, b.index, :, 1:] = 7.0  # stale values past b's length
    c = pool.claim()  # a third stream: the slots double
    assert pool.slots == 4 and c.length == 0
    assert torch.equal(a.tensor(), ka) and torch.equal(b.tensor(), kb)
    assert bool((pool.data[:, b.index, :, 1:] == 0).all())
    more = torch.randn(4, 1, 2, ALIGN, 8)
    a.append(more)  # past the width: the positions double
    assert pool.width == 2 * ALIGN
    assert torch.equal(a.tensor(), torch.cat([ka, more], dim=3))
    assert torch.equal(b.tensor(), kb) and bool((pool.data[:, c.index] == 0).all())
    pool.data[:, c.index] = 1.0  # the fresh memory is writable
    assert bool((pool.data[:, c.index] == 1).all()) and torch.equal(a.tensor()[:, :, :, :3], ka)


def _resident_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_pools_unwritten_positions_take_no_memory() -> None:
    """eval's pool of 256 slots x 128 positions is 151 MB a plane; short sentences write a
    fraction of it. Zeroing it all (`torch.zeros`) made all of it resident."""
    before = _resident_mb()
    pool = KVPool(PoolShape(6, 6, 64, torch.float32), slots=256, width=128)
    slot = pool.claim()
    slot.append(torch.ones(6, 1, 6, 20, 64))
    assert pool.data.numel() * 4 > 150e6
    assert _resident_mb() - before < 40
    assert float(pool.data.sum()) == 6 * 6 * 20 * 64  # reads as zeros elsewhere
