"""Bad text is an error for that message, never for the session (issue 52, part A).

Through a real socket (127.0.0.1, tiny model): any code point, lone surrogates and control
characters included, costs at most a non-fatal `bad_text` error; the offending characters are
dropped, the rest of the words are translated, every reply is valid UTF-8 JSON, and a resume
replays the log without tripping on anything.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from simulmt.server.replies import bad_text_message
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from simulmt.engine import Engine
from simulmt.input.fillers import is_filler
from simulmt.input.textcheck import clean_words, scrub

START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"})
END = json.dumps({"type": "end"})


@functools.cache
def engine() -> Engine:
    return Engine.tiny(0)


def source(text: str) -> str:
    return json.dumps({"type": "source", "text": text})  # ensure_ascii: "\ud800" escaped


@pytest.fixture(scope="module")
def server() -> Iterator[CaptionServer]:
    """One server for every example, on its own event loop in a thread (the client is sync)."""
    config = ServerConfig(port=0, limits=Limits(idle_timeout_s=30))
    server = CaptionServer(config, load=engine, model_name="tiny")
    loop = asyncio.new_event_loop()
    ready, stop = threading.Event(), asyncio.Event()

    async def main() -> None:
        await server.start()
        await server.wait_ready()
        ready.set()
        await stop.wait()
        await server.stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(120), "the server did not start"
    yield server
    loop.call_soon_threadsafe(stop.set)
    thread.join(60)


def url(server: CaptionServer) -> str:
    return f"ws://127.0.0.1:{server.port}/ws"


def read_all(ws: ClientConnection) -> list[dict[str, Any]]:
    messages = []
    try:
        while True:
            raw = ws.recv(timeout=60)  # a hang guard, not a timing assertion
            assert isinstance(raw, str)
            raw.encode("utf-8")  # strict: a lone surrogate raises here
            messages.append(json.loads(raw))
    except ConnectionClosed:
        pass
    return messages


def is_bad(ch: str) -> bool:
    return 0xD800 <= ord(ch) <= 0xDFFF or unicodedata.category(ch) == "Cc"


CHARS = st.one_of(
    st.characters(categories=["Cs"]),  # lone surrogates
    st.characters(categories=["Cc"]),  # control characters
    st.characters(),  # any other code point
    st.sampled_from(" ."),  # word and sentence breaks
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(CHARS, max_size=40))
def test_any_text_costs_at_most_a_bad_text_error(server: CaptionServer, text: str) -> None:
    with connect(url(server)) as ws:
        for frame in (START, source(text), source("ende ."), END):
            ws.send(frame)
        messages = read_all(ws)
    assert ws.close_code == 1000, messages[-3:]
    assert messages[-1]["type"] == "end"
    assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1))
    errors = [m for m in messages if m["type"] == "error"]
    assert not any(m["fatal"] for m in errors)
    had_bad = any(is_bad(ch) for word in text.split() for ch in word)
    bad_text = [m for m in errors if m["code"] == "bad_text"]
    assert len(bad_text) == had_bad
    if bad_text:
        assert "dropped" in bad_text[0]["message"] and "U+" in bad_text[0]["message"]
    taken = " ".join(m["source"] for m in messages if m["type"] == "final").split()
    assert not any(is_bad(ch) for word in taken for ch in word)
    assert taken[-2:] == ["ende", "."]  # the session went on after the bad text
    if not any(m["code"] == "word_too_long" for m in errors):  # every other word was taken
        kept = ["".join(ch for ch in w if not is_bad(ch)) for w in text.split()]
        assert taken[:-2] == [w for w in kept if w and not is_filler(w)]


def test_a_lone_surrogate_mid_word_is_dropped_and_the_rest_translated(
    server: CaptionServer,
) -> None:
    """The issue's probe: `ich habe x\\ud800y heute .` was an internal error and close 1011."""
    with connect(url(server)) as ws:
        for frame in (START, source("ich habe x\ud800y heute ."), END):
            ws.send(frame)
        messages = read_all(ws)
    assert ws.close_code == 1000
    [error] = [m for m in messages if m["type"] == "error"]
    assert (error["code"], error["fatal"]) == ("bad_text", False)
    assert "1 lone surrogate (U+D800)" in error["message"]
    assert [m["source"] for m in messages if m["type"] == "final"] == ["ich habe xy heute ."]


def test_echoes_are_encodable_and_a_resume_replays_them(server: CaptionServer) -> None:
    """A word too long that held a lone surrogate was echoed raw, websockets could not encode
    it, and the replay log kept it, so every resume failed on it again."""
    with connect(url(server)) as ws:
        ws.send(START)
        session = json.loads(ws.recv(timeout=60))
        ws.send(source("\ud800" + "a" * 120))
        ws.send(json.dumps({"type": "sh\udc00out"}))  # unknown type: echoed (escaped)
        ws.send(source("wir gehen ."))
        got = [session]
        while not any(m["type"] == "final" for m in got):
            got.append(json.loads(ws.recv(timeout=60)))
        ws.close(1001)  # as if the tab went away: the session is parked
    assert [m["code"] for m in got if m["type"] == "error"][:2] == [
        "bad_text",
        "word_too_long",
    ]
    resume = {"session_id": session["session_id"], "token": session["resume"]["token"],
              "last_seq": 1}  # fmt: skip
    with connect(url(server)) as ws:
        ws.send(json.dumps({**json.loads(START), "resume": resume}))
        ws.send(END)
        replayed = read_all(ws)
    assert ws.close_code == 1000
    assert [m["seq"] for m in replayed][: len(got) - 1] == [m["seq"] for m in got[1:]]
    assert [m["type"] for m in replayed][-1] == "end"


def test_clean_words_and_scrub() -> None:
    words, problem = clean_words(("gut", "a\x00b", "\udfff", "x\ud800y"))
    assert words == ("gut", "ab", "xy")
    assert problem is not None
    assert "2 lone surrogates" in problem and "1 control character" in problem
    assert "U+0000" in problem and "U+D800" in problem and "U+DFFF" in problem
    assert "was taken" in bad_text_message(problem) and problem in bad_text_message(problem)
    assert clean_words(("alles", "gut")) == (("alles", "gut"), None)
    assert scrub("a\ud800b").encode("utf-8") == "a\ufffdb".encode()
