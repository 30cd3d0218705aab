"""Process-level settings of the CLI."""

from __future__ import annotations

import platform

import pytest

from simulmt.runtime import tune_allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt tuning is glibc-only")
def test_allocator_thresholds_are_raised_on_glibc() -> None:
    assert tune_allocator() is True


def test_without_a_c_library_nothing_is_tuned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ctypes.util.find_library", lambda name: None)
    assert tune_allocator() is False
