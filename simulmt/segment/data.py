"""Training and test streams for the segmenter: consecutive sentences joined, labelled.

A document is a list of sentences in their original order (Europarl speeches and WMT news
files are in document order); joined, its words form one stream whose labels say where a
sentence ends. Each stream is prepared in every `SourceStyle`, so training can show the model
typed text and recognizer output alike, and tests can score the recognizer view alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from simulmt.segment.views import SourceStyle, apply_style
from simulmt.smallnet.features import words_features

__all__ = ["Stream", "corpus_documents", "make_stream", "read_documents"]


@dataclass(frozen=True)
class Stream:
    """One joined word stream: features and, per word, whether a sentence ends after it."""

    words: list[str]
    ids: torch.Tensor  # (N, N_IDS) long
    flags: torch.Tensor  # (N, N_FLAGS) float
    ends: torch.Tensor  # (N,) float: 1.0 after a sentence's last word

    def __len__(self) -> int:
        return len(self.words)


def make_stream(documents: Sequence[Sequence[str]], style: SourceStyle, buckets: int) -> Stream:
    """The documents' sentences, in `style`, joined into one stream (a document's end is a
    sentence end too); sentences with no word left in `style` are skipped."""
    words: list[str] = []
    ends: list[float] = []
    for doc in documents:
        for sentence in doc:
            ws = apply_style(sentence.split(), style)
            if ws:
                words += ws
                ends += [0.0] * (len(ws) - 1) + [1.0]
    ids, flags = words_features(words, buckets)
    return Stream(words, ids, flags, torch.tensor(ends))


def read_documents(path: Path) -> list[list[str]]:
    """A text file with one sentence a line, in document order; blank lines end documents."""
    if not path.is_file():
        raise FileNotFoundError(f"text file {path} not found")
    docs: list[list[str]] = [[]]
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            docs[-1].append(line.strip())
        elif docs[-1]:
            docs.append([])
    return [d for d in docs if d]


def corpus_documents(corpus: Path, split: str, lang: str) -> list[list[str]]:
    """Lines of `simulmt data build`'s SPLIT.LANG, grouped into runs of the same source label
    (SPLIT.source), which keeps each source's lines in their order."""
    text, labels = corpus / f"{split}.{lang}", corpus / f"{split}.source"
    for p in (text, labels):
        if not p.is_file():
            raise FileNotFoundError(
                f"{p} not found: expected a corpus folder of `simulmt data build`"
            )
    lines = text.read_text(encoding="utf-8").splitlines()
    sources = labels.read_text(encoding="utf-8").splitlines()
    if len(lines) != len(sources):
        raise ValueError(f"{text} has {len(lines)} lines but {labels} has {len(sources)}")
    docs: list[list[str]] = []
    previous = None
    for line, label in zip(lines, sources, strict=True):
        if label != previous:
            docs.append([])
            previous = label
        if line.strip():
            docs[-1].append(line.strip())
    return [d for d in docs if d]
