"""Invariants of the incremental Transformer, as property tests over random shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.model import batch as step_module
from simulmt.model.cache import DecoderCache
from simulmt.model.config import ModelConfig
from simulmt.model.layers import Scratch, append_kv, pack_kv, stack_kv, unstack_kv
from simulmt.model.pool import KVPool, PoolShape
from simulmt.model.state import SourceState
from simulmt.model.transformer import SimulTransformer
from simulmt.search.state import BeamState
from simulmt.search.step import StepRequest, run_step

CFG = ModelConfig(
    vocab_size=60, d_model=32, n_heads=4, enc_layers=2, dec_layers=2, d_ff=48, dropout=0.0
)


def make_model(seed: int = 0) -> SimulTransformer:
    torch.manual_seed(seed)
    return SimulTransformer(CFG).eval()


MODEL = make_model()


def cache_pool(*, slots: int = 8) -> KVPool:
    return KVPool(
        PoolShape(2 * CFG.dec_layers, CFG.n_heads, CFG.head_dim, torch.float32), slots=slots
    )


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 30), st.lists(st.integers(1, 5), min_size=1, max_size=8), st.integers(0, 10_000)
)
def test_encoding_piecewise_equals_whole(length: int, chunks: list[int], seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, CFG.vocab_size, (1, length), generator=g)  # (1, S)
    with torch.no_grad():
        whole, _ = MODEL.encode(src)
        parts, past, pos = [], None, 0
        for c in chunks * length:
            if pos >= length:
                break
            out, past = MODEL.encode(src[:, pos : pos + c], past=past, start=pos)
            parts.append(out)
            pos += c
    assert (torch.cat(parts, dim=1) - whole).abs().max() <= 1e-5


def _random_vis(g: torch.Generator, src_len: int, tgt_len: int) -> torch.Tensor:
    steps = torch.randint(0, 3, (tgt_len,), generator=g)  # (T,)
    start = int(torch.randint(1, src_len + 1, (1,), generator=g))
    return torch.clamp(start + steps.cumsum(0) - steps[0], 1, src_len)  # monotone, in [1, S]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 20), st.integers(1, 15), st.integers(0, 10_000))
def test_incremental_decoder_equals_teacher_forced(src_len: int, tgt_len: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, CFG.vocab_size, (1, src_len), generator=g)
    tgt = torch.randint(4, CFG.vocab_size, (1, tgt_len), generator=g)
    vis = _random_vis(g, src_len, tgt_len).unsqueeze(0)  # (1, T)
    with torch.no_grad():
        full = torch.log_softmax(MODEL(src, tgt, vis), dim=-1)[0]  # (T, V)
        memory, enc_kv = MODEL.encode(src)
        source = SourceState(
            ids=src[0].tolist(), ends=list(range(1, src_len + 1)), enc_kv=stack_kv(enc_kv)
        )
        source.append_cross(stack_kv(MODEL.cross_kv(memory)), cache_pool())
        beam = BeamState.start()
        beam.tokens = tgt[:, :1]
        for t in range(tgt_len):
            (res,) = run_step(MODEL, [StepRequest(source, beam, int(vis[0, t]))])
            assert (res.log_probs[0] - full[t]).abs().max() <= 1e-4
            beam.cache.extend([0])
            beam.tokens = tgt[:, : t + 2] if t + 1 < tgt_len else beam.tokens
            beam.token_lp = torch.zeros(1, beam.tokens.shape[1] - 1)


def _stream(
    seed: int, src_len: int, tgt_len: int, beam_size: int, pool: KVPool | None = None
) -> tuple[SourceState, BeamState, int]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, CFG.vocab_size, (1, src_len), generator=g)
    with torch.no_grad():
        memory, enc_kv = MODEL.encode(src)
    source = SourceState(
        ids=src[0].tolist(), ends=list(range(1, src_len + 1)), enc_kv=stack_kv(enc_kv)
    )
    source.append_cross(stack_kv(MODEL.cross_kv(memory)), pool or cache_pool())
    tokens = torch.randint(4, CFG.vocab_size, (beam_size, tgt_len + 1), generator=g)
    tokens[:, 0] = 2
    beam = BeamState(tokens=tokens, token_lp=torch.zeros(beam_size, tgt_len))
    if tgt_len:
        from simulmt.model.transformer import prefill_kv

        with torch.no_grad():
            assert source.cross_kv is not None
            kv = prefill_kv(MODEL, tokens[:, :-1], unstack_kv(source.cross_kv), src_len)
            beam.cache.append(stack_kv(kv))
    return source, beam, int(torch.randint(1, src_len + 1, (1,), generator=g))


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 15), st.integers(0, 8), st.integers(1, 3)), min_size=2, max_size=5
    ),
    st.integers(0, 1000),
)
def test_batch_of_streams_equals_each_alone(shapes: list[tuple[int, int, int]], seed: int) -> None:
    streams = [_stream(seed + i, s, t, b) for i, (s, t, b) in enumerate(shapes)]
    requests = [
        StepRequest(src, beam, vis, peek=src_len)
        for (src, beam, vis), (src_len, _, _) in zip(streams, shapes, strict=True)
    ]
    together = run_step(MODEL, requests)
    for req, res in zip(requests, together, strict=True):
        (alone,) = run_step(MODEL, [req])
        assert (alone.log_probs - res.log_probs).abs().max() <= 1e-5
        assert res.peek_log_probs is not None and alone.peek_log_probs is not None
        assert (alone.peek_log_probs - res.peek_log_probs).abs().max() <= 1e-5
        assert (alone.self_kv - res.self_kv).abs().max() <= 1e-5


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 8)), min_size=2, max_size=9),
    st.lists(st.booleans(), min_size=9, max_size=9),
    st.integers(0, 1000),
)
def test_pooled_batch_equals_each_alone(
    shapes: list[tuple[int, int]], busy: list[bool], seed: int
) -> None:
    """Beam-1 streams whose sources share a pool are batched as a view of their slots, in slot
    order, with filler rows for slots that have no request (other streams, released slots).
    Same results as each alone, whatever the request order; the pool grows as needed."""
    pool = cache_pool(slots=2)  # small: claims and long sources make it grow
    streams, others = [], []
    for i, (src_len, tgt_len) in enumerate(shapes):
        if busy[i]:  # a stream that holds a slot but asks for nothing this step
            others.append(_stream(seed + 100 + i, 3, 0, 1, pool)[0])
        streams.append(_stream(seed + i, src_len, tgt_len, 1, pool))
    requests = [StepRequest(src, beam, vis) for src, beam, vis in streams][::-1]
    span = step_module._pool_span(requests)
    gaps = len(others)  # every other stream's slot lies between or after the requested ones
    assert (span is None) == (span_gaps(requests) > step_module.MAX_FILLER_SHARE * len(requests))
    limit = step_module.MAX_FILLER_SHARE
    step_module.MAX_FILLER_SHARE = 10.0  # take the pooled path whatever the gaps
    try:
        span = step_module._pool_span(requests)
        together = run_step(MODEL, requests)
    finally:
        step_module.MAX_FILLER_SHARE = limit
    assert span is not None and span.layout.count(None) == span_gaps(requests) <= gaps
    for req, res in zip(requests, together, strict=True):
        (alone,) = run_step(MODEL, [req])
        assert (alone.log_probs - res.log_probs).abs().max() <= 1e-5
        assert (alone.self_kv - res.self_kv).abs().max() <= 1e-5
        assert res.top == alone.top


def span_gaps(requests: list[StepRequest]) -> int:
    slots = [r.source.slot.index for r in requests if r.source.slot is not None]
    return max(slots) - min(slots) + 1 - len(slots)


def test_pool_slots_are_reused_and_released_when_dropped() -> None:
    pool = cache_pool(slots=2)
    a, b = pool.claim(), pool.claim()
    a.append(torch.ones(4, 1, 4, 3, 8))
    assert (a.index, b.index, a.length) == (0, 1, 3)
    c = pool.claim()  # full: the pool doubles its slots, existing caches keep their values
    assert c.index == 2 and pool.slots == 4 and torch.equal(a.tensor(), torch.ones(4, 1, 4, 3, 8))
    a.append(torch.full((4, 1, 4, 40, 8), 2.0))  # wider than the pool: positions double
    assert a.length == 43 and pool.width >= 43 and float(a.tensor()[..., 3:, :].mean()) == 2.0
    del b  # a dropped handle gives its slot back; the lowest free slot goes out first
    assert pool.claim().index == 1
    a.release()
    assert pool.lengths[0] == 0 and pool.claim().index == 0
    pool.reserve(10)
    assert pool.slots == 10 and float(c.tensor().abs().sum()) == 0.0  # c kept its (empty) slot


def test_a_stream_too_long_for_the_shared_pool_moves_to_its_own() -> None:
    shared = KVPool(PoolShape(2, 1, 2, torch.float32), width=4, max_width=20)
    assert shared.width == 16  # storage is aligned (simulmt.model.attention.ALIGN)
    neighbour, source = SourceState(), SourceState()
    neighbour.append_cross(torch.ones(2, 1, 1, 3, 2), shared)
    source.append_cross(torch.full((2, 1, 1, 18, 2), 2.0), shared)
    assert source.slot is not None and source.slot.pool is shared and shared.width == 32
    source.append_cross(torch.full((2, 1, 1, 5, 2), 3.0), shared)  # 23 > 20 positions
    assert source.slot.pool is not shared and source.cross_kv is not None
    assert source.cross_kv.shape[3] == 23 and float(source.cross_kv[..., :18, :].mean()) == 2.0
    assert float(source.cross_kv[..., 18:, :].mean()) == 3.0
    assert shared.width == 32 and shared.claim().index == 1  # the slot came back, no widening
    assert neighbour.cross_kv is not None and float(neighbour.cross_kv.mean()) == 1.0


def test_late_or_repeated_releases_are_void() -> None:
    """A release runs from a handle's finalizer, possibly late (after compaction moved the
    slot) or from inside the pool's own lock (cyclic GC during an allocation): it must neither
    free a slot twice nor deadlock."""
    pool = cache_pool(slots=4)
    a, b, c = pool.claim(), pool.claim(), pool.claim()
    stale = [0]  # a cell that once named slot 0, but not a's own cell
    pool.release(stale)
    assert 0 not in pool._free  # not a's to give back
    with pool._lock:  # re-entrant: a finalizer firing while the pool holds its lock
        b.release()
    b.release()  # twice: no-op
    del a
    assert pool.compact() and c.index == 0  # c moves down into the lowest hole
    held = [pool.claim() for _ in range(3)]  # kept: a dropped handle gives its slot back
    taken = {h.index for h in held}
    assert c.index not in taken and len(taken) == 3  # no slot handed out twice


def test_two_requests_over_one_source_are_not_merged() -> None:
    pool = cache_pool()
    source, beam, vis = _stream(7, 6, 3, 1, pool)
    copy = DecoderCache(beam.cache.view())
    other_beam = BeamState(tokens=beam.tokens.clone(), token_lp=beam.token_lp.clone(), cache=copy)
    requests = [StepRequest(source, beam, vis), StepRequest(source, other_beam, 2)]
    assert step_module._pool_span(requests) is None
    for req, res in zip(requests, run_step(MODEL, requests), strict=True):
        (alone,) = run_step(MODEL, [req])
        assert (alone.log_probs - res.log_probs).abs().max() <= 1e-5


def test_released_slots_are_compacted_into_a_view() -> None:
    """Streams between finished (released) ones are moved down once, caches intact; the step
    then reads their sources as one view with no filler rows, with the same results."""
    pool = cache_pool(slots=2)
    streams = [_stream(50 + i, 4 + i, 2, 1, pool) for i in range(7)]
    kept = streams[1::2]  # slots 1, 3, 5 stay; 0, 2, 4, 6 finish
    before = [src.cross_kv.clone() for src, _, _ in kept if src.cross_kv is not None]
    del streams
    requests = [StepRequest(src, beam, vis) for src, beam, vis in kept]
    alone = [run_step(MODEL, [req])[0] for req in requests]
    span = step_module._pool_span(requests)
    assert span is not None and span.lo == 0 and None not in span.layout
    assert sorted(map(id, span.layout)) == sorted(map(id, requests))  # each once, no filler
    assert sorted(src.slot.index for src, _, _ in kept if src.slot) == [0, 1, 2]
    for (src, _, _), old in zip(kept, before, strict=True):
        assert src.cross_kv is not None and torch.equal(src.cross_kv, old)
    for a, b in zip(alone, run_step(MODEL, requests), strict=True):
        assert (a.log_probs - b.log_probs).abs().max() <= 1e-5
    assert not pool.compact()  # nothing left to move


def test_prefix_visibility_is_respected() -> None:
    """Changing source tokens the decoder may not see must not change its output."""
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, CFG.vocab_size, (1, 10), generator=g)
    other = src.clone()
    other[0, 6:] = torch.randint(4, CFG.vocab_size, (4,), generator=g)
    tgt = torch.randint(4, CFG.vocab_size, (1, 5), generator=g)
    vis = torch.tensor([[2, 3, 4, 5, 6]])
    with torch.no_grad():
        a, b = MODEL(src, tgt, vis), MODEL(other, tgt, vis)
        c = MODEL(other, tgt, torch.full((1, 5), 10))
    assert torch.allclose(a, b, atol=1e-6)
    assert not torch.allclose(a, c, atol=1e-3)


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 12), st.integers(1, 6)), min_size=2, max_size=5),
    st.integers(0, 999),
)
def test_ragged_batched_encoding_equals_each_alone(
    shapes: list[tuple[int, int]], seed: int
) -> None:
    """Engine.encode_many over streams with different cache lengths = encoding each alone."""
    from simulmt.engine import Engine

    engine = Engine.tiny(0)
    g = torch.Generator().manual_seed(seed)
    vocab = ["Haus", "Buch", "gelesen", "heute", "der", "Straße", "schnell", "."]
    batch_sources, alone_sources, new_words = [], [], []
    for past_n, new_n in shapes:
        past = [vocab[int(i)] for i in torch.randint(len(vocab), (past_n,), generator=g)]
        new = [vocab[int(i)] for i in torch.randint(len(vocab), (new_n,), generator=g)]
        a, b = SourceState(), SourceState()
        if past:
            engine.encode(a, past)
            engine.encode(b, past)
        batch_sources.append(a)
        alone_sources.append(b)
        new_words.append(new)
    engine.encode_many(batch_sources, new_words)
    for a, b, new in zip(batch_sources, alone_sources, new_words, strict=True):
        engine.encode(b, new)
        assert a.ids == b.ids and a.ends == b.ends
        assert a.cross_kv is not None and b.cross_kv is not None
        assert (a.cross_kv - b.cross_kv).abs().max() <= 1e-5
        assert a.enc_kv is not None and b.enc_kv is not None
        assert (a.enc_kv - b.enc_kv).abs().max() <= 1e-5


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=12), st.integers(0, 1000))
def test_append_kv_equals_concatenation(sizes: list[int], seed: int) -> None:
    """Growing a cache block in place (spare capacity) gives what torch.cat gives, and earlier
    views of the block keep their contents."""
    g = torch.Generator().manual_seed(seed)
    cache: torch.Tensor | None = None
    reference: torch.Tensor | None = None
    views: list[tuple[torch.Tensor, torch.Tensor]] = []
    for n in sizes:
        new = torch.randn(6, 1, 2, n, 4, generator=g)  # (2L, B, H, n, dh)
        cache = append_kv(cache, new)
        reference = new if reference is None else torch.cat([reference, new], dim=3)
        assert torch.equal(cache, reference)
        views.append((cache, reference.clone()))
    for view, expected in views:
        assert torch.equal(view, expected)


def test_append_kv_copies_foreign_tensors() -> None:
    """A block not made by append_kv (e.g. a slice of a batch) is never written through."""
    batch = torch.zeros(6, 3, 2, 40, 4)
    row = batch[:, 1:2, :, :5]  # a view into someone else's tensor
    grown = append_kv(row, torch.ones(6, 1, 2, 2, 4))
    assert grown.shape == (6, 1, 2, 7, 4)
    assert torch.count_nonzero(batch) == 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 9)), min_size=1, max_size=6),
    st.integers(0, 3),
    st.integers(0, 1000),
)
def test_pack_kv_equals_zero_padding(shapes: list[tuple[int, int]], extra: int, seed: int) -> None:
    """pack_kv = zero-pad every block to the width and concatenate the rows. Garbage in a
    fresh buffer never shows: the allocator is first handed a NaN-filled buffer of the same
    size to reuse."""
    g = torch.Generator().manual_seed(seed)
    blocks = [torch.randn(4, rows, 2, t, 3, generator=g) for rows, t in shapes]
    width = max(t for _, t in shapes) + extra
    n = sum(rows for rows, _ in shapes)
    poison = torch.full((4, n, 2, width, 3), float("nan"))
    del poison  # its memory is what new_empty is likely to get back
    out = pack_kv(blocks, width)
    expected = torch.cat([F.pad(b, (0, 0, 0, width - b.shape[3])) for b in blocks], dim=1)
    assert out.shape == (4, n, 2, width, 3)
    assert torch.equal(out, expected)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 9)), min_size=1, max_size=5),
             min_size=1, max_size=4),
    st.integers(0, 1000),
)
def test_pack_kv_into_a_reused_buffer_holds_every_block(
    passes: list[list[tuple[int, int]]], seed: int
) -> None:
    """Pass after pass, `pack_kv(into=)` lays each block's positions where `pack_kv` does, in
    one buffer that is reused while it is large enough (what lies past them is masked)."""
    g = torch.Generator().manual_seed(seed)
    scratch = Scratch()
    for shapes in passes:
        blocks = [torch.randn(4, rows, 2, t, 3, generator=g) for rows, t in shapes]
        width = max(t for _, t in shapes) + 2
        out = pack_kv(blocks, width, into=scratch)
        row = 0
        for b in blocks:
            assert torch.equal(out[:, row : row + b.shape[1], :, : b.shape[3]], b)
            row += b.shape[1]
        assert out.shape == (4, row, 2, width, 3) and out.is_contiguous()
    # a pass that fits lies in the same memory as the last one (`out` is still alive)
    small = pack_kv([torch.ones(4, 1, 2, 1, 3)], 1, into=scratch)
    assert small.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
    scratch.KEEP_BYTES = small.numel() * 4  # a pass over the limit: a buffer of its own
    big = pack_kv([torch.ones(4, 1, 2, 1, 3)], 3, into=scratch)
    assert torch.equal(big[:, :, :, 1:], torch.zeros(4, 1, 2, 2, 3))
    again = pack_kv([torch.ones(4, 1, 2, 1, 3)], 1, into=scratch)
    assert again.untyped_storage().data_ptr() == small.untyped_storage().data_ptr()


def test_encoding_over_a_reused_buffer_gives_the_bits_of_a_fresh_one() -> None:
    """The encoder's padded caches lie in a buffer that keeps an earlier pass's K/V past each
    row (`Scratch`): they are masked, so a stream's encoding is bit for bit what an engine
    that never ran another pass gives."""
    from simulmt.engine import Engine

    used, fresh = Engine.tiny(0), Engine.tiny(0)
    words = ["Haus", "Buch", "gelesen", "heute", "der", "Straße", "schnell", "."]
    crowd = [SourceState() for _ in range(6)]
    for n in range(1, 4):  # long caches of six streams fill the buffer with their K/V
        used.encode_many(crowd, [words[i : i + n + 2] for i in range(6)])
    a, b = SourceState(), SourceState()
    for chunk in (["der"], ["Straße", "schnell"], ["."]):
        used.encode(a, chunk)
        fresh.encode(b, chunk)
        assert a.enc_kv is not None and b.enc_kv is not None
        assert torch.equal(a.enc_kv, b.enc_kv)
        assert a.cross_kv is not None and b.cross_kv is not None
        assert torch.equal(a.cross_kv, b.cross_kv)


def test_a_refused_too_long_input_leaves_the_source_as_it_was() -> None:
    """The length check comes before any change: ids, word ends and caches stay untouched,
    alone and batched (the old order appended word ends, then raised)."""
    from simulmt.engine import Engine

    engine = Engine.tiny(0)
    too_long = ["Straße"] * (engine.model.cfg.max_len + 1)
    a, b = SourceState(), SourceState()
    engine.encode(a, ["der", "Haus"])
    engine.encode(b, ["heute"])
    before = [(list(s.ids), list(s.ends), _enc(s).clone(), _cross(s).clone()) for s in (a, b)]
    with pytest.raises(ValueError, match="longer than"):
        engine.encode(a, too_long)
    with pytest.raises(ValueError, match="longer than"):
        engine.encode_many([b, a], [["Buch"], too_long])
    for s, (ids, ends, enc, cross) in zip((a, b), before, strict=True):
        assert s.ids == ids and s.ends == ends and torch.equal(_enc(s), enc)
        assert torch.equal(_cross(s), cross)


def test_a_batched_encode_that_fails_part_way_changes_no_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An internal error after the encoder layers ran (in the cross-attention projection)
    leaves every source as it was, so the server's retry of each session alone encodes every
    word once. A long word among short ones: one packed call, and its result equals encoding
    each stream alone."""
    from simulmt.engine import Engine

    engine = Engine.tiny(0)
    a, b, c = SourceState(), SourceState(), SourceState()
    for s in (a, b, c):
        engine.encode(s, ["der", "Haus"])
    before = [(list(s.ids), list(s.ends), _enc(s).clone(), _cross(s).clone()) for s in (a, b, c)]
    short, long_word = ["heute"], ["Donaudampfschifffahrtsgesellschaft" * 2]
    words = [short, short, long_word]
    calls = []
    real = engine.model.cross_kv

    def failing_call(memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        calls.append(memory.shape)
        raise RuntimeError("injected fault")

    monkeypatch.setattr(engine.model, "cross_kv", failing_call)
    with pytest.raises(RuntimeError, match="injected fault"):
        engine.encode_many([a, b, c], words)
    assert len(calls) == 1  # one call for all three, whatever their lengths
    for s, (ids, ends, enc, cross) in zip((a, b, c), before, strict=True):
        assert s.ids == ids and s.ends == ends and torch.equal(_enc(s), enc)
        assert torch.equal(_cross(s), cross)
    monkeypatch.setattr(engine.model, "cross_kv", real)
    engine.encode_many([a, b, c], words)  # the retry: each word once, as encoding alone
    for s, ws in zip((a, b, c), words, strict=True):
        alone = SourceState()
        engine.encode(alone, ["der", "Haus"])
        engine.encode(alone, ws)
        assert s.ids == alone.ids and s.ends == alone.ends
        assert torch.allclose(_cross(s), _cross(alone), atol=1e-5)
        assert s.enc_kv is not None and alone.enc_kv is not None
        assert torch.allclose(s.enc_kv, alone.enc_kv, atol=1e-5)


def _enc(source: SourceState) -> torch.Tensor:
    assert source.enc_kv is not None
    return source.enc_kv


def _cross(source: SourceState) -> torch.Tensor:
    assert source.cross_kv is not None
    return source.cross_kv
