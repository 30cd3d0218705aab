"""Process-level settings of the CLI."""

from __future__ import annotations

import platform

import pytest

from simulmt.model.runtime import tune_allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt tuning is glibc-only")
def test_allocator_thresholds_are_raised_on_glibc() -> None:
    assert tune_allocator() is True


def test_without_a_c_library_nothing_is_tuned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ctypes.util.find_library", lambda name: None)
    assert tune_allocator() is False


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["policies"], []),  # neither decoding nor training: glibc's defaults
        (["eval", "--source", "s", "--reference", "r"], [{}]),  # decoding: the raised defaults
        # training: big per-batch blocks to the kernel, mid-sized ones reused (runtime.py)
        (["train-policy", "--data", "d", "--out", "p.pt"], [{"mmap_threshold": 64 << 20,
                                                              "trim_threshold": 128 << 10}]),
    ],
)
def test_the_cli_tunes_the_allocator_per_command(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: list[dict[str, int]]
) -> None:
    import importlib

    from simulmt import cli
    from simulmt.cli import commands as cli_main

    calls: list[dict[str, int]] = []

    def record(**kw: int) -> bool:
        calls.append(kw)
        return True

    monkeypatch.setattr(cli_main, "tune_allocator", record)
    monkeypatch.setattr("simulmt.model.runtime.tune_allocator", record)
    module = importlib.import_module(cli_main.COMMANDS[argv[0]].module)
    monkeypatch.setattr(module, "run", lambda args: 0)
    assert cli.main(argv) == 0
    assert calls == expected
