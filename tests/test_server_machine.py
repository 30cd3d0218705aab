"""The sans-I/O session machine: frames and worker results in, effects out; no sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from simulmt.server.machine import (
    Attach,
    Build,
    Close,
    Discard,
    Effect,
    Phase,
    Send,
    SessionMachine,
    Submit,
)
from simulmt.server.ops import Delivery, Marker, Op, OpKind
from simulmt.server.protocol import CLIENT_TYPES, ErrorCode, ProtocolError, Resume

from simulmt.output.updates import Update

CONFIG = ServerConfig(limits=Limits(max_message_bytes=4096), outbox_high_water=4, replay_messages=8)
START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"})


def machine() -> SessionMachine:
    return SessionMachine(config=CONFIG, session_id="s-1", model="tiny", token="tok")


def started() -> SessionMachine:
    m = machine()
    m.receive(START)
    [build] = m.take()
    assert isinstance(build, Build) and build.start.policy == "wait-k:k=2"
    m.started()
    [hello] = sent(m.take())
    assert hello["type"] == "session" and hello["seq"] == 1
    assert hello["resume"] == {"token": "tok", "window_s": 30.0}
    assert hello["protocol"] == PROTOCOL
    return m


def sent(effects: list[Effect]) -> list[dict[str, Any]]:
    return [json.loads(e.text) for e in effects if isinstance(e, Send)]


def source(text: str) -> str:
    return json.dumps({"type": "source", "text": text})


def words_update(sid: int, delta: str, total: int, *, final: bool = False) -> Update:
    n = len(delta.split())
    return Update(
        sid,
        delta,
        total,
        "",
        delays=(1,) * n,
        emitted_ms=(0.0,) * n,
        final=final,
        text=delta.strip() if final else "",
        source="x ." if final else "",
    )


@pytest.mark.parametrize(
    ("frame", "code", "close"),
    [
        ("not json", "bad_json", 1008),
        (b"\x00binary", "binary_frame", 1008),
        ('{"type":"shout"}', "unknown_type", 1008),
        (source("hallo"), "not_started", 1008),
        (source("x" * 5000), "message_too_big", 1009),
        (START[:-1] + ',"new":1}', "unknown_field", 1008),
    ],
)
def test_before_start_every_bad_frame_is_fatal(frame: str | bytes, code: str, close: int) -> None:
    m = machine()
    m.receive(frame)
    effects = m.take()
    [error] = sent(effects)
    assert (error["code"], error["fatal"], error["seq"]) == (code, True, 1)
    assert Close(close, code) in effects and m.phase is Phase.DONE
    m.receive(START)  # input after the close is ignored
    assert m.take() == []


def test_after_start_bad_frames_are_answered_and_the_session_goes_on() -> None:
    m = started()
    frames: list[str | bytes] = [
        "not json",
        b"\xff\xfe",
        '{"type":"shout"}',
        '{"type":"source","text":7}',
        source("x" * 5000),
        START,
        source("x" * 101),
    ]
    for frame in frames:
        m.receive(frame)
    effects = m.take()
    assert [(e["code"], e["fatal"]) for e in sent(effects)] == [
        ("bad_json", False),
        ("binary_frame", False),
        ("unknown_type", False),
        ("bad_message", False),
        ("message_too_big", False),
        ("already_started", False),
        ("word_too_long", False),
    ]
    assert all(isinstance(e, Send) for e in effects) and m.phase is Phase.STREAMING
    assert m.received == len(frames)
    m.receive(json.dumps({"type": "source", "text": "ein Satz", "speaker": "A"}))
    effects = m.take()
    [error] = sent(effects)
    assert error["code"] == "unknown_field" and "'speaker'" in error["message"]
    assert effects[-1] == Submit(Op(OpKind.FEED, words=("ein", "Satz"), feed=1))  # still taken
    assert m.inflight == 2


def test_updates_become_numbered_messages_and_end_closes() -> None:
    m = started()
    m.receive(source("a b ."))
    m.receive('{"type":"end"}')
    assert [e for e in m.take() if isinstance(e, Submit)][-1].op.marker is Marker.END
    m.deliver(Delivery([words_update(0, "A", 1)], [], words_taken=3))
    m.deliver(Delivery([words_update(0, " B", 2, final=True)], [Marker.END]))
    effects = m.take()
    messages = sent(effects)
    assert [x["type"] for x in messages] == ["partial", "partial", "final", "end"]
    assert [x["seq"] for x in messages] == [2, 3, 4, 5]
    assert effects[-1] == Close(1000, "end") and m.phase is Phase.DONE
    assert m.inflight == 0


def test_words_missing_from_an_update_end_the_session() -> None:
    m = started()
    m.deliver(Delivery([words_update(0, "A B", 3)], []))  # committed_len 3 but 2 new words
    effects = m.take()
    assert [(x["code"], x["fatal"]) for x in sent(effects)] == [("internal", True)]
    assert Close(1011, "internal") in effects and Discard() in effects


def test_shutdown_finishes_the_sentence_then_tells_the_client() -> None:
    m = started()
    m.shutdown()
    [submit] = m.take()
    assert submit == Submit(Op(OpKind.END_SOURCE, marker=Marker.SHUTDOWN))
    m.receive(source("late"))  # input after the shutdown began is not taken
    assert m.take() == []
    m.deliver(Delivery([words_update(0, "A", 1, final=True)], [Marker.SHUTDOWN]))
    effects = m.take()
    assert [x["type"] for x in sent(effects)] == ["partial", "final", "error"]
    assert sent(effects)[-1]["code"] == "shutting_down"
    assert effects[-1] == Close(1001, "shutting_down")


def test_resume_replays_what_came_after_last_seq() -> None:
    m = started()
    m.receive(source("a b"))
    m.receive('{"type":"flush"}')
    m.deliver(Delivery([words_update(0, "A", 1), words_update(0, " B", 2)], [], words_taken=2))
    first = sent(m.take())
    assert [x["seq"] for x in first] == [2, 3]
    assert m.resume_problem(1) is None
    m.replay(1)  # the client saw the session message only
    again = m.take()
    replayed = sent(again)
    assert replayed[:2] == first  # the very same messages, seq and all
    hello = replayed[2]
    assert hello["type"] == "session" and hello["seq"] == 4
    assert hello["resumed"] == {"received": 2, "ending": False}
    assert not any(isinstance(e, Submit | Build) for e in again)


def test_resume_problems() -> None:
    m = started()
    assert "ahead" in (m.resume_problem(5) or "")
    for i in range(12):  # more messages than the replay log keeps (8)
        m.deliver(Delivery([words_update(0, " w", i + 1)], []))
    m.take()
    assert "no longer kept" in (m.resume_problem(1) or "")
    assert m.resume_problem(m.seq - 8) is None and m.resume_problem(m.seq - 9) is not None


def test_a_resume_start_asks_to_attach_and_failure_is_fatal() -> None:
    m = machine()
    resume = {"session_id": "s-9", "token": "t", "last_seq": 3}
    m.receive(json.dumps({"type": "start", "protocol": [PROTOCOL], "resume": resume}))
    assert m.take() == [Attach(Resume("s-9", "t", 3))]
    m.start_failed(ProtocolError(ErrorCode.RESUME_FAILED, "no session 's-9'"))
    effects = m.take()
    assert [(x["code"], x["fatal"]) for x in sent(effects)] == [("resume_failed", True)]
    assert effects[-1] == Close(1008, "resume_failed")


def test_a_finished_session_replays_its_tail_and_closes_again() -> None:
    m = started()
    m.receive('{"type":"end"}')
    m.deliver(Delivery([words_update(0, "A", 1, final=True)], [Marker.END]))
    m.take()
    m.replay(2)
    effects = m.take()
    assert [x["type"] for x in sent(effects)] == ["final", "end"]
    assert effects[-1] == Close(1000, "end")


# ---- fuzzing: every frame gets a defined answer and none raises ----

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
known_shapes = st.builds(
    lambda kind, extra: json.dumps({"type": kind, **extra}),
    st.sampled_from([*CLIENT_TYPES, "shout", ""]),
    st.dictionaries(
        st.sampled_from(["text", "protocol", "policy", "beam", "resume", "x"]),
        json_values,
        max_size=3,
    ),
)
frames = st.one_of(
    known_shapes,
    json_values.map(json.dumps),
    st.text(max_size=60),  # not JSON, or JSON by luck; lone surrogates too
    st.binary(max_size=60),  # binary frames and invalid UTF-8
    st.integers(4000, 6000).map(lambda n: source("w " * (n // 2))),  # around the size limit
    st.text(alphabet="ab .", max_size=40).map(source),
)


def check_answer(before: int, effects: list[Effect], m: SessionMachine) -> None:
    """Seqs continue without gaps; every message is JSON with a known type."""
    messages = sent(effects)
    assert [x["seq"] for x in messages] == list(range(before + 1, before + 1 + len(messages)))
    for x in messages:
        assert x["type"] in ("session", "error")
        if x["type"] == "error":
            assert ErrorCode(x["code"]) and x["message"]
    assert m.seq == before + len(messages)


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, min_size=1, max_size=8))
def test_fuzz_after_start_nothing_is_fatal(batch: list[str | bytes]) -> None:
    m = started()
    for i, frame in enumerate(batch):
        before = m.seq
        m.receive(frame)
        effects = m.take()
        check_answer(before, effects, m)
        assert m.received == i + 1
        errors = [x for x in sent(effects) if x["type"] == "error"]
        assert all(not x["fatal"] for x in errors)
        assert not any(isinstance(e, Close | Build | Attach | Discard) for e in effects)
        if m.phase is Phase.STREAMING:  # a frame the session took, or a non-fatal error
            assert errors or all(isinstance(e, Submit) for e in effects)
        else:
            assert m.phase is Phase.ENDING


@settings(max_examples=300, deadline=None)
@given(frames)
def test_fuzz_first_frame_starts_or_is_refused(frame: str | bytes) -> None:
    m = machine()
    m.receive(frame)
    effects = m.take()
    check_answer(0, effects, m)
    if m.phase is Phase.STARTING:
        assert len(effects) == 1 and isinstance(effects[0], Build | Attach)
    else:
        [error] = sent(effects)
        assert error["fatal"] and m.phase is Phase.DONE
        assert isinstance(effects[-1], Close) and effects[-1].code in (1008, 1009)
