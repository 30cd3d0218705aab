"""Read a corpus built by `simulmt data build`: aligned `{split}.{lang}` files."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

SPLITS = ("train", "dev", "test")


def split_path(data_dir: Path, split: str, lang: str) -> Path:
    """`data_dir/{split}.{lang}`, checked to exist; the error names what is there instead."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; accepted: {', '.join(SPLITS)}")
    path = Path(data_dir) / f"{split}.{lang}"
    if not path.is_file():
        found = sorted(p.name for p in Path(data_dir).glob("*.*"))
        raise FileNotFoundError(f"{path} does not exist (found: {', '.join(found) or 'nothing'}); "
                                "build the corpus with `simulmt data build`")
    return path


def iter_split_side(data_dir: Path, split: str, lang: str) -> Iterator[str]:
    """Lines of one side of a split, without their newline."""
    with split_path(data_dir, split, lang).open(encoding="utf-8") as handle:
        for line in handle:
            yield line.rstrip("\n")


def iter_parallel(data_dir: Path, split: str, src: str, tgt: str) -> Iterator[tuple[str, str]]:
    """(source, target) sentence pairs of a split; ValueError if the two sides differ in length."""
    src_path, tgt_path = split_path(data_dir, split, src), split_path(data_dir, split, tgt)
    with src_path.open(encoding="utf-8") as fs, tgt_path.open(encoding="utf-8") as ft:
        for count, (s, t) in enumerate(zip_longest(fs, ft), start=1):
            if s is None or t is None:
                raise ValueError(f"{src_path} and {tgt_path} differ in length after line "
                                 f"{count - 1}")
            yield s.rstrip("\n"), t.rstrip("\n")


def read_parallel(data_dir: Path, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    """All (source, target) pairs of a split as a list."""
    return list(iter_parallel(data_dir, split, src, tgt))
