"""Training masks follow the engine's schedule: word-level wait-k over target words, the
recognizer-view source where drawn, and the old token-level schedule as an option."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.train.batches import Example, collate, target_words

WORD_START = 1000  # test ids >= this open a word ('▁'), others continue one


def _is_start(tok: int) -> bool:
    return tok >= WORD_START


def _ids(lengths: list[int]) -> tuple[int, ...]:
    """Token ids for words of the given piece counts."""
    return tuple(tok for n in lengths for tok in (WORD_START + n, *[5] * (n - 1)))


def _ends(lengths: list[int]) -> tuple[int, ...]:
    out, total = [], 0
    for n in lengths:
        total += n
        out.append(total)
    return tuple(out)


words = st.lists(st.integers(1, 3), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(words, words, st.integers(0, 6))
def test_every_token_of_target_word_i_sees_g_i_source_words(src: list[int], tgt: list[int],
                                                             k: int) -> None:
    tgt_ids = _ids(tgt)
    ex = Example(_ids(src), tgt_ids, _ends(src), target_words(tgt_ids, _is_start))
    vis = collate([ex], k, target_words=True).vis[0].tolist()  # (T,) per decoder step
    ends = _ends(src)
    step = 0
    for i, n in enumerate([*tgt, 1], start=1):  # each target word, then EOS as word |y|+1
        g = len(src) if k == 0 else min(len(src), k + i - 1)
        assert vis[step:step + n] == [ends[g - 1]] * n
        step += n
    assert step == len(vis)


def test_token_schedule_and_recognizer_view_are_options() -> None:
    src, tgt = [1, 1, 1], [2, 2]  # three one-piece source words, two two-piece target words
    tgt_ids = _ids(tgt)
    asr = _ids([2, 2])  # the recognizer view tokenizes differently
    ex = Example(_ids(src), tgt_ids, _ends(src), target_words(tgt_ids, _is_start), asr, (2, 4))
    assert collate([ex], 1).vis[0].tolist() == [1, 2, 3, 3, 3]  # token level: one word a token
    assert collate([ex], 1, target_words=True).vis[0].tolist() == [1, 1, 2, 2, 3]
    batch = collate([ex], 1, target_words=True, asr=[True])
    assert batch.src[0].tolist() == list(asr)
    assert batch.vis[0].tolist() == [2, 2, 4, 4, 4]
    assert collate([ex], 1, asr=[False]).src[0].tolist() == list(_ids(src))


example_words = st.tuples(words, words, st.booleans())


@settings(max_examples=100, deadline=None)
@given(st.lists(example_words, min_size=1, max_size=6), st.integers(0, 6), st.booleans(),
       st.lists(st.booleans(), min_size=6, max_size=6))
def test_the_batched_collate_matches_one_example_at_a_time(
    rows: list[tuple[list[int], list[int], bool]], k: int, by_word: bool, asr: list[bool]
) -> None:
    """The vectorised collate equals padding each row and calling `visible` per example (the
    straightforward form it replaced for speed)."""
    import torch

    from simulmt.data.vocab import BOS_ID, EOS_ID
    from simulmt.train.batches import visible

    examples = []
    for src, tgt, has_asr in rows:
        tgt_ids = _ids(tgt)
        view = _ids([1] * len(src)) if has_asr else ()
        examples.append(Example(_ids(src), tgt_ids, _ends(src), target_words(tgt_ids, _is_start),
                                view, _ends([1] * len(src)) if has_asr else ()))
    batch = collate(examples, k, target_words=by_word, asr=asr[: len(examples)])
    width = max(len(e.tgt) for e in examples) + 1
    for b, e in enumerate(examples):
        ids, ends = e.source(asr[b])
        assert batch.src[b].tolist() == [*ids, *[0] * (batch.src.shape[1] - len(ids))]
        assert batch.tgt_in[b].tolist() == [BOS_ID, *e.tgt, *[0] * (width - len(e.tgt) - 1)]
        assert batch.tgt_out[b].tolist() == [*e.tgt, EOS_ID, *[0] * (width - len(e.tgt) - 1)]
        steps = e.tgt_words if by_word else range(1, len(e.tgt) + 2)
        assert torch.equal(batch.vis[b], visible(ends, k, steps, width))
    assert batch.src.dtype == batch.vis.dtype == torch.long
    assert batch.n_tokens == sum(len(e.tgt) + 1 for e in examples)
