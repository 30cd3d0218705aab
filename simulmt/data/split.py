"""Split documents into train/dev/test: whole documents held out, no held-out source in train."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simulmt.data.clean import Pair
from simulmt.data.document import Document

Tagged = tuple[str, Pair]  # (source name, pair)


class Split(enum.Enum):
    TRAIN = "train"
    DEV = "dev"
    TEST = "test"


@dataclass(frozen=True)
class SplitConfig:
    """How much of each source is held out."""

    heldout_fraction: float = 0.03  # per source, for dev and for test each: ~3k pairs of ~110k
    max_doc_overshoot: float = 1.5  # skip documents larger than this × the target (e.g. Psalms)
    min_heldout_pairs: int = 1000  # dev and test must each reach this many pairs in total


def _doc_key(doc: Document) -> str:
    return hashlib.sha256(f"{doc.source}/{doc.name}".encode()).hexdigest()


def assign_documents(docs: Sequence[Document], config: SplitConfig) -> dict[str, Split]:
    """Document name → split, for the documents of one source, chosen by a stable hash order.

    Test is filled first, then dev, each to `heldout_fraction` of the source's pairs; a source with
    fewer than three documents stays entirely in train.
    """
    assignment = {doc.name: Split.TRAIN for doc in docs}
    if len(docs) < 3:
        return assignment
    target = config.heldout_fraction * sum(len(d.pairs) for d in docs)
    order = sorted(docs, key=_doc_key)
    for split in (Split.TEST, Split.DEV):
        taken = 0
        for doc in order:
            if taken >= target:
                break
            size = len(doc.pairs)
            fits = 0 < size <= config.max_doc_overshoot * target
            if assignment[doc.name] is Split.TRAIN and fits:
                assignment[doc.name] = split
                taken += size
    return assignment


def dedupe(tagged: Iterable[Tagged]) -> list[Tagged]:
    """Tagged pairs without exact duplicates (the first occurrence, and its source, is kept)."""
    seen: set[Pair] = set()
    kept: list[Tagged] = []
    for source, pair in tagged:
        if pair not in seen:
            seen.add(pair)
            kept.append((source, pair))
    return kept


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def split_pairs(tagged: Sequence[tuple[Split, str, Pair]]) -> dict[Split, list[Tagged]]:
    """Per split, deduplicated (source name, pair)s. No German or English sentence of a test pair
    recurs in dev or train, none of a dev pair in train (compared case- and space-folded): sources
    such as Tatoeba translate one sentence several ways, and a held-out sentence seen in training
    would inflate the scores."""
    by_split: dict[Split, list[Tagged]] = {s: [] for s in Split}
    for split, source, pair in tagged:
        by_split[split].append((source, pair))
    test = dedupe(by_split[Split.TEST])
    held = {(side, _fold(p[side])) for _, p in test for side in (0, 1)}

    def unseen(pair: Pair) -> bool:
        return all((side, _fold(pair[side])) not in held for side in (0, 1))

    dev = [(s, p) for s, p in dedupe(by_split[Split.DEV]) if unseen(p)]
    held |= {(side, _fold(p[side])) for _, p in dev for side in (0, 1)}
    train = [(s, p) for s, p in dedupe(by_split[Split.TRAIN]) if unseen(p)]
    return {Split.TRAIN: train, Split.DEV: dev, Split.TEST: test}
