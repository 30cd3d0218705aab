"""Shared test setup: one torch thread (deterministic, and fast for tiny models on 2 cores)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """CLI entry points called in-process set their own thread count; undo it per test."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)
