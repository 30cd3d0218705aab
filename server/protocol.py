"""The `simulmt.v1` websocket protocol as pure functions: parse client frames (the server's
replies are built in `replies.py`).

No I/O and no state here (the session's state machine is `machine.py`). Every bad frame
raises `ProtocolError` with an `ErrorCode` and a message saying what was wrong and what is
accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulmt.server.config import PROTOCOL, PROTOCOLS, Limits
from simulmt.server.errors import ErrorCode, ProtocolError

from simulmt.input.kinds import InputKind
from simulmt.input.sentences import Segmentation

JsonDict = dict[str, Any]
# earlier names of `start` fields: accepted until the next release, with a note in `session`
OLD_START_FIELDS = {"lookahead": "segment_lookahead", "input": "input_kind"}
CLIENT_TYPES = ("start", "source", "flush", "end", "ping")
FIELDS = {  # the fields each client message may carry in simulmt.v1
    "start": (
        "type",
        "protocol",
        "policy",
        "beam",
        "src_lang",
        "tgt_lang",
        "segmentation",
        "segment_lookahead",
        "fillers",
        "numbers",
        "input_kind",
        "resume",
        "token",
        *OLD_START_FIELDS,
    ),
    "source": ("type", "text"),
    "flush": ("type",),
    "end": ("type",),
    "ping": ("type",),
}
RESUME_FIELDS = ("session_id", "token", "last_seq")
# start.segment_lookahead's bound in words; the detector's own maximum (4 for the bundled one)
# is checked when the session is built
MAX_SEGMENT_LOOKAHEAD = 8


@dataclass(frozen=True)
class Resume:
    session_id: str
    token: str
    last_seq: int  # the last `seq` the client received; everything after it is replayed


@dataclass(frozen=True)
class Start:
    policy: str
    beam: int
    src_lang: str | None = None
    tgt_lang: str | None = None
    protocol: str = PROTOCOL  # the version both sides speak (negotiated from the client's list)
    resume: Resume | None = None
    # None: the server's default (auto when the model has a boundary detector, else punctuation)
    segmentation: Segmentation | None = None
    segment_lookahead: int | None = None  # auto only: words the detector reads past a boundary
    drop_fillers: bool = True  # "fillers": "drop" (default) or "keep" hesitation sounds
    # "numbers": "localise" (default: numbers the model would miscopy reach it as placeholders
    # and are written from the source in the target's notation, "2.100" as "2,100") or "keep"
    localise_numbers: bool = True
    # "input_kind": "text" (words as written; the default) or "recognizer" (a speech recognizer's
    # lowercase words without punctuation: case and commas are restored first)
    input_kind: InputKind = InputKind.TEXT
    token: str | None = None  # the server's token, when the handshake did not carry it
    # notes for the client on deprecated field names it used (sent in `session.warnings`)
    deprecated: tuple[str, ...] = ()


@dataclass(frozen=True)
class Source:
    words: tuple[str, ...]  # whitespace-split words


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


@dataclass(frozen=True)
class Parsed:
    message: ClientMessage
    ignored: tuple[str, ...] = ()  # unknown fields (a `start` with any is refused instead)


def parse_client_message(
    frame: str | bytes, *, limits: Limits, default_policy: str, max_beam: int
) -> Parsed:
    """Parse one client frame; raise `ProtocolError` saying what was wrong and what is accepted."""
    if isinstance(frame, bytes):
        raise ProtocolError(ErrorCode.BINARY_FRAME, "binary frames are refused; send JSON text")
    size = len(frame.encode("utf-8", "surrogatepass"))
    if size > limits.max_message_bytes:
        raise ProtocolError(
            ErrorCode.MESSAGE_TOO_BIG,
            f"message is {size} bytes; the limit is {limits.max_message_bytes} bytes; "
            "it was dropped whole",
        )
    try:
        data = json.loads(frame)
    except (json.JSONDecodeError, RecursionError) as e:
        where = f" ({e.msg} at {e.pos})" if isinstance(e, json.JSONDecodeError) else ""
        raise ProtocolError(ErrorCode.BAD_JSON, f"not valid JSON{where}") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ProtocolError(
            ErrorCode.BAD_JSON, 'expected a JSON object with a string "type", e.g. {"type":"ping"}'
        )
    kind = data["type"]
    if kind not in FIELDS:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE,
            f"unknown type {kind[:40]!r}; accepted: {', '.join(CLIENT_TYPES)}",
        )
    ignored = tuple(sorted(str(k)[:40] for k in data if k not in FIELDS[kind]))
    message: ClientMessage
    if kind == "start":
        if ignored:
            raise ProtocolError(ErrorCode.UNKNOWN_FIELD, unknown_fields_text("start", ignored))
        message = _parse_start(data, default_policy=default_policy, max_beam=max_beam)
    elif kind == "source":
        message = _parse_source(data)
    elif kind == "flush":
        message = Flush()
    elif kind == "end":
        message = End()
    else:
        message = Ping()
    return Parsed(message, ignored)


def unknown_fields_text(kind: str, fields: Sequence[str]) -> str:
    return (
        f"{kind} has unknown fields {', '.join(map(repr, fields[:5]))}; "
        f"accepted: {', '.join(FIELDS[kind])}"
    )


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"start.{key} must be a string when given")
    return value


def negotiate(asked: object) -> str:
    """The first version in the client's list (or its one string) that this server speaks."""
    offered = [asked] if isinstance(asked, str) else asked
    if isinstance(offered, list) and all(isinstance(v, str) for v in offered):
        for version in offered:
            if version in PROTOCOLS:
                return str(version)
    shown = repr(asked)[:80]
    raise ProtocolError(
        ErrorCode.BAD_START,
        f"start.protocol is {shown}; this server speaks {', '.join(map(repr, PROTOCOLS))} "
        "(a string, or a list of versions in order of preference)",
    )


def _renamed(data: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """`data` with the earlier field names read as the current ones, and a note for each."""
    out, notes = dict(data), []
    for old, new in OLD_START_FIELDS.items():
        if old not in data:
            continue
        if new in data:
            raise ProtocolError(
                ErrorCode.BAD_START, f"start has both {new!r} and its earlier name {old!r}; "
                f"send {new!r} only",
            )  # fmt: skip
        out[new] = out.pop(old)
        notes.append(
            f"start.{old} is deprecated and will be refused from the next release; "
            f"send start.{new}"
        )
    return out, tuple(notes)


def _parse_start(raw: Mapping[str, Any], *, default_policy: str, max_beam: int) -> Start:
    data, deprecated = _renamed(raw)
    protocol = negotiate(data.get("protocol"))
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
    segmentation, segment_lookahead = _parse_segmentation(data)
    fillers = data.get("fillers", "drop")
    if fillers not in ("drop", "keep"):
        raise ProtocolError(
            ErrorCode.BAD_START,
            f"start.fillers is {repr(fillers)[:40]}; accepted: 'drop' (hesitation sounds such "
            "as äh, ähm, hm never reach the model; the default) or 'keep'",
        )
    numbers = data.get("numbers", "localise")
    if numbers not in ("localise", "keep"):
        raise ProtocolError(
            ErrorCode.BAD_START,
            f"start.numbers is {repr(numbers)[:40]}; accepted: 'localise' (numbers are written "
            "as the source has them, in the target's notation: German 2.100 or 16,1 as 2,100 "
            "or 16.1; the default) or 'keep' (as the model writes them)",
        )
    try:
        input_kind = InputKind.parse(data.get("input_kind", InputKind.TEXT.value))
    except (ValueError, TypeError):
        raise ProtocolError(
            ErrorCode.BAD_START,
            f"start.input_kind is {repr(data.get('input_kind'))[:40]}; accepted: 'text' (words as "
            "written, with case and punctuation; the default) or 'recognizer' (a speech "
            "recognizer's output, lowercase without punctuation: case and commas are restored "
            "before translation)",
        ) from None
    return Start(
        policy=policy.strip(),
        beam=beam,
        src_lang=_optional_str(data, "src_lang"),
        tgt_lang=_optional_str(data, "tgt_lang"),
        protocol=protocol,
        resume=_parse_resume(data.get("resume")),
        segmentation=segmentation,
        segment_lookahead=segment_lookahead,
        drop_fillers=fillers == "drop",
        localise_numbers=numbers == "localise",
        input_kind=input_kind,
        token=_optional_str(data, "token"),
        deprecated=deprecated,
    )


def _parse_segmentation(data: Mapping[str, Any]) -> tuple[Segmentation | None, int | None]:
    value, lookahead = data.get("segmentation"), data.get("segment_lookahead")
    accepted = ", ".join(repr(m.value) for m in Segmentation)
    segmentation = None
    if value is not None:
        if not isinstance(value, str) or value not in {m.value for m in Segmentation}:
            raise ProtocolError(
                ErrorCode.BAD_START,
                f"start.segmentation is {repr(value)[:40]}; accepted: {accepted}",
            )
        segmentation = Segmentation(value)
    if lookahead is None:
        return segmentation, None
    if isinstance(lookahead, bool) or not isinstance(lookahead, int):
        raise ProtocolError(
            ErrorCode.BAD_START,
            f"start.segment_lookahead must be an integer in 0..{MAX_SEGMENT_LOOKAHEAD}, "
            f"got {lookahead!r}",
        )
    if not 0 <= lookahead <= MAX_SEGMENT_LOOKAHEAD:
        raise ProtocolError(
            ErrorCode.BAD_START,
            f"start.segment_lookahead must be an integer in 0..{MAX_SEGMENT_LOOKAHEAD}, "
            f"got {lookahead}",
        )
    if segmentation not in (None, Segmentation.AUTO):
        raise ProtocolError(
            ErrorCode.BAD_START,
            "start.segment_lookahead applies to segmentation 'auto' only, not "
            f"{segmentation.value!r}",
        )
    return segmentation, lookahead


def _parse_resume(value: object) -> Resume | None:
    if value is None:
        return None
    usage = (
        "start.resume must be {session_id: string, token: string, last_seq: integer >= 0} "
        "from the session's `session` message"
    )
    if not isinstance(value, dict) or set(value) != set(RESUME_FIELDS):
        raise ProtocolError(ErrorCode.BAD_START, usage)
    sid, token, last = value["session_id"], value["token"], value["last_seq"]
    if not isinstance(sid, str) or not isinstance(token, str):
        raise ProtocolError(ErrorCode.BAD_START, usage)
    if isinstance(last, bool) or not isinstance(last, int) or last < 0:
        raise ProtocolError(ErrorCode.BAD_START, usage)
    return Resume(session_id=sid, token=token, last_seq=last)


def _parse_source(data: Mapping[str, Any]) -> Source:
    text = data.get("text")
    if not isinstance(text, str):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, "source.text must be a string of words")
    return Source(words=tuple(text.split()))


def check_word_lengths(words: Sequence[str], limits: Limits) -> None:
    """Refuse a `source` message with a word over `max_word_chars` (garbage, not speech)."""
    for word in words:
        if len(word) > limits.max_word_chars:
            raise ProtocolError(
                ErrorCode.WORD_TOO_LONG,
                f"a word of {len(word)} characters ({word[:20]}…); the limit is "
                f"{limits.max_word_chars}; the whole message was dropped",
            )
