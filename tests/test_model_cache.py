"""Beams homed in the pool's target plane: many steps of batched decoding, with the chores
of a real search in between (truncation, a beam that widens and narrows again, streams that
finish and are replaced, caches that outgrow the pool), equal full recomputation."""

from __future__ import annotations

import random

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.model.layers import stack_kv
from simulmt.model.pool import KVPool, PoolShape
from simulmt.model.state import BeamState, SourceState, reorder, truncate
from simulmt.search import step as step_module
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
def test_homed_beams_over_many_steps_equal_full_recomputation(
    n_streams: int, script: list[tuple[str, int]], seed: int
) -> None:
    rng = random.Random(seed)
    # narrow and short: the pool grows in slots and widths, and long beams outgrow it (their
    # caches go back to tensors of their own while the rest stay homed)
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
    for s in streams:  # every cache, homed or not, still holds what recomputation gives
        _step([s], rng)


def _top_slot(streams: list[_Stream | None]) -> int:
    """The list index of the stream in the highest slot."""
    slots = {i: x.source.cross.index for i, x in enumerate(streams) if x and x.source.cross}
    return max(slots, key=slots.__getitem__) if slots else -1


def _step(streams: list[_Stream], rng: random.Random) -> None:
    for s in streams:
        s.vis.append(rng.randint(max(s.vis[-1:] or [1]), len(s.source.ids)))
    results = run_step(MODEL, [StepRequest(s.source, s.beam, s.vis[-1]) for s in streams])
    for s, res in zip(streams, results, strict=True):
        assert (res.log_probs - s.expected()).abs().max() <= 1e-4
        if s.beam.size == 1 and rng.random() < 0.9:  # as the greedy search extends a beam
            s.beam.extend_cache(res.self_kv, written=res.homed)
        else:  # a beam search step keeping every hypothesis in place
            s.beam.unhome()
            old = s.beam.self_kv
            s.beam.self_kv = res.self_kv if old is None else torch.cat([old, res.self_kv], 3)
        new = torch.tensor([[rng.randrange(4, CFG.vocab_size)] for _ in range(s.beam.size)])
        s.beam.tokens = torch.cat([s.beam.tokens, new], dim=1)  # (Bm, T+1)
        s.beam.token_lp = torch.zeros(s.beam.size, s.beam.tokens.shape[1] - 1)


def test_a_second_beam_over_a_slot_takes_it_over_and_the_first_keeps_its_cache() -> None:
    """Re-translation starts a new beam over the same source: homing it evicts the first one,
    whose cache moves back into a tensor of its own, intact."""
    pool = KVPool(PoolShape(2 * CFG.dec_layers, CFG.n_heads, CFG.head_dim, torch.float32))
    rng = random.Random(1)
    a = _Stream(rng, pool)
    for _ in range(3):
        _step([a], rng)
    assert a.beam.homed_in(a.source.cross) and a.beam.self_kv is None  # type: ignore[arg-type]
    cache = a.beam.cache().clone()  # type: ignore[union-attr]
    b = _Stream(rng, pool)
    b.source, b.src = a.source, a.src
    _step([b], rng)
    assert b.beam.home is a.source.cross and a.beam.home is None
    assert a.beam.self_kv is not None and torch.equal(a.beam.self_kv, cache)
    _step([a], rng)  # and it decodes on correctly (taking the slot back)
    assert b.beam.home is None and b.beam.cached() == 1


def test_releasing_a_slot_hands_its_beam_the_cache_first() -> None:
    pool = KVPool(PoolShape(2 * CFG.dec_layers, CFG.n_heads, CFG.head_dim, torch.float32))
    rng = random.Random(2)
    a = _Stream(rng, pool)
    _step([a], rng)
    _step([a], rng)
    cache = a.beam.cache().clone()  # type: ignore[union-attr]
    assert a.source.cross is not None
    a.source.cross.release()
    assert a.beam.home is None and torch.equal(a.beam.self_kv, cache)  # type: ignore[arg-type]
    other = pool.claim()  # takes the freed slot and overwrites it: a's cache is not there
    other.adopt(BeamState.start(), torch.ones_like(cache))
    assert torch.equal(a.beam.self_kv, cache)  # type: ignore[arg-type]
