"""The simulmt.v1 protocol as pure functions: parsing, error codes, message building, limits."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.server.config import PROTOCOL, Limits, ServerConfig
from simulmt.server.protocol import (
    End,
    ErrorCode,
    Flush,
    Ping,
    ProtocolError,
    SentenceCounter,
    Source,
    Start,
    encode,
    parse_client_message,
    update_messages,
)

from simulmt.updates import Update
from simulmt.words import ends_sentence

LIMITS = Limits(max_message_bytes=200, max_word_chars=10, max_sentence_words=5)


def parse(frame: str | bytes) -> object:
    return parse_client_message(frame, limits=LIMITS, default_policy="wait-k:k=3", max_beam=4)


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
        ('{"type":"end","extra":1}', End()),  # unknown fields are ignored
        ('{"type":"ping"}', Ping()),
    ],
)
def test_parse_accepts(frame: str, expected: object) -> None:
    assert parse(frame) == expected


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
        (json.dumps({**START, "beam": 0}), ErrorCode.BAD_START, "1..4"),
        (json.dumps({**START, "beam": 5}), ErrorCode.BAD_START, "1..4"),
        (json.dumps({**START, "beam": True}), ErrorCode.BAD_START, "integer"),
        (json.dumps({**START, "policy": ""}), ErrorCode.BAD_POLICY, "wait-k:k=3"),
        (json.dumps({**START, "policy": 3}), ErrorCode.BAD_POLICY, "spec string"),
        (json.dumps({**START, "src_lang": 1}), ErrorCode.BAD_MESSAGE, "src_lang"),
        ('{"type":"source","text":"ok abcdefghijk"}', ErrorCode.WORD_TOO_LONG, "limit is 10"),
        (json.dumps({"type": "source", "text": "a " * 200}), ErrorCode.MESSAGE_TOO_BIG, "200"),
    ],
)
def test_parse_refuses_with_reason(frame: str | bytes, code: ErrorCode, says: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse(frame)
    assert info.value.code is code
    assert says in info.value.message


def test_size_limit_counts_utf8_bytes() -> None:
    text = "ä" * 90  # 90 characters, 180 bytes: fits in characters, not in bytes... with framing
    frame = json.dumps({"type": "source", "text": text}, ensure_ascii=False)
    assert len(frame) < 200 < len(frame.encode())
    with pytest.raises(ProtocolError) as info:
        parse(frame)
    assert info.value.code is ErrorCode.MESSAGE_TOO_BIG


@pytest.mark.parametrize(
    ("code", "fatal", "close"),
    [
        (ErrorCode.BAD_JSON, True, 1008),
        (ErrorCode.BINARY_FRAME, True, 1008),
        (ErrorCode.UNKNOWN_TYPE, True, 1008),
        (ErrorCode.NOT_STARTED, True, 1008),
        (ErrorCode.ALREADY_STARTED, True, 1008),
        (ErrorCode.BAD_POLICY, True, 1008),
        (ErrorCode.IDLE_TIMEOUT, True, 1008),
        (ErrorCode.MESSAGE_TOO_BIG, True, 1009),
        (ErrorCode.INTERNAL, True, 1011),
        (ErrorCode.OVERLOADED, True, 1013),
        (ErrorCode.WORD_TOO_LONG, False, None),
        (ErrorCode.SENTENCE_TOO_LONG, False, None),
        (ErrorCode.AFTER_END, False, None),
    ],
)
def test_error_codes(code: ErrorCode, fatal: bool, close: int | None) -> None:
    assert code.fatal is fatal
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


_words = st.lists(st.sampled_from(["ein", "Satz", "lang", "ist", ".", "gut!", "ja?"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_words, st.booleans()), max_size=12))
def test_sentence_counter_never_admits_a_long_sentence(
    messages: list[tuple[list[str], bool]],
) -> None:
    counter = SentenceCounter(max_words=5, max_tokens=12)
    admitted: list[str] = []
    for words, flush in messages:
        before = (counter.words, counter.tokens)
        try:
            counter.admit(words, len)
            admitted.extend(words)
        except ProtocolError as e:
            assert e.code is ErrorCode.SENTENCE_TOO_LONG
            assert (counter.words, counter.tokens) == before  # a refused message counts nothing
        if flush:
            counter.flush()
            admitted.append("<flush>")
    run_words = run_tokens = 0
    for word in admitted:
        if word == "<flush>":
            run_words = run_tokens = 0
            continue
        run_words += 1
        run_tokens += len(word)
        assert run_words <= 5 and run_tokens <= 12
        if ends_sentence(word):
            run_words = run_tokens = 0
    assert (counter.words, counter.tokens) == (run_words, run_tokens)
