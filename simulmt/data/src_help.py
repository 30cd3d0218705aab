"""LibreOffice help (aligned by file path + paragraph id) and GIMP help (aligned by block order)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from simulmt.data.clean import Pair, normalize, pair_sentences
from simulmt.data.document import Document
from simulmt.data.htmlblocks import parse_blocks

LIBREOFFICE_DIR = "usr/share/libreoffice/help/{lang}/text"
GIMP_DIR = "usr/share/gimp/2.0/help/{lang}"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def libreoffice_file_pairs(de_html: str, en_html: str) -> list[Pair]:
    """Pairs of paragraphs carrying the same id in both files (in English document order)."""
    de_by_id = {b.id: b.text for b in parse_blocks(de_html) if b.id and b.tag != "pre"}
    pairs: list[Pair] = []
    seen: set[str] = set()
    for block in parse_blocks(en_html):
        if block.id in de_by_id and block.id not in seen and block.tag != "pre":
            seen.add(block.id)
            pairs.extend(pair_sentences(normalize(de_by_id[block.id]), normalize(block.text)))
    return pairs


def gimp_file_pairs(de_html: str, en_html: str) -> list[Pair]:
    """Pairs of blocks in the same position, or [] when the two files differ in block count."""
    de_blocks = [b for b in parse_blocks(de_html) if b.tag != "pre"]
    en_blocks = [b for b in parse_blocks(en_html) if b.tag != "pre"]
    if len(de_blocks) != len(en_blocks):
        return []
    pairs: list[Pair] = []
    for de, en in zip(de_blocks, en_blocks, strict=True):
        if de.tag == en.tag:
            pairs.extend(pair_sentences(normalize(de.text), normalize(en.text)))
    return pairs


def read_libreoffice(roots: list[Path]) -> Iterator[Document]:
    """One document per help folder (e.g. `scalc/01`); roots = [German package, English package]."""
    de_dir = roots[0] / LIBREOFFICE_DIR.format(lang="de")
    en_dir = roots[1] / LIBREOFFICE_DIR.format(lang="en-US")
    folders: dict[str, list[Pair]] = {}
    for en_path in sorted(en_dir.rglob("*.html")):
        rel = en_path.relative_to(en_dir)
        de_path = de_dir / rel
        if de_path.is_file():
            pairs = libreoffice_file_pairs(_read(de_path), _read(en_path))
            folders.setdefault(rel.parent.as_posix(), []).extend(pairs)
    for folder in sorted(folders):
        yield Document("libreoffice", f"libreoffice/{folder}", tuple(folders[folder]))


def read_gimp(roots: list[Path]) -> Iterator[Document]:
    """One document per help page; roots = [German package, English package]."""
    de_dir = roots[0] / GIMP_DIR.format(lang="de")
    en_dir = roots[1] / GIMP_DIR.format(lang="en")
    for en_path in sorted(en_dir.glob("*.html")):
        de_path = de_dir / en_path.name
        if de_path.is_file():
            pairs = gimp_file_pairs(_read(de_path), _read(en_path))
            yield Document("gimp", f"gimp/{en_path.stem}", tuple(pairs))
