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
