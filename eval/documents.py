"""Documents for long-form evaluation: parallel source and reference sentences, in order.

A document is given either as one file (a folder of files, matched by name) or as a block of
lines in one file, blocks separated by blank lines. Source and reference have one sentence a
line and the same number of lines per document: the reference lines are what the hypothesis
is resegmented onto, the source lines say where each sentence's source words start (the
origin of its StreamLAAL delays). The source is streamed as one word sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulmt.input.textcheck import read_utf8
from simulmt.segment.views import SourceStyle, apply_style

__all__ = ["Document", "read_documents"]


@dataclass(frozen=True)
class Document:
    name: str
    sources: tuple[tuple[str, ...], ...]  # each sentence's source words, in the chosen style
    references: tuple[str, ...]  # one reference translation per source sentence

    @property
    def words(self) -> list[str]:
        """The document as one word stream."""
        return [w for sentence in self.sources for w in sentence]

    @property
    def offsets(self) -> list[int]:
        """Source words before each sentence (where its delays count from)."""
        out, total = [], 0
        for sentence in self.sources:
            out.append(total)
            total += len(sentence)
        return out


def _blocks(path: Path, what: str) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in read_utf8(path, what).splitlines():
        if line.strip():
            blocks[-1].append(line.strip())
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def _pairs(source: Path, reference: Path) -> list[tuple[str, list[str], list[str]]]:
    if source.is_dir() and reference.is_dir():
        names = sorted(p.name for p in source.iterdir() if p.is_file())
        if not names:
            raise ValueError(f"source folder {source} holds no files")
        missing = [n for n in names if not (reference / n).is_file()]
        if missing:
            raise ValueError(f"reference folder {reference} has no file {missing[0]!r}")
        return [(n, *_one(source / n, reference / n)) for n in names]
    for p in (source, reference):
        if not p.exists():
            raise FileNotFoundError(f"{p} not found")
    if source.is_dir() or reference.is_dir():
        raise ValueError("give --source and --reference both as files or both as folders")
    src, ref = _blocks(source, "source"), _blocks(reference, "reference")
    if len(src) != len(ref):
        raise ValueError(
            f"{source} has {len(src)} documents (blank-line blocks), {reference} has {len(ref)}"
        )
    return [(f"doc{i + 1}", s, r) for i, (s, r) in enumerate(zip(src, ref, strict=True))]


def _one(source: Path, reference: Path) -> tuple[list[str], list[str]]:
    src = [line.strip() for line in read_utf8(source, "source").splitlines() if line.strip()]
    ref = [line.strip() for line in read_utf8(reference, "reference").splitlines() if line.strip()]
    return src, ref


def read_documents(
    source: Path,
    reference: Path,
    *,
    style: SourceStyle = SourceStyle.TEXT,
    limit: int | None = None,
) -> list[Document]:
    """Read parallel documents; every bad input is a ValueError naming the place."""
    docs = []
    for name, src, ref in _pairs(source, reference)[:limit]:
        if len(src) != len(ref):
            raise ValueError(
                f"document {name}: {len(src)} source sentences but {len(ref)} "
                "reference sentences; give one reference line per source line"
            )
        docs.append(Document(name, _styled(name, src, style), tuple(ref)))
    if not docs:
        raise ValueError(f"no documents in {source}")
    return docs


def _styled(name: str, sentences: Sequence[str], style: SourceStyle) -> tuple[tuple[str, ...], ...]:
    out = []
    for i, s in enumerate(sentences, start=1):
        words = apply_style(s.split(), style)
        if not words:
            raise ValueError(
                f"document {name}, sentence {i}: no source words left in the "
                f"{style.value} style ({s!r})"
            )
        out.append(tuple(words))
    return tuple(out)
