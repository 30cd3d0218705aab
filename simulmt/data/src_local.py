"""Local aligned files as corpus sources: a user's own parallel text and the shared corpora.

A local file pair is `X.de` + `X.en` (line n translates line n) or one `X.tsv` (German TAB English).
Its *documents* are the units the split holds out whole. Sentence collections such as Tatoeba
repeat a sentence with several translations, so pairs that share a side (directly or through a
chain of pairs) form one group, a connected component, and a group is never split across
train/dev/test. Files in running order (Europarl speeches) also keep blocks of consecutive lines
together, so a held-out block is a stretch of speech, not scattered sentences.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulmt.data.clean import Pair
from simulmt.data.document import Document

GROUPS_PER_DOCUMENT = 64  # components are packed into documents of about this many pairs


class LocalSourceError(ValueError):
    """A local source cannot be read; the message names the file and what is accepted."""


@dataclass(frozen=True)
class LocalFiles:
    """One local source: its files, licence and how lines group into documents."""

    name: str
    files: tuple[Path, ...]  # (X.de, X.en) pairs flattened, or single .tsv files
    licence: str = "unknown (user-supplied)"
    block: int = 1  # consecutive lines kept together (1: only shared sides group pairs)

    def read(self, roots: list[Path]) -> Iterator[Document]:
        """Documents of the source (`roots` is unused: nothing is downloaded)."""
        pairs = [p for path in _pair_files(self.files) for p in read_pairs(path)]
        yield from group_documents(self.name, pairs, block=self.block)

    def describe(self) -> list[dict[str, object]]:
        """Each file with its sha256 and line count, for the manifest."""
        out: list[dict[str, object]] = []
        for path in self.files:
            data = path.read_bytes()
            out.append({"file": str(path), "sha256": hashlib.sha256(data).hexdigest(),
                        "lines": data.count(b"\n")})
        return out


def local_files(name: str, path: Path, *, licence: str = "unknown (user-supplied)",
                block: int = 1) -> LocalFiles:
    """A local source from `path`: a `.tsv` file, or a prefix/`.de` file with a `.en` beside it."""
    if path.suffix == ".tsv":
        if not path.is_file():
            raise LocalSourceError(f"{path} does not exist; a local source is X.tsv "
                                   "(German TAB English) or X.de + X.en")
        return LocalFiles(name, (path,), licence, block)
    stem = path.with_suffix("") if path.suffix in (".de", ".en") else path
    de, en = stem.with_name(stem.name + ".de"), stem.with_name(stem.name + ".en")
    missing = [str(p) for p in (de, en) if not p.is_file()]
    if missing:
        raise LocalSourceError(f"local source {name!r}: {', '.join(missing)} not found; "
                               "accepted: X.de + X.en (line-aligned) or X.tsv")
    return LocalFiles(name, (de, en), licence, block)


def _pair_files(files: Sequence[Path]) -> Iterator[tuple[Path, ...]]:
    i = 0
    while i < len(files):
        if files[i].suffix == ".tsv":
            yield (files[i],)
            i += 1
        else:
            yield (files[i], files[i + 1])
            i += 2


def read_pairs(paths: tuple[Path, ...]) -> list[Pair]:
    """Pairs of one `.tsv` file or one `.de`/`.en` file pair; LocalSourceError on misalignment."""
    if len(paths) == 1:
        pairs = []
        lines = paths[0].read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            cols = line.split("\t")
            if len(cols) < 2:
                raise LocalSourceError(f"{paths[0]}:{n}: expected 'German<TAB>English', got "
                                       f"{line[:60]!r}")
            pairs.append((cols[0], cols[1]))
        return pairs
    de = paths[0].read_text(encoding="utf-8").splitlines()
    en = paths[1].read_text(encoding="utf-8").splitlines()
    if len(de) != len(en):
        raise LocalSourceError(f"{paths[0]} has {len(de)} lines but {paths[1]} has {len(en)}; "
                               "local files must be line-aligned")
    return list(zip(de, en, strict=True))


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def components(pairs: Sequence[Pair], *, block: int = 1) -> list[list[int]]:
    """Groups of pair indices: pairs sharing a German or an English side (after whitespace and
    case folding), transitively, and pairs in the same block of `block` consecutive lines."""
    uf = _UnionFind(len(pairs))
    first: dict[tuple[int, str], int] = {}
    for i, pair in enumerate(pairs):
        for side, text in enumerate(pair):
            key = (side, " ".join(text.casefold().split()))
            if key in first:
                uf.union(first[key], i)
            else:
                first[key] = i
        if block > 1 and i % block:
            uf.union(i - 1, i)
    groups: dict[int, list[int]] = {}
    for i in range(len(pairs)):
        groups.setdefault(uf.find(i), []).append(i)
    return list(groups.values())


def group_documents(name: str, pairs: Sequence[Pair], *, block: int = 1) -> Iterator[Document]:
    """Documents made of whole components, packed in a stable hash order to about
    GROUPS_PER_DOCUMENT pairs each (many small documents let the split hit its target)."""
    groups = components(pairs, block=block)
    groups.sort(key=lambda g: hashlib.sha256(pairs[g[0]][0].encode()).hexdigest())
    doc: list[Pair] = []
    count = 0
    for group in groups:
        doc.extend(pairs[i] for i in group)
        if len(doc) >= GROUPS_PER_DOCUMENT:
            yield Document(name, f"{name}-{count:05d}", tuple(doc))
            doc, count = [], count + 1
    if doc:
        yield Document(name, f"{name}-{count:05d}", tuple(doc))


# The shared corpora (corpora/README.md beside the project): folder → (name, stem, licence, block).
# Tatoeba's two parts are one source, so that components span both.
SHARED: tuple[tuple[str, tuple[str, ...], str, int], ...] = (
    ("tatoeba", ("tatoeba/tatoeba", "tatoeba-opusmt-extra/tatoeba-extra"),
     "CC-BY 2.0 FR; attribution: www.manythings.org/anki and tatoeba.org", 1),
    ("europarl", ("europarl-wmt-test/europarl",),
     "no known copyright restrictions (statmt.org); credit the European Parliament", 20),
)


def shared_sources(root: Path) -> list[LocalFiles]:
    """The shared corpora found under `root` (news test sets are never training data here)."""
    found = []
    for name, stems, licence, block in SHARED:
        parts = [local_files(name, root / stem, licence=licence, block=block)
                 for stem in stems if (root / (stem + ".de")).is_file()]
        if parts:
            files = tuple(f for part in parts for f in part.files)
            found.append(LocalFiles(name, files, licence, block))
    return found
