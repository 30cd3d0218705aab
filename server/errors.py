"""The `simulmt.v1` error codes: what went wrong, whether it ends the session, its close code."""

from __future__ import annotations

import enum

from websockets.frames import CloseCode


class ErrorCode(enum.Enum):
    """What went wrong. Errors about one frame are fatal only before `start` (forward
    compatibility: a newer client's extra message costs one `error`, not the session);
    errors about the session itself always end it, with `close_code`."""

    BAD_JSON = "bad_json"  # not a JSON object with a string `type`
    BINARY_FRAME = "binary_frame"  # the protocol uses text frames only
    BAD_MESSAGE = "bad_message"  # a known type with missing or mistyped fields
    UNKNOWN_TYPE = "unknown_type"
    UNKNOWN_FIELD = "unknown_field"  # after start: the field is ignored, the message taken
    NOT_STARTED = "not_started"  # anything but `start` as the first message
    ALREADY_STARTED = "already_started"  # a second `start`
    MESSAGE_TOO_BIG = "message_too_big"  # over Limits.max_message_bytes
    WORD_TOO_LONG = "word_too_long"  # the `source` message is dropped whole
    # characters no text may hold (lone surrogates, control characters): they are dropped
    # and the rest of the message is taken
    BAD_TEXT = "bad_text"
    BACKLOG_FULL = "backlog_full"  # too many words wait for the model: this message is dropped
    AFTER_END = "after_end"  # ignored: the session is already finishing
    BAD_START = "bad_start"  # wrong protocol, beam or language pair
    BAD_POLICY = "bad_policy"  # a policy spec the registry refuses
    RESUME_FAILED = "resume_failed"  # unknown or expired session, wrong token or last_seq
    UNAUTHORIZED = "unauthorized"  # the server has a token and `start` did not carry it
    IDLE_TIMEOUT = "idle_timeout"
    RATE_LIMITED = "rate_limited"  # more frames or bytes per second than a client may send
    OVERLOADED = "overloaded"  # --max-sessions reached (parked sessions count)
    SHUTTING_DOWN = "shutting_down"  # this process stops: open a new session (no resume)
    INTERNAL = "internal"  # a server bug; the session cannot go on

    @property
    def about_frame(self) -> bool:
        """True for errors about one frame (non-fatal once the session has started)."""
        return self in _FRAME_ERRORS

    @property
    def close_code(self) -> CloseCode:
        """The close code that follows this error when it is fatal."""
        if self is ErrorCode.MESSAGE_TOO_BIG:
            return CloseCode.MESSAGE_TOO_BIG  # 1009
        if self is ErrorCode.OVERLOADED:
            return CloseCode.TRY_AGAIN_LATER  # 1013
        if self is ErrorCode.INTERNAL:
            return CloseCode.INTERNAL_ERROR  # 1011
        if self is ErrorCode.SHUTTING_DOWN:
            return CloseCode.GOING_AWAY  # 1001
        return CloseCode.POLICY_VIOLATION  # 1008


_FRAME_ERRORS = frozenset(
    {
        ErrorCode.BAD_JSON,
        ErrorCode.BINARY_FRAME,
        ErrorCode.BAD_MESSAGE,
        ErrorCode.UNKNOWN_TYPE,
        ErrorCode.UNKNOWN_FIELD,
        ErrorCode.NOT_STARTED,
        ErrorCode.ALREADY_STARTED,
        ErrorCode.MESSAGE_TOO_BIG,
        ErrorCode.WORD_TOO_LONG,
        ErrorCode.BAD_TEXT,
        ErrorCode.BACKLOG_FULL,
        ErrorCode.AFTER_END,
    }
)


class ProtocolError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
