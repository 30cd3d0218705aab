"""One vocabulary: every option name means one thing in every command, the protocol and the
Python API; each default is defined once; earlier spellings keep working for one release with
a warning; docs/options.md lists every option as the parsers define it."""

from __future__ import annotations

import argparse
import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from simulmt.eval import cli as eval_cli
from simulmt.eval.options import RunConfig
from simulmt.server import cli as serve_cli
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from simulmt.server.machine import Build, SessionMachine
from simulmt.server.protocol import ErrorCode, ProtocolError, parse_client_message

from simulmt.cli import translate as translate_cli
from simulmt.client import cli as client_cli
from simulmt.defaults import DEFAULT_POLICY, SEGMENT_LOOKAHEAD
from simulmt.engine import Engine
from simulmt.input.kinds import InputKind
from simulmt.search.options import SearchOptions
from simulmt.session import Session, SessionLimits

ROOT = Path(__file__).resolve().parents[1]
EVAL_REQUIRED = ["--source", "s.de", "--reference", "r.en"]

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], list[str]]] = {
    "translate": (translate_cli.add_arguments, []),
    "eval": (eval_cli.add_arguments, EVAL_REQUIRED),
    "serve": (serve_cli.add_arguments, []),
    "client": (client_cli.add_arguments, []),
}


def parser_of(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"simulmt {command}")
    COMMANDS[command][0](parser)
    return parser


def parse(command: str, argv: list[str]) -> argparse.Namespace:
    return parser_of(command).parse_args(argv + COMMANDS[command][1])


def visible_options(command: str) -> dict[str, argparse.Action]:
    """Every flag `--help` shows, by its first (long) name."""
    return {
        a.option_strings[0]: a
        for a in parser_of(command)._actions
        if a.option_strings and a.help != argparse.SUPPRESS and a.option_strings[0] != "-h"
    }


# ---- one default, defined once ------------------------------------------------------------
def test_each_search_default_is_the_one_of_search_options() -> None:
    opts = SearchOptions()
    for command in ("translate", "eval", "serve"):
        args = parse(command, [])
        assert args.loop_guard == opts.loop_guard == ServerConfig().loop_guard > 0, command
        assert args.premature_stops == opts.premature_stops.value, command
        assert args.copy_bonus == opts.copy_bonus == ServerConfig().copy_bonus == 0, command
    for command in ("translate", "eval"):
        args = parse(command, [])
        assert (args.beam, args.speculate, args.alpha, args.coverage, args.unit) == (
            opts.beam, opts.speculate, opts.alpha, opts.beta, opts.unit.value
        ), command  # fmt: skip
    assert parse("client", []).beam == opts.beam
    config = RunConfig()
    assert (config.speculate, config.loop_guard) == (opts.speculate, opts.loop_guard)
    assert eval_cli.run_config_from_args(parse("eval", [])) == RunConfig()


def test_each_session_default_is_defined_once() -> None:
    for command in ("translate", "eval"):
        args = parse(command, [])
        assert args.segment_lookahead == SEGMENT_LOOKAHEAD == RunConfig().segment_lookahead
    assert parse("translate", []).policy == DEFAULT_POLICY == ServerConfig().default_policy
    assert parse("translate", []).input_kind == InputKind.TEXT.value == RunConfig().input_kind.value
    # a client leaves every session option to the server: unset unless given
    client = parse("client", [])
    assert (client.policy, client.segmentation, client.segment_lookahead, client.input_kind) == (
        None, None, None, None
    )  # fmt: skip
    assert client_cli.start_options(client).segment_lookahead is None


def test_the_live_sentence_limit_is_named_apart_from_the_evaluators() -> None:
    """The server cuts live captions at 60 words, a library session and `eval` at 120: two
    names, and the serve flag says why."""
    assert Limits().live_max_sentence_words == 60 < SessionLimits().max_sentence_words == 120
    flag = visible_options("serve")["--live-max-sentence-words"]
    assert flag.default == 60 and "unreadable" in (flag.help or "")
    config = serve_cli.config_from_args(parse("serve", ["--live-max-sentence-words", "30"]))
    assert config.limits.live_max_sentence_words == 30
    announced = Limits().as_dict()  # the `session` message: the new name, and the old for now
    assert announced["live_max_sentence_words"] == announced["max_sentence_words"] == 60


# flags whose default differs by command, for the reason docs/options.md gives in their row
PER_COMMAND_DEFAULT = {"--policy", "--rate", "--threads", "--input-kind"}


def test_a_flag_means_one_thing_in_every_command() -> None:
    """A flag two commands share lands in the same field with the same type and choices, and
    the same default unless its docs row says why not (a client's session options are None:
    the server's default applies; `eval --input-kind` adds `auto`)."""
    seen: dict[str, tuple[str, argparse.Action]] = {}
    for command in COMMANDS:
        for flag, action in visible_options(command).items():
            if flag not in seen:
                seen[flag] = (command, action)
                continue
            first, other = seen[flag]
            assert action.dest == other.dest, (flag, first, command)
            assert action.type == other.type, (flag, first, command)
            if flag in PER_COMMAND_DEFAULT:
                continue
            assert action.choices == other.choices, (flag, first, command)
            if None not in (action.default, other.default):
                assert action.default == other.default, (flag, first, command)


# ---- earlier spellings, one release more ---------------------------------------------------
@pytest.mark.parametrize(
    ("command", "old", "new"),
    [
        ("translate", ["--lookahead", "2"], ["--speculate", "2"]),
        ("translate", ["--input", "talk.de"], ["--source", "talk.de"]),
        ("translate", ["--recognizer"], ["--input-kind", "recognizer"]),
        ("eval", ["--lookahead", "1"], ["--segment-lookahead", "1"]),
        ("eval", ["--input", "recognizer"], ["--input-kind", "recognizer"]),
        ("eval", ["--source-style", "asr"], ["--source-view", "recognizer"]),
        ("eval", ["--source-style", "text"], ["--source-view", "text"]),
        ("client", ["--lookahead", "3"], ["--segment-lookahead", "3"]),
        ("client", ["--input", "recognizer"], ["--input-kind", "recognizer"]),
    ],
)
def test_an_earlier_spelling_still_works_and_says_what_replaces_it(
    command: str, old: list[str], new: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse(command, old) == parse(command, new)
    err = capsys.readouterr().err
    assert f"{old[0]} is deprecated" in err and f"use {new[0]}" in err
    shown = re.findall(r"--[a-z-]+", parser_of(command).format_help())
    assert old[0] not in shown  # hidden from --help


def test_search_options_and_session_take_the_new_names_and_warn_on_the_old() -> None:
    with pytest.warns(DeprecationWarning, match="use speculate="):
        assert SearchOptions(beam=4, lookahead=2) == SearchOptions(beam=4, speculate=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SearchOptions(speculate=2).speculate == 2


def test_a_session_refuses_a_beam_given_twice() -> None:
    engine = Engine.tiny()
    with pytest.warns(DeprecationWarning, match="use segment_lookahead="):
        Session(engine, lookahead=1)
    with pytest.raises(ValueError, match="not both"):
        Session(engine, beam=3, options=SearchOptions(beam=1))
    assert Session(engine, beam=3).search.opts.beam == 3
    assert Session(engine, options=SearchOptions(beam=2)).search.opts.beam == 2
    assert Session(engine).search.opts == SearchOptions()


# ---- the protocol ---------------------------------------------------------------------------
def _start(**fields: object) -> str:
    return json.dumps({"type": "start", "protocol": PROTOCOL, **fields})


def _parse_start(frame: str) -> object:
    return parse_client_message(
        frame, limits=Limits(), default_policy=DEFAULT_POLICY, max_beam=8
    ).message


def test_the_start_frame_takes_the_new_field_names_and_the_old_ones_with_a_note() -> None:
    new = _parse_start(_start(segmentation="auto", segment_lookahead=1, input_kind="recognizer"))
    old = _parse_start(_start(segmentation="auto", lookahead=1, input="recognizer"))
    assert new.deprecated == ()
    notes = old.deprecated
    assert [n.split(" ")[0] for n in notes] == ["start.lookahead", "start.input"]
    assert all("send start." in n for n in notes)
    assert type(old)(**{**vars(old), "deprecated": ()}) == new
    with pytest.raises(ProtocolError) as refused:
        _parse_start(_start(input="text", input_kind="recognizer"))
    assert refused.value.code is ErrorCode.BAD_START
    assert "'input_kind' only" in refused.value.message


def test_the_session_message_tells_a_client_its_old_field_names() -> None:
    for fields, expected in (({"input": "text"}, ["start.input"]), ({"input_kind": "text"}, [])):
        m = SessionMachine(config=ServerConfig(), session_id="s", model="tiny", token="t")
        m.receive(_start(**fields))
        [build] = m.take()
        assert isinstance(build, Build)
        m.started()
        [hello] = [json.loads(e.text) for e in m.take()]
        assert [w.split(" ")[0] for w in hello.get("warnings", [])] == expected


# ---- the table in docs/options.md ----------------------------------------------------------
def _doc_rows() -> dict[str, tuple[set[str], str]]:
    """flag -> (commands it is listed for, default as written), from docs/options.md."""
    rows: dict[str, tuple[set[str], str]] = {}
    for line in (ROOT / "docs" / "options.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) < 4 or not cells[0].startswith("`--"):
            continue
        flag = re.match(r"`(--[a-z0-9-]+)", cells[0])
        assert flag is not None, line
        commands = set(re.findall(r"[a-z]+", cells[1]))
        rows[flag.group(1)] = (commands, cells[3].strip("`"))
    return rows


def test_docs_options_table_lists_every_option_where_it_applies_with_its_default() -> None:
    rows = _doc_rows()
    for command in COMMANDS:
        for flag, action in visible_options(command).items():
            assert flag in rows, f"docs/options.md has no row for {flag} ({command})"
            commands, default = rows[flag]
            assert command in commands, f"docs/options.md: {flag} is not listed for {command}"
            value = action.default
            if value is None or isinstance(value, bool) or command == "client":
                continue  # "the server's", "off", or nothing to compare
            if isinstance(value, list | tuple):
                continue
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            assert shown in default, f"docs/options.md: {flag} default {default!r}, is {shown}"
    listed = {flag for flag, (commands, _) in rows.items() if commands & set(COMMANDS)}
    assert listed <= {f for c in COMMANDS for f in visible_options(c)}, "rows for no flag"
