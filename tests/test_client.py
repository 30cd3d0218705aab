"""`simulmt client`: terminal rendering, caption timing, and the real CLI against a real server."""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import srt
import webvtt
from simulmt.server.app import CaptionServer
from simulmt.server.config import Limits, ServerConfig
from simulmt.server.protocol import Start, parse_client_message

from simulmt.cli.liveview import DIM, RESET, LiveView, render_live
from simulmt.client import cli as client
from simulmt.client.stream import Recorder, StreamLog, start_message
from simulmt.engine import Engine
from simulmt.input.kinds import InputKind
from simulmt.input.sentences import Segmentation
from simulmt.output.updates import Update


@pytest.mark.parametrize(
    ("committed", "tentative", "width", "expected"),
    [
        ("I have", " written", 80, f"I have{DIM} written{RESET}"),
        ("I have", "", 80, "I have"),
        ("", "maybe", 80, f"{DIM}maybe{RESET}"),
        ("abcdefghij", " klmno", 12, f"…ghij{DIM} klmno{RESET}"),  # the newest end stays
        ("abc", " defghijklmnop", 8, f"…{DIM}klmnop{RESET}"),
    ],
)
def test_render_live(committed: str, tentative: str, width: int, expected: str) -> None:
    assert render_live(committed, tentative, width=width, color=True) == expected
    plain = render_live(committed, tentative, width=width, color=False)
    assert plain == expected.replace(DIM, "").replace(RESET, "")
    assert len(plain) <= width - 1


def test_live_view_prints_finals_when_not_a_terminal() -> None:
    out = io.StringIO()
    view = LiveView(out, live=False)
    view({"type": "partial", "sentence_id": 0, "committed_delta": "Hello", "tentative": " wor"})
    view({"type": "final", "sentence_id": 0, "text": "Hello world.", "source": "Hallo Welt."})
    assert out.getvalue() == "Hello world.\n"
    tty = io.StringIO()
    live = LiveView(tty, live=True)
    live({"type": "partial", "sentence_id": 0, "committed_delta": "Hello", "tentative": " wor"})
    assert tty.getvalue() == f"\r\x1b[KHello{DIM} wor{RESET}"


def test_translate_and_client_share_one_live_view() -> None:
    """`simulmt translate` (session updates) and `simulmt client` (protocol messages) draw a
    stream the same way, with the same class."""
    from simulmt.cli import translate
    from simulmt.client import cli as client

    assert translate.LiveView is client.LiveView is LiveView
    updates = [
        Update(0, "Hello", 1, " wor"),
        Update(0, " world.", 2, "", final=True, text="Hello world.", source="Hallo Welt."),
        Update(1, "Bye", 1, " now"),
    ]
    for live in (True, False):
        shown, received = io.StringIO(), io.StringIO()
        LiveView(shown, live=live).show(updates)
        view = LiveView(received, live=live)
        for u in updates:
            view({"type": "partial", "sentence_id": u.sentence_id,
                  "committed_delta": u.committed_delta, "tentative": u.tentative})
            if u.final:
                view({"type": "final", "sentence_id": u.sentence_id, "text": u.text})
        assert shown.getvalue() == received.getvalue()
        assert view.committed == {1: "Bye"}  # a finished sentence is forgotten
    assert shown.getvalue() == "Hello world.\n"
    assert received.getvalue() == "Hello world.\n"


def test_recorder_times_words_from_the_sentence_start() -> None:
    now = [0.0]
    log = StreamLog()
    record = Recorder(log, lambda: now[0])
    log.sent_ms.extend([100.0, 500.0, 900.0, 1300.0])  # four source words sent
    now[0] = 1000.0
    record(
        {
            "type": "partial",
            "sentence_id": 0,
            "committed_delta": "a b",
            "tentative": "",
            "committed_len": 2,
            "delays": [2, 2],
            "emitted_ms": [420.0, 430.0],
        }
    )
    now[0] = 1400.0
    record({"type": "final", "sentence_id": 0, "text": "a b", "source": "w1 w2 ."})
    now[0] = 2000.0
    record(
        {
            "type": "partial",
            "sentence_id": 1,
            "committed_delta": " c",
            "tentative": "",
            "committed_len": 1,
            "delays": [1],
            "emitted_ms": [150.0],
        }
    )
    record({"type": "final", "sentence_id": 1, "text": " c", "source": "w4"})
    now[0] = 2500.0  # a final whose words no partial timed: shown from the final's arrival
    record({"type": "final", "sentence_id": 2, "text": "d e", "source": "w5 w6"})
    [first, second, third] = log.timed_sentences()
    assert first.words == ("a", "b") and first.times_ms == (520.0, 530.0)  # 100 + emitted
    assert second.words == ("c",) and second.times_ms == (1450.0,)  # word 3 was sent at 1300
    assert third.words == ("d", "e") and third.times_ms == (2500.0, 2500.0)


@functools.cache
def engine() -> Engine:
    return Engine.tiny(0)  # trains on one thread whatever the caller's setting


async def test_client_cli_streams_and_writes_valid_captions(tmp_path: Path) -> None:
    text = "ich habe heute einen Brief geschrieben . das Wetter ist schön . wir gehen nach Hause"
    (tmp_path / "talk.txt").write_text(text + "\n", encoding="utf-8")
    server = CaptionServer(ServerConfig(port=0), load=engine, model_name="tiny")
    await server.start()
    await server.wait_ready()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "simulmt.cli",
            "client",
            str(tmp_path / "talk.txt"),
            "--url",
            f"ws://127.0.0.1:{server.port}/ws",
            "--policy",
            "wait-k:k=2",
            "--rate",
            "20",
            "--vtt",
            str(tmp_path / "out.vtt"),
            "--srt",
            str(tmp_path / "out.srt"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        await server.stop()
    assert proc.returncode == 0, err.decode()
    finals = out.decode().splitlines()  # not a terminal: one line per finished sentence
    assert len(finals) == 3
    words = " ".join(finals).split()
    assert words  # the tiny model does write something
    vtt = webvtt.read(str(tmp_path / "out.vtt"))
    subs = list(srt.parse((tmp_path / "out.srt").read_text(encoding="utf-8")))
    assert " ".join(c.text.replace("\n", " ") for c in vtt).split() == words
    assert " ".join(s.content.replace("\n", " ") for s in subs).split() == words
    assert all(len(line) <= 42 for c in vtt for line in c.lines)
    assert all(c.start_in_seconds < c.end_in_seconds for c in vtt)
    starts = [c.start_in_seconds for c in vtt]
    assert starts == sorted(starts)


async def test_client_drops_bytes_that_are_not_utf8_and_sends_the_rest(tmp_path: Path) -> None:
    """Sent as they were, such bytes hung the client (a file) or crashed it (stdin)."""
    data = "ich habe heute .\nwir \xff gehen .\ndas \x07 Ende .\n".encode("latin-1")
    (tmp_path / "talk.txt").write_bytes(data)
    server = CaptionServer(ServerConfig(port=0), load=engine, model_name="tiny")
    await server.start()
    await server.wait_ready()
    try:
        url = f"ws://127.0.0.1:{server.port}/ws"
        runs = []
        for source, stdin in ((str(tmp_path / "talk.txt"), None), ("-", data)):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "simulmt.cli", "client", source, "--url", url,
                "--policy", "wait-k:k=2",
                stdin=asyncio.subprocess.PIPE if stdin else None,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            runs.append((proc, *await asyncio.wait_for(proc.communicate(stdin), timeout=120)))
    finally:
        await server.stop()
    for proc, out, err in runs:
        assert proc.returncode == 0, err.decode()
        assert "line 2: dropped 1 lone surrogate (U+DCFF)" in err.decode()
        assert "line 3: dropped 1 control character (U+0007" in err.decode()
        assert len(out.decode().splitlines()) == 3  # one final per sentence, none lost


def test_client_cli_refuses_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulmt.cli import main

    assert main(["client", str(tmp_path / "missing.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "t.txt").write_text("a\n")
    assert main(["client", str(tmp_path / "t.txt"), "--rate", "-1"]) == 2
    assert "--rate" in capsys.readouterr().err
    # nothing listens on this port: a clear message, exit 1
    assert main(["client", str(tmp_path / "t.txt"), "--url", "ws://127.0.0.1:9/ws"]) == 1
    assert "cannot reach" in capsys.readouterr().err


async def test_client_segmentation_option_reaches_the_server(tmp_path: Path) -> None:
    """--segmentation client: the server ends no sentence at punctuation, so the three
    punctuated sentences of the file come back as one final (ended by the stream's end)."""
    text = "ich habe heute einen Brief geschrieben . das Wetter ist schön . wir gehen"
    (tmp_path / "talk.txt").write_text(text + "\n", encoding="utf-8")
    server = CaptionServer(ServerConfig(port=0), load=engine, model_name="tiny")
    await server.start()
    await server.wait_ready()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "simulmt.cli", "client", str(tmp_path / "talk.txt"),
            "--url", f"ws://127.0.0.1:{server.port}/ws", "--policy", "wait-k:k=2",
            "--rate", "0", "--segmentation", "client", "--vtt", str(tmp_path / "out.vtt"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        await server.stop()
    assert proc.returncode == 0, err.decode()
    assert len(out.decode().splitlines()) == 1  # one sentence: no punctuation cut


def test_client_refuses_an_unknown_segmentation(capsys: pytest.CaptureFixture[str]) -> None:
    from simulmt.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["client", "t.txt", "--segmentation", "sentences"])
    assert exit_.value.code == 2
    assert "invalid choice: 'sentences'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {}),
        (["--keep-number-format"], {"localise_numbers": False}),
        (["--keep-fillers"], {"drop_fillers": False}),
        (["--input-kind", "recognizer"], {"input_kind": InputKind.RECOGNIZER}),
        (["--segmentation", "client"], {"segmentation": Segmentation.CLIENT}),
        (["--segment-lookahead", "2", "--beam", "3"], {"segment_lookahead": 2, "beam": 3}),
    ],
)
def test_client_options_reach_the_session_the_server_parses(
    argv: list[str], expected: dict[str, object]
) -> None:
    """Each `simulmt client` option becomes the `start` field the server reads; unset options
    are left out, so the server's defaults apply."""
    parser = argparse.ArgumentParser()
    client.add_arguments(parser)
    frame = json.dumps(start_message(client.start_options(parser.parse_args(argv))))
    parsed = parse_client_message(
        frame, limits=Limits(), default_policy="wait-k:k=3", max_beam=4
    ).message
    assert parsed == replace(Start("wait-k:k=3", 1), **expected)
