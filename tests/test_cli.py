"""The `simulmt` entry point: one command imported per run, and the help it lists for all."""

from __future__ import annotations

import argparse
import ast
import importlib
import subprocess
import sys

import pytest

from simulmt.cli.commands import COMMANDS, EPILOG, chosen_command, main


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_commands_help_is_its_modules_first_docstring_line(name: str) -> None:
    module = importlib.import_module(COMMANDS[name].module)
    assert (module.__doc__ or "").strip().splitlines()[0] == COMMANDS[name].help
    assert callable(module.add_arguments) and callable(module.run)


def test_the_top_level_help_starts_with_what_users_run_and_names_real_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "start with:" in out and "usage: simulmt" in out
    suggested = [line.split()[1] for line in EPILOG.splitlines() if line.startswith("  simulmt ")]
    assert suggested and set(suggested) <= set(COMMANDS)
    order = list(COMMANDS)
    assert order.index("serve") < order.index("train") and order[0] == "translate"
    for line in EPILOG.splitlines():
        if line.startswith("  simulmt eval"):  # the example's options exist
            parser = argparse.ArgumentParser()
            importlib.import_module(COMMANDS["eval"].module).add_arguments(parser)
            parser.parse_args(line.split()[2:])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["eval", "--help"], "eval"),
        (["-v", "client", "talk.de"], "client"),
        (["--verbose", "-h"], None),
        (["evaluate"], None),
        ([], None),
    ],
)
def test_the_command_is_the_first_word_that_is_no_option(
    argv: list[str], expected: str | None
) -> None:
    assert chosen_command(argv) == expected


def _imports_after(argv: list[str]) -> tuple[int, str, set[str]]:
    """Run `simulmt argv` in a fresh interpreter: its exit code, output, and which of torch
    and the heavy command modules it imported."""
    watched = ["torch", *(c.module for c in COMMANDS.values())]
    code = (
        "import sys\nfrom simulmt.cli import main\n"
        f"try:\n    rc = main({argv!r})\nexcept SystemExit as e:\n    rc = e.code\n"
        f"print('IMPORTED', [m for m in {watched!r} if m in sys.modules])\n"
        "sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    out = proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("IMPORTED"))
    return proc.returncode, out, set(ast.literal_eval(line.removeprefix("IMPORTED ")))


def test_top_level_help_lists_every_command_without_importing_any() -> None:
    rc, out, imported = _imports_after(["--help"])
    assert rc == 0
    for name in COMMANDS:
        assert name in out
    assert "Stream text to a captioning server" in out
    assert imported == set()


def test_client_starts_without_torch_and_other_commands() -> None:
    rc, out, imported = _imports_after(["client", "--help"])
    assert rc == 0 and "--vtt" in out
    assert imported == {"simulmt.client.cli"}


def test_version_names_simulmt_and_torch_without_importing_them() -> None:
    from importlib import metadata

    import simulmt

    rc, out, imported = _imports_after(["--version"])
    assert rc == 0 and imported == set()
    assert out.startswith(f"simulmt {simulmt.__version__} (torch {metadata.version('torch')}, ")
    assert metadata.version("simulmt") == simulmt.__version__  # the package's own metadata


def test_a_command_gets_its_own_options() -> None:
    rc, out, imported = _imports_after(["policies", "--help"])
    assert rc == 0 and "usage: simulmt policies" in out and "--json" in out
    assert imported >= {"simulmt.policies.cli"} and "simulmt.eval.cli" not in imported


def test_an_unknown_command_lists_the_known_ones() -> None:
    rc, out, _ = _imports_after(["evaluate", "x.de"])
    assert rc == 2
    assert "invalid choice: 'evaluate'" in out and "'eval'" in out
