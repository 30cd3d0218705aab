"""The `simulmt.v1` server -> client messages as pure functions (`protocol.py` parses the
client's frames). The connection adds each message's `seq` when it encodes it."""

from __future__ import annotations

import json

from simulmt.server.config import Limits
from simulmt.server.errors import ErrorCode
from simulmt.server.protocol import JsonDict

from simulmt.input.textcheck import scrub
from simulmt.output.updates import Update


def session_message(
    *,
    session_id: str,
    model: str,
    protocol: str,
    limits: Limits,
    token: str,
    window_s: float,
    route: str | None,
    segmentation: str | None = None,
) -> JsonDict:
    resume: JsonDict = {"token": token, "window_s": window_s}
    if route is not None:
        resume["route"] = route  # reconnect with ?route=ROUTE so a proxy finds this process
    message: JsonDict = {
        "type": "session",
        "session_id": session_id,
        "model": model,
        "protocol": protocol,
        "limits": limits.as_dict(),
        "resume": resume,
    }
    if segmentation is not None:  # what ends sentences here: a client cannot tell otherwise
        message["segmentation"] = segmentation  # whether `auto` fell back to punctuation
    return message


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


def bad_text_message(dropped: str) -> str:
    """The `bad_text` error's message: what `clean_words` dropped from a `source` message."""
    return (
        f"source.text held {dropped}, which no text may hold; they were dropped and the rest of "
        "the message was taken (send text as valid Unicode without control characters)"
    )


def error_message(code: ErrorCode, message: str, *, fatal: bool) -> JsonDict:
    return {"type": "error", "code": code.value, "message": message, "fatal": fatal}


def end_message(sentences: int) -> JsonDict:
    return {"type": "end", "sentences": sentences}


def encode(message: JsonDict, seq: int) -> str:
    """Serialize a server message with its `seq`."""
    text = json.dumps({**message, "seq": seq}, ensure_ascii=False, separators=(",", ":"))
    return scrub(text)  # an echo of client input may hold lone surrogates: never send them
