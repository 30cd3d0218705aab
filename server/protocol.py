"""The `simulmt.v1` websocket protocol as pure functions: parse client frames, build replies.

No I/O here: the connection handler feeds frames in and sends what comes out. Every bad frame
raises `ProtocolError`, whose `ErrorCode` says whether the session survives it and, if not,
which close code ends the connection.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulmt.server.config import PROTOCOL, Limits
from websockets.frames import CloseCode

from simulmt.updates import Update
from simulmt.words import ends_sentence  # the Session splits sentences at the same words

JsonDict = dict[str, Any]
CLIENT_TYPES = ("start", "source", "flush", "end", "ping")


class ErrorCode(enum.Enum):
    """What went wrong; `fatal` codes end the connection with `close_code`."""

    BAD_JSON = "bad_json"  # not a JSON object with a string `type`
    BINARY_FRAME = "binary_frame"  # the protocol uses text frames only
    BAD_MESSAGE = "bad_message"  # a known type with missing or mistyped fields
    UNKNOWN_TYPE = "unknown_type"
    NOT_STARTED = "not_started"  # anything but `start` as the first message
    ALREADY_STARTED = "already_started"  # a second `start`
    BAD_START = "bad_start"  # wrong protocol, beam or language pair
    BAD_POLICY = "bad_policy"  # a policy spec the registry refuses
    MESSAGE_TOO_BIG = "message_too_big"
    WORD_TOO_LONG = "word_too_long"  # non-fatal: the `source` message is dropped whole
    SENTENCE_TOO_LONG = "sentence_too_long"  # non-fatal: dropped whole; `flush` and resend
    AFTER_END = "after_end"  # non-fatal: ignored, the session is already finishing
    IDLE_TIMEOUT = "idle_timeout"
    OVERLOADED = "overloaded"  # --max-sessions reached
    INTERNAL = "internal"  # a server bug; the session cannot go on

    @property
    def fatal(self) -> bool:
        return self not in _NON_FATAL

    @property
    def close_code(self) -> CloseCode | None:
        if not self.fatal:
            return None
        if self is ErrorCode.MESSAGE_TOO_BIG:
            return CloseCode.MESSAGE_TOO_BIG  # 1009
        if self is ErrorCode.OVERLOADED:
            return CloseCode.TRY_AGAIN_LATER  # 1013
        if self is ErrorCode.INTERNAL:
            return CloseCode.INTERNAL_ERROR  # 1011
        return CloseCode.POLICY_VIOLATION  # 1008


_NON_FATAL = frozenset({ErrorCode.WORD_TOO_LONG, ErrorCode.SENTENCE_TOO_LONG, ErrorCode.AFTER_END})


class ProtocolError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Start:
    policy: str
    beam: int
    src_lang: str | None = None
    tgt_lang: str | None = None


@dataclass(frozen=True)
class Source:
    words: tuple[str, ...]  # whitespace-split words, each within Limits.max_word_chars


@dataclass(frozen=True)
class Flush:
    pass


@dataclass(frozen=True)
class End:
    pass


@dataclass(frozen=True)
class Ping:
    pass


ClientMessage = Start | Source | Flush | End | Ping


def parse_client_message(
    frame: str | bytes, *, limits: Limits, default_policy: str, max_beam: int
) -> ClientMessage:
    """Parse one client frame; raise `ProtocolError` saying what was wrong and what is accepted."""
    if isinstance(frame, bytes):
        raise ProtocolError(ErrorCode.BINARY_FRAME, "binary frames are refused; send JSON text")
    size = len(frame.encode("utf-8"))
    if size > limits.max_message_bytes:
        raise ProtocolError(
            ErrorCode.MESSAGE_TOO_BIG,
            f"message is {size} bytes; the limit is {limits.max_message_bytes} bytes",
        )
    try:
        data = json.loads(frame)
    except json.JSONDecodeError as e:
        raise ProtocolError(ErrorCode.BAD_JSON, f"not valid JSON ({e.msg} at {e.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ProtocolError(
            ErrorCode.BAD_JSON, 'expected a JSON object with a string "type", e.g. {"type":"ping"}'
        )
    kind = data["type"]
    if kind == "start":
        return _parse_start(data, default_policy=default_policy, max_beam=max_beam)
    if kind == "source":
        return _parse_source(data, limits=limits)
    if kind == "flush":
        return Flush()
    if kind == "end":
        return End()
    if kind == "ping":
        return Ping()
    raise ProtocolError(
        ErrorCode.UNKNOWN_TYPE, f"unknown type {kind[:40]!r}; accepted: {', '.join(CLIENT_TYPES)}"
    )


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"start.{key} must be a string when given")
    return value


def _parse_start(data: Mapping[str, Any], *, default_policy: str, max_beam: int) -> Start:
    protocol = data.get("protocol")
    if protocol != PROTOCOL:
        raise ProtocolError(
            ErrorCode.BAD_START, f"start.protocol is {protocol!r}; this server speaks {PROTOCOL!r}"
        )
    policy = data.get("policy", default_policy)
    if not isinstance(policy, str) or not policy.strip():
        raise ProtocolError(
            ErrorCode.BAD_POLICY, 'start.policy must be a spec string like "wait-k:k=3"'
        )
    beam = data.get("beam", 1)
    if isinstance(beam, bool) or not isinstance(beam, int) or not 1 <= beam <= max_beam:
        raise ProtocolError(
            ErrorCode.BAD_START, f"start.beam must be an integer in 1..{max_beam}, got {beam!r}"
        )
    return Start(
        policy=policy.strip(),
        beam=beam,
        src_lang=_optional_str(data, "src_lang"),
        tgt_lang=_optional_str(data, "tgt_lang"),
    )


def _parse_source(data: Mapping[str, Any], *, limits: Limits) -> Source:
    text = data.get("text")
    if not isinstance(text, str):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "source.text must be a string of words")
    words = tuple(text.split())
    for word in words:
        if len(word) > limits.max_word_chars:
            raise ProtocolError(
                ErrorCode.WORD_TOO_LONG,
                f"a word of {len(word)} characters ({word[:20]}…); the limit is "
                f"{limits.max_word_chars}; the whole message was dropped",
            )
    return Source(words=words)


class SentenceCounter:
    """Counts the open sentence's words and subword tokens so that over-long ones are refused
    before they reach the model (whose positions are finite)."""

    def __init__(self, *, max_words: int, max_tokens: int) -> None:
        self.max_words = max_words
        self.max_tokens = max_tokens
        self.words = 0  # words of the current, unfinished sentence
        self.tokens = 0  # their subword tokens

    def admit(self, words: Sequence[str], count_tokens: Callable[[str], int]) -> None:
        """Count `words` in, or raise SENTENCE_TOO_LONG and count nothing."""
        n_words, n_tokens = self.words, self.tokens
        for word in words:
            n_words += 1
            n_tokens += count_tokens(word)
            if n_words > self.max_words or n_tokens > self.max_tokens:
                what = (
                    f"{self.max_words} words"
                    if n_words > self.max_words
                    else f"{self.max_tokens} subword tokens"
                )
                raise ProtocolError(
                    ErrorCode.SENTENCE_TOO_LONG,
                    f"the sentence would exceed {what}; end sentences with . ! ? or send "
                    f"flush; the whole message was dropped",
                )
            if ends_sentence(word):
                n_words = n_tokens = 0
        self.words, self.tokens = n_words, n_tokens

    def flush(self) -> None:
        self.words = self.tokens = 0


# ---- server -> client messages (the connection adds `seq`) ----


def session_message(session_id: str, model: str, limits: Limits) -> JsonDict:
    return {"type": "session", "session_id": session_id, "model": model, "limits": limits.as_dict()}


def update_messages(update: Update) -> list[JsonDict]:
    """The `partial` (and `final`, on a sentence's last update) messages of one Update.

    A final update with nothing new to show sends only the `final`, which also clears the
    sentence's tentative tail.
    """
    out: list[JsonDict] = []
    if not update.final or update.committed_delta or update.tentative:
        out.append(
            {
                "type": "partial",
                "sentence_id": update.sentence_id,
                "committed_delta": update.committed_delta,
                "committed_len": update.committed_len,
                "tentative": update.tentative,
                "delays": list(update.delays),
                "emitted_ms": [round(t, 1) for t in update.emitted_ms],
            }
        )
    if update.final:
        out.append(
            {
                "type": "final",
                "sentence_id": update.sentence_id,
                "text": update.text,
                "source": update.source,
            }
        )
    return out


def error_message(code: ErrorCode, message: str) -> JsonDict:
    return {"type": "error", "code": code.value, "message": message, "fatal": code.fatal}


def end_message(sentences: int) -> JsonDict:
    return {"type": "end", "sentences": sentences}


def encode(message: JsonDict, seq: int) -> str:
    """Serialize a server message with its `seq`."""
    return json.dumps({**message, "seq": seq}, ensure_ascii=False, separators=(",", ":"))
