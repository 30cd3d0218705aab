"""Document split: whole documents held out, no held-out source sentence in train, no duplicates."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.data.document import Document
from simulmt.data.split import Split, SplitConfig, assign_documents, split_pairs


def _docs(sizes: list[int]) -> list[Document]:
    return [Document("src", f"doc-{i}", tuple((f"de {i} {j}", f"en {i} {j}") for j in range(n)))
            for i, n in enumerate(sizes)]


def test_assignment_holds_out_whole_documents() -> None:
    docs = _docs([10] * 20)
    assignment = assign_documents(docs, SplitConfig(heldout_fraction=0.1))
    counts = {s: sum(1 for v in assignment.values() if v is s) for s in Split}
    assert counts == {Split.TRAIN: 16, Split.DEV: 2, Split.TEST: 2}
    assert assignment == assign_documents(list(reversed(docs)), SplitConfig(heldout_fraction=0.1))


def test_oversized_documents_and_tiny_sources_stay_in_train() -> None:
    docs = _docs([1000, 10, 10, 10, 10])
    assignment = assign_documents(docs, SplitConfig(heldout_fraction=0.02))
    assert assignment["doc-0"] is Split.TRAIN  # 1000 pairs ≫ 1.5 × 21
    assert assign_documents(_docs([5, 5]), SplitConfig()) == {"doc-0": Split.TRAIN,
                                                              "doc-1": Split.TRAIN}


words = st.sampled_from(["a", "b", "c", "d", "A"])
pairs = st.tuples(words, words)
tagged = st.lists(st.tuples(st.sampled_from(list(Split)), st.sampled_from(["x", "y"]), pairs),
                  max_size=40)


@settings(max_examples=200, deadline=None)
@given(tagged)
def test_split_pairs_never_leaks_or_duplicates(items: list) -> None:
    out = split_pairs(items)
    for side in (0, 1):  # neither the German nor the English side of a held-out pair leaks
        seen = {s: {p[side].casefold() for _, p in out[s]} for s in Split}
        assert not seen[Split.TRAIN] & (seen[Split.DEV] | seen[Split.TEST])
        assert not seen[Split.DEV] & seen[Split.TEST]
    for split in Split:
        kept = [p for _, p in out[split]]
        assert len(kept) == len(set(kept))
        assert set(kept) <= {p for s, _, p in items if s is split}
    # test keeps every distinct pair that was assigned to it
    assert {p for _, p in out[Split.TEST]} == {p for s, _, p in items if s is Split.TEST}
