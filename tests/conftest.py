"""Shared test setup: one torch thread (deterministic, and fast for tiny models on 2 cores), a
writer of corpus split files, and the tests marked slow first (for `make test`'s workers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked slow (most of them wait on servers, subprocesses or timeouts) run first, in
    their files' order: `make test` spreads them over its workers from the start instead of
    leaving one to run alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """CLI entry points called in-process set their own thread count; undo it per test."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


SplitWriter = Callable[[Path, str, list[tuple[str, str, str]]], None]


def _write_split(folder: Path, split: str, rows: list[tuple[str, str, str]]) -> None:
    for n, ext in enumerate(("de", "en", "source")):
        (folder / f"{split}.{ext}").write_text("".join(r[n] + "\n" for r in rows),
                                               encoding="utf-8")


@pytest.fixture
def write_split() -> SplitWriter:
    """Writes SPLIT.de/.en/.source of a corpus folder from (de, en, source) rows."""
    return _write_split
