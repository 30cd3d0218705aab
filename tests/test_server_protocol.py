"""The simulmt.v1 protocol as pure functions: parsing, negotiation, error codes, messages."""

from __future__ import annotations

import json

import pytest
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from simulmt.server.protocol import (
    End,
    ErrorCode,
    Flush,
    Ping,
    ProtocolError,
    Resume,
    Source,
    Start,
    check_word_lengths,
    parse_client_message,
)
from simulmt.server.replies import encode, update_messages

from simulmt.input.kinds import InputKind
from simulmt.input.sentences import Segmentation
from simulmt.output.updates import Update

LIMITS = Limits(max_message_bytes=200, max_word_chars=10, live_max_sentence_words=5)


def parse(frame: str | bytes) -> object:
    parsed = parse_client_message(frame, limits=LIMITS, default_policy="wait-k:k=3", max_beam=4)
    return parsed.message


def ignored(frame: str) -> tuple[str, ...]:
    return parse_client_message(
        frame, limits=LIMITS, default_policy="wait-k:k=3", max_beam=4
    ).ignored


START = {"type": "start", "protocol": PROTOCOL}


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (json.dumps(START), Start(policy="wait-k:k=3", beam=1)),
        (
            json.dumps({**START, "policy": " full ", "beam": 4, "src_lang": "de"}),
            Start(policy="full", beam=4, src_lang="de"),
        ),
        ('{"type":"source","text":"  ein  Satz . "}', Source(("ein", "Satz", "."))),
        ('{"type":"source","text":""}', Source(())),
        ('{"type":"flush"}', Flush()),
        ('{"type":"end","extra":1}', End()),  # unknown fields are reported, then ignored
        ('{"type":"ping"}', Ping()),
        (  # the client lists the versions it speaks; the server picks the first it knows
            json.dumps({**START, "protocol": ["simulmt.v9", PROTOCOL]}),
            Start(policy="wait-k:k=3", beam=1, protocol=PROTOCOL),
        ),
        (
            json.dumps({**START, "resume": {"session_id": "a-1", "token": "t", "last_seq": 4}}),
            Start(policy="wait-k:k=3", beam=1, resume=Resume("a-1", "t", 4)),
        ),
        (
            json.dumps({**START, "segmentation": "auto", "segment_lookahead": 0}),
            Start(policy="wait-k:k=3", beam=1, segmentation=Segmentation.AUTO, segment_lookahead=0),
        ),
        (
            # the server's default segmentation: auto
            json.dumps({**START, "segment_lookahead": 3}),
            Start(policy="wait-k:k=3", beam=1, segment_lookahead=3),
        ),
        (
            json.dumps({**START, "segmentation": "client"}),
            Start(policy="wait-k:k=3", beam=1, segmentation=Segmentation.CLIENT),
        ),
        (json.dumps({**START, "fillers": "keep"}), Start("wait-k:k=3", 1, drop_fillers=False)),
        (json.dumps({**START, "fillers": "drop"}), Start("wait-k:k=3", 1, drop_fillers=True)),
        (json.dumps({**START, "numbers": "keep"}), Start("wait-k:k=3", 1, localise_numbers=False)),
        (json.dumps({**START, "numbers": "localise"}), Start("wait-k:k=3", 1)),
        (
            json.dumps({**START, "input_kind": "recognizer"}),
            Start("wait-k:k=3", 1, input_kind=InputKind.RECOGNIZER),
        ),
        (json.dumps({**START, "input_kind": "text"}), Start("wait-k:k=3", 1)),
    ],
)
def test_parse_accepts(frame: str, expected: object) -> None:
    assert parse(frame) == expected


def test_unknown_fields_are_listed() -> None:
    assert ignored('{"type":"end","extra":1,"b":2}') == ("b", "extra")
    assert ignored('{"type":"source","text":"a"}') == ()


@pytest.mark.parametrize(
    ("frame", "code", "says"),
    [
        (b'{"type":"ping"}', ErrorCode.BINARY_FRAME, "binary"),
        ("not json", ErrorCode.BAD_JSON, "not valid JSON"),
        ("[1,2]", ErrorCode.BAD_JSON, '"type"'),
        ('{"type":7}', ErrorCode.BAD_JSON, '"type"'),
        ('{"type":"shout"}', ErrorCode.UNKNOWN_TYPE, "accepted: start, source"),
        ('{"type":"source"}', ErrorCode.BAD_MESSAGE, "source.text"),
        ('{"type":"source","text":["a"]}', ErrorCode.BAD_MESSAGE, "source.text"),
        ('{"type":"start"}', ErrorCode.BAD_START, PROTOCOL),
        ('{"type":"start","protocol":"simulmt.v0"}', ErrorCode.BAD_START, PROTOCOL),
        ('{"type":"start","protocol":["simulmt.v0"]}', ErrorCode.BAD_START, "list of versions"),
        ('{"type":"start","protocol":[1]}', ErrorCode.BAD_START, PROTOCOL),
        (json.dumps({**START, "extra": 1}), ErrorCode.UNKNOWN_FIELD, "accepted: type, protocol"),
        (json.dumps({**START, "resume": {"session_id": "a"}}), ErrorCode.BAD_START, "last_seq"),
        (
            json.dumps({**START, "resume": {"session_id": "a", "token": "t", "last_seq": -1}}),
            ErrorCode.BAD_START,
            "integer >= 0",
        ),
        ("[" * 100_000, ErrorCode.MESSAGE_TOO_BIG, "limit"),
        ("[" * 150, ErrorCode.BAD_JSON, "JSON"),
        (json.dumps({**START, "beam": 0}), ErrorCode.BAD_START, "1..4"),
        (json.dumps({**START, "beam": 5}), ErrorCode.BAD_START, "1..4"),
        (json.dumps({**START, "beam": True}), ErrorCode.BAD_START, "integer"),
        (json.dumps({**START, "policy": ""}), ErrorCode.BAD_POLICY, "wait-k:k=3"),
        (json.dumps({**START, "policy": 3}), ErrorCode.BAD_POLICY, "spec string"),
        (json.dumps({**START, "src_lang": 1}), ErrorCode.BAD_MESSAGE, "src_lang"),
        (json.dumps({"type": "source", "text": "a " * 200}), ErrorCode.MESSAGE_TOO_BIG, "200"),
        (
            json.dumps({**START, "segmentation": "sentences"}),
            ErrorCode.BAD_START,
            "accepted: 'punctuation', 'client', 'auto'",
        ),
        (json.dumps({**START, "segmentation": 1}), ErrorCode.BAD_START, "accepted"),
        (json.dumps({**START, "fillers": "remove"}), ErrorCode.BAD_START, "'drop'"),
        (json.dumps({**START, "fillers": False}), ErrorCode.BAD_START, "or 'keep'"),
        (json.dumps({**START, "numbers": "english"}), ErrorCode.BAD_START, "'localise'"),
        (json.dumps({**START, "numbers": None}), ErrorCode.BAD_START, "start.numbers"),
        (json.dumps({**START, "input_kind": "speech"}), ErrorCode.BAD_START, "'recognizer'"),
        (json.dumps({**START, "input_kind": ["text"]}), ErrorCode.BAD_START, "start.input_kind is"),
        (json.dumps({**START, "segment_lookahead": -1}), ErrorCode.BAD_START, "integer in 0..8"),
        (json.dumps({**START, "segment_lookahead": "2"}), ErrorCode.BAD_START, "integer in 0..8"),
        (
            json.dumps({**START, "segmentation": "punctuation", "segment_lookahead": 2}),
            ErrorCode.BAD_START,
            "applies to segmentation 'auto' only",
        ),
    ],
)
def test_parse_refuses_with_reason(frame: str | bytes, code: ErrorCode, says: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse(frame)
    assert info.value.code is code
    assert says in info.value.message


def test_word_length_is_checked_on_the_whole_message() -> None:
    check_word_lengths(["ok", "abcdefghij"], LIMITS)
    with pytest.raises(ProtocolError) as info:
        check_word_lengths(["ok", "abcdefghijk"], LIMITS)
    assert info.value.code is ErrorCode.WORD_TOO_LONG and "limit is 10" in info.value.message


def test_size_limit_counts_utf8_bytes() -> None:
    text = "ä" * 90  # 90 characters, 180 bytes: fits in characters, not in bytes... with framing
    frame = json.dumps({"type": "source", "text": text}, ensure_ascii=False)
    assert len(frame) < 200 < len(frame.encode())
    with pytest.raises(ProtocolError) as info:
        parse(frame)
    assert info.value.code is ErrorCode.MESSAGE_TOO_BIG


@pytest.mark.parametrize(
    ("code", "about_frame", "close"),
    [
        (ErrorCode.BAD_JSON, True, 1008),
        (ErrorCode.BINARY_FRAME, True, 1008),
        (ErrorCode.UNKNOWN_TYPE, True, 1008),
        (ErrorCode.UNKNOWN_FIELD, True, 1008),
        (ErrorCode.NOT_STARTED, True, 1008),
        (ErrorCode.ALREADY_STARTED, True, 1008),
        (ErrorCode.MESSAGE_TOO_BIG, True, 1009),
        (ErrorCode.WORD_TOO_LONG, True, 1008),
        (ErrorCode.AFTER_END, True, 1008),
        (ErrorCode.BAD_POLICY, False, 1008),
        (ErrorCode.RESUME_FAILED, False, 1008),
        (ErrorCode.IDLE_TIMEOUT, False, 1008),
        (ErrorCode.INTERNAL, False, 1011),
        (ErrorCode.OVERLOADED, False, 1013),
        (ErrorCode.SHUTTING_DOWN, False, 1001),
    ],
)
def test_error_codes(code: ErrorCode, about_frame: bool, close: int) -> None:
    """Frame errors are fatal only before `start` (see test_server_machine); the close code
    is what follows a fatal one."""
    assert code.about_frame is about_frame
    assert code.close_code == close


def test_update_messages() -> None:
    partial = Update(0, " two words", 3, " maybe", delays=(2, 3), emitted_ms=(812.345, 1200.0))
    assert update_messages(partial) == [
        {
            "type": "partial",
            "sentence_id": 0,
            "committed_delta": " two words",
            "committed_len": 3,
            "tentative": " maybe",
            "delays": [2, 3],
            "emitted_ms": [812.3, 1200.0],
        }
    ]
    final = Update(1, "", 2, "", final=True, text="a b", source="x y .")
    assert update_messages(final) == [
        {"type": "final", "sentence_id": 1, "text": "a b", "source": "x y ."}
    ]
    both = Update(
        1, " b", 2, "", delays=(3,), emitted_ms=(5.0,), final=True, text="a b", source="x"
    )
    assert [m["type"] for m in update_messages(both)] == ["partial", "final"]
    assert json.loads(encode({"type": "end", "sentences": 2}, 7)) == {
        "type": "end",
        "sentences": 2,
        "seq": 7,
    }


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="max_sessions"):
        ServerConfig(max_sessions=0)
    with pytest.raises(ValueError, match="hard_max_bytes"):
        ServerConfig(hard_max_bytes=10)
    with pytest.raises(ValueError, match="idle_timeout_s"):
        Limits(idle_timeout_s=0)
    with pytest.raises(ValueError, match="port"):
        ServerConfig(port=70000)
    with pytest.raises(ValueError, match="resume_window_s"):
        ServerConfig(resume_window_s=-1)
    with pytest.raises(ValueError, match="replay_messages"):
        ServerConfig(replay_messages=10)
