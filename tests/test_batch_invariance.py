"""With int8 linear layers (exact in int32 whatever the batch) a stream's model work is the same
bit for bit alone and in any batch: the encoder's packed pass and the decoder's batched step
pad queries and keys to aligned sizes and keep each stream's keys at its own positions
(`simulmt.model.attention.ALIGN`). So `simulmt eval`'s batches of 256, a server's batches and a
session alone give one caption. Checked on the tiny model against each stream run alone."""

from __future__ import annotations

import functools
import random

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.engine import Engine, for_inference
from simulmt.model import attention as attention_module
from simulmt.model import batch as step_module
from simulmt.model.layers import stack_kv
from simulmt.model.pool import KVPool, PoolShape
from simulmt.model.state import SourceState
from simulmt.output.updates import Update
from simulmt.search.state import BeamState, reorder
from simulmt.search.step import StepRequest, run_step
from simulmt.session import Session, advance

WORDS = ("ich", "habe", "heute", "einen", "Brief", "geschrieben", "Donaudampfschifffahrt",
         "das", "Wetter", "ist", "schön", "Sonnenuntergang", "wir", "gehen", "nach", "Hause",
         "Bundesverfassungsgericht", "und", "morgen", "vielleicht")


@functools.cache
def int8_engine() -> Engine:
    base = Engine.tiny(0)
    return Engine(for_inference(base.model, "int8"), base.tokenizer, base.info)


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(n)]


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 5), st.integers(0, 10_000), st.sampled_from([0, 1, 2, 3]))
def test_a_streams_encoding_is_the_same_alone_and_packed(
    n_streams: int, seed: int, group: int
) -> None:
    """Streams of other cache lengths bringing other numbers of tokens in the same pass, in
    attention groups of `group` streams (0: one group), each over its own width."""
    engine, rng = int8_engine(), random.Random(seed)
    before, attention_module.GROUP_ROWS = attention_module.GROUP_ROWS, group
    try:
        _encode_alone_and_packed(engine, rng, n_streams)
    finally:
        attention_module.GROUP_ROWS = before


def _encode_alone_and_packed(engine: Engine, rng: random.Random, n_streams: int) -> None:
    turns = [[_words(rng, rng.randint(0, 3)) for _ in range(n_streams)] for _ in range(6)]
    packed = [SourceState() for _ in range(n_streams)]
    alone = [SourceState() for _ in range(n_streams)]
    torch.set_num_threads(1)
    for turn in turns:
        todo = [i for i, ws in enumerate(turn) if ws]
        if not todo:
            continue
        engine.encode_many([packed[i] for i in todo], [turn[i] for i in todo])
        for i in todo:
            engine.encode(alone[i], turn[i])
        for a, p in zip(alone, packed, strict=True):
            assert a.ids == p.ids
            if a.enc_kv is not None:
                assert p.enc_kv is not None and torch.equal(a.enc_kv, p.enc_kv)
                assert a.cross_kv is not None and p.cross_kv is not None
                assert torch.equal(a.cross_kv, p.cross_kv)


class _Stream:
    """A source (encoded once, its cross-attention K/V in `pool`) and a beam, for decoder steps."""

    def __init__(self, engine: Engine, words: list[str], pool: KVPool) -> None:
        encode = engine.tokenizer.encode_word
        ids = [t for i, w in enumerate(words) for t in encode(w, first=i == 0)]
        with torch.no_grad():
            memory, _ = engine.model.encode(torch.tensor([ids]))  # (1, S, D)
        self.source = SourceState(ids=ids)
        self.source.append_cross(stack_kv(engine.model.cross_kv(memory)), pool)
        self.beam = BeamState.start()


def _feed(stream: _Stream, token: int) -> None:
    beam = stream.beam
    beam.cache.extend(list(range(beam.size)))
    beam.tokens = torch.cat([beam.tokens, torch.full((beam.size, 1), token)], dim=1)
    beam.token_lp = torch.zeros(beam.size, beam.tokens.shape[1] - 1)


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 5), st.integers(0, 10_000), st.booleans())
def test_a_decoder_step_is_the_same_alone_and_batched(
    n_streams: int, seed: int, pooled: bool
) -> None:
    """Sources and target prefixes of other lengths; pooled batches (views of the cache pool)
    and gathered ones (a beam of two forces gathering)."""
    engine, rng = int8_engine(), random.Random(seed)
    cfg = engine.model.cfg
    shape = PoolShape(2 * cfg.dec_layers, cfg.n_heads, cfg.head_dim, torch.float32)
    sources = [_words(rng, rng.randint(1, 8)) for _ in range(n_streams)]
    together_pool, alone_pool = KVPool(shape), KVPool(shape)
    together = [_Stream(engine, ws, together_pool) for ws in sources]
    alone = [_Stream(engine, ws, alone_pool) for ws in sources]
    if not pooled:
        for s in (together[0], alone[0]):
            reorder(s.beam, torch.tensor([0, 0]))
    torch.set_num_threads(1)
    limit = step_module.MAX_FILLER_SHARE
    step_module.MAX_FILLER_SHARE = 10.0  # the pooled path whenever every beam is one row
    try:
        for _ in range(6):
            active = [i for i in range(n_streams) if rng.random() < 0.8] or [0]
            vis = {i: rng.randint(1, len(together[i].source.ids)) for i in active}
            batch = run_step(engine.model, [
                StepRequest(together[i].source, together[i].beam, vis[i]) for i in active
            ])
            for i, got in zip(active, batch, strict=True):
                want = run_step(engine.model, [
                    StepRequest(alone[i].source, alone[i].beam, vis[i])
                ])[0]
                assert torch.equal(got.log_probs, want.log_probs)
                token = rng.randrange(4, cfg.vocab_size)
                _feed(together[i], token)
                _feed(alone[i], token)
    finally:
        step_module.MAX_FILLER_SHARE = limit


def _seen(u: Update) -> tuple[object, ...]:
    return u.sentence_id, u.committed_delta, u.tentative, u.delays


def test_sessions_advanced_together_caption_as_each_alone() -> None:
    """End to end: four sessions fed word by word and advanced in one batch per step give the
    updates (text and delays) each gives alone."""
    engine, rng = int8_engine(), random.Random(7)
    texts = [_words(rng, rng.randint(4, 12)) + ["."] for _ in range(4)]
    torch.set_num_threads(1)
    alone = []
    for words in texts:
        session = Session(engine, policy="wait-k:k=2")
        ups = [u for w in words for u in session.push(w)] + session.finish()
        alone.append([_seen(u) for u in ups])
    sessions = [Session(engine, policy="wait-k:k=2") for _ in texts]
    together: list[list[tuple[object, ...]]] = [[] for _ in texts]
    for step in range(max(len(t) for t in texts) + 1):
        for session, words in zip(sessions, texts, strict=True):
            if step < len(words):
                session.feed(words[step])
            elif step == len(words):
                session.end_source()
        while any(s.has_work for s in sessions):
            for i, ups in enumerate(advance(engine, sessions)):
                together[i] += [_seen(u) for u in ups]
    assert together == alone
