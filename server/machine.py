"""One captioning session as the protocol sees it, without I/O: inputs in, effects out.

Inputs are method calls (a client frame, a worker delivery, the idle timer, a shutdown, a
resume); outputs are `Effect`s that `take()` hands to whoever carries them out (the
connection: send a frame, close, give work to the model worker, build or look up a session).
So every rule of `simulmt.v1` is tested without sockets, and `Connection` only moves frames.

The machine outlives its connection: a dropped connection parks it and a resume attaches it to
a new one. It therefore numbers its own messages (`seq`) and keeps the last
`replay_messages` of them, and it counts the frames it received, so a resuming client knows
which of its own frames to send again.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass

from simulmt.server.auth import token_matches
from simulmt.server.config import ServerConfig
from simulmt.server.events import NO_EVENTS, SessionEvents
from simulmt.server.ops import Delivery, Marker, Op, OpKind
from simulmt.server.protocol import (
    End,
    ErrorCode,
    Flush,
    JsonDict,
    ProtocolError,
    Resume,
    Source,
    Start,
    check_word_lengths,
    parse_client_message,
    unknown_fields_text,
)
from simulmt.server.replies import (
    bad_text_message,
    encode,
    end_message,
    error_message,
    session_message,
    update_messages,
)
from websockets.frames import CloseCode

from simulmt.input.textcheck import clean_words, scrub

logger = logging.getLogger(__name__)


class Phase(enum.Enum):
    AWAITING_START = "awaiting_start"
    STARTING = "starting"  # `start` taken; the session is being built or looked up
    STREAMING = "streaming"
    ENDING = "ending"  # the client sent `end`; finishing the last sentence
    DONE = "done"  # the last message and the close are queued; input is ignored


@dataclass(frozen=True)
class Send:
    seq: int
    text: str  # the encoded message, `seq` included


@dataclass(frozen=True)
class Close:
    code: int
    reason: str


@dataclass(frozen=True)
class Build:
    start: Start  # build a new session; answer with `started()` or `start_failed()`


@dataclass(frozen=True)
class Attach:
    resume: Resume  # find the parked session and move the connection onto it


@dataclass(frozen=True)
class Submit:
    op: Op  # hand to the model worker, in order


@dataclass(frozen=True)
class Discard:
    pass  # the session cannot go on: drop its queued work


Effect = Send | Close | Build | Attach | Submit | Discard


class SessionMachine:
    """The `simulmt.v1` state machine of one session (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        session_id: str,
        model: str,
        token: str,
        require_token: str | None = None,
        events: SessionEvents = NO_EVENTS,
        precision: str | None = None,
    ) -> None:
        self.config = config
        self.session_id = session_id
        self.model = model
        self.precision = precision  # what the model runs in (`--dtype auto` picks it at load)
        self.token = token  # the resume token, announced in the `session` message
        self.require_token = require_token  # the server's token, which `start.token` must be
        self.events = events  # told what happens (metrics)
        self.phase = Phase.AWAITING_START
        self.segmentation: str | None = None  # how the session ends sentences, once started
        self.protocol = ""  # the version negotiated at `start`
        self.seq = 0  # seq of the last message made
        self.received = 0  # client frames received after `start` (a resume's re-send point)
        self.words_in = 0  # source words handed to the worker
        self.inflight = 0  # of those, words the worker has not taken yet
        self.feeds = 0  # `source` messages handed to the worker (Op.feed numbers them)
        self.sentences = 0  # finals made
        self.shutting_down = False
        self._log: deque[tuple[int, str]] = deque(maxlen=config.replay_messages)
        self._log_bytes = 0  # characters held in _log (capped at config.replay_bytes)
        self._effects: list[Effect] = []
        self._committed: dict[int, int] = {}  # sentence_id -> committed words made so far
        self._last_final = -1  # sentences finish in order: ids <= this one are done
        self._close: Close | None = None
        self._start: Start | None = None  # the `start` of a session being built

    # ---- outputs ----
    def take(self) -> list[Effect]:
        """The effects made since the last call, in order."""
        out, self._effects = self._effects, []
        return out

    @property
    def parkable(self) -> bool:
        """A session exists that a resume could reattach to."""
        return self.phase not in (Phase.AWAITING_START, Phase.STARTING)

    def _send(self, message: JsonDict) -> None:
        self.seq += 1
        text = encode(message, self.seq)
        self._keep(self.seq, text)
        self._effects.append(Send(self.seq, text))

    def _keep(self, seq: int, text: str) -> None:
        """Keep a message for a resume's replay: the last `replay_messages`, and of those no
        more than `replay_bytes` (the oldest go first)."""
        if len(self._log) == self._log.maxlen:
            self._log_bytes -= len(self._log[0][1])
        self._log.append((seq, text))
        self._log_bytes += len(text)
        while self._log_bytes > self.config.replay_bytes and len(self._log) > 1:
            self._log_bytes -= len(self._log.popleft()[1])

    def _error(self, code: ErrorCode, message: str, *, fatal: bool) -> None:
        if self.phase is Phase.DONE:
            return
        # a flood of bad frames must not flood the log: frame errors are debug lines
        level = logging.INFO if fatal else logging.DEBUG
        logger.log(level, "session %s: %s: %s", self.session_id, code.value, scrub(message))
        self._send(error_message(code, message, fatal=fatal))
        self.events.error(code)
        if fatal:
            self._effects.append(Discard())
            self._finish(Close(code.close_code, code.value))

    def _refuse(self, error: ProtocolError) -> None:
        """A bad frame: fatal before `start`, or when it concerns the session itself."""
        started = self.phase is not Phase.AWAITING_START
        self._error(error.code, error.message, fatal=not (started and error.code.about_frame))

    def _finish(self, close: Close) -> None:
        self.phase = Phase.DONE
        self._close = close
        self._effects.append(close)

    # ---- inputs ----
    def receive(self, frame: str | bytes) -> None:
        """One client frame."""
        if self.phase is Phase.DONE or self.shutting_down:
            return  # the connection keeps draining so that the closing handshake completes
        if self.phase is not Phase.AWAITING_START:
            self.received += 1
        try:
            parsed = parse_client_message(
                frame,
                limits=self.config.limits,
                default_policy=self.config.default_policy,
                max_beam=self.config.max_beam,
            )
        except ProtocolError as e:
            if self.phase is not Phase.AWAITING_START and not e.code.about_frame:
                e = ProtocolError(  # only a `start` fails this way: another one, and invalid
                    ErrorCode.ALREADY_STARTED,
                    f"this session has already started; this start was ignored ({e.message})",
                )
            self._refuse(e)
            return
        message = parsed.message
        if self.phase is Phase.AWAITING_START:
            if not isinstance(message, Start):
                first = 'the first message must be "start"'
                self._refuse(ProtocolError(ErrorCode.NOT_STARTED, first))
                return
            if self.require_token is not None and not token_matches(
                message.token, self.require_token
            ):
                how = "send the server's token as start.token (or 'Authorization: Bearer T')"
                error = ProtocolError(ErrorCode.UNAUTHORIZED, f"missing or wrong token: {how}")
                self._refuse(error)
                return
            self.phase, self.protocol = Phase.STARTING, message.protocol
            effect = Attach(message.resume) if message.resume else Build(message)
            self._start = None if message.resume else message
            self._effects.append(effect)
            return
        if parsed.ignored:
            kind = type(message).__name__.lower()
            text = unknown_fields_text(kind, parsed.ignored) + "; they were ignored"
            self._error(ErrorCode.UNKNOWN_FIELD, text, fatal=False)
        try:
            self._stream_input(message)
        except ProtocolError as e:
            self._refuse(e)

    def _stream_input(self, message: object) -> None:
        if isinstance(message, Start):
            raise ProtocolError(ErrorCode.ALREADY_STARTED, "this session has already started")
        if self.phase is Phase.ENDING:
            raise ProtocolError(
                ErrorCode.AFTER_END, "the session has ended; this message was ignored"
            )
        if self.phase is not Phase.STREAMING:  # STARTING: the connection reads nothing then
            raise ProtocolError(ErrorCode.NOT_STARTED, "wait for the `session` message")
        if isinstance(message, Source):
            words, dropped = clean_words(message.words)
            if dropped is not None:  # the rest of the message is taken
                self._error(ErrorCode.BAD_TEXT, bad_text_message(dropped), fatal=False)
            check_word_lengths(words, self.config.limits)
            self._check_backlog(len(words))
            if words:
                self.feeds += 1
                self.events.source(words, feed=self.feeds)
                self.words_in += len(words)
                self.inflight += len(words)
                self._effects.append(Submit(Op(OpKind.FEED, words=words, feed=self.feeds)))
        elif isinstance(message, Flush):
            self._effects.append(Submit(Op(OpKind.END_SOURCE)))
        elif isinstance(message, End):
            self.phase = Phase.ENDING
            self._effects.append(Submit(Op(OpKind.END_SOURCE, marker=Marker.END)))
        # Ping: the frame itself reset the idle timer; nothing to answer

    def _check_backlog(self, words: int) -> None:
        """Words wait for the model while the reader goes on reading (control frames are always
        answered); past `max_backlog_words` a `source` message is refused whole."""
        limit = self.config.max_backlog_words
        if words and self.inflight + words > limit:
            raise ProtocolError(
                ErrorCode.BACKLOG_FULL,
                f"{self.inflight} words of this session still wait for translation and this "
                f"message has {words}; at most {limit} may wait; the whole message was "
                "dropped: send it again after the next `final`",
            )

    def started(self, *, segmentation: str | None = None) -> None:
        """The `Build` succeeded: the session streams. `segmentation`: the mode the session
        ends sentences with (the server's default may have fallen back), told to the client."""
        if self.phase is not Phase.STARTING:
            return
        self.phase = Phase.STREAMING
        self.segmentation = segmentation
        message = self._session_message()
        if self._start is not None:
            self.events.started(self._start)
            if self._start.deprecated:  # earlier field names, still taken: say what to send
                message["warnings"] = list(self._start.deprecated)
        self._send(message)

    def start_failed(self, error: ProtocolError) -> None:
        """The `Build` or `Attach` failed: the error ends this connection."""
        self._error(error.code, error.message, fatal=True)

    def resume_problem(self, last_seq: int) -> str | None:
        """Why messages after `last_seq` cannot be replayed, or None if they can."""
        if last_seq > self.seq:
            return f"last_seq {last_seq} is ahead of this session's last message ({self.seq})"
        oldest = self._log[0][0] if self._log else self.seq + 1
        if last_seq + 1 < oldest:
            return (
                f"messages after seq {last_seq} are no longer kept (the server keeps the last "
                f"{self.config.replay_messages}, at most {self.config.replay_bytes} bytes); "
                "start a new session"
            )
        return None

    def replay(self, last_seq: int) -> None:
        """Resume on a new connection: every message after `last_seq`, then (unless the
        session is over) a `session` message saying how many client frames were received."""
        assert self.resume_problem(last_seq) is None
        self.events.resumed()
        self._effects = [Send(seq, text) for seq, text in self._log if seq > last_seq]
        if self.phase is Phase.DONE:
            assert self._close is not None
            self._effects.append(self._close)
            return
        self._announce_resume()

    def _session_message(self) -> JsonDict:
        """The `session` message: what the client needs to stream and to resume."""
        message = session_message(
            session_id=self.session_id,
            model=self.model,
            protocol=self.protocol,
            limits=self.config.limits,
            token=self.token,
            window_s=self.config.resume_window_s,
            route=self.config.route,
            segmentation=self.segmentation,
        )
        if self.precision is not None:
            message["precision"] = self.precision  # beside the model's name: float32, int8, ...
        return message

    def _announce_resume(self) -> None:
        message = self._session_message()
        message["resumed"] = {"received": self.received, "ending": self.phase is Phase.ENDING}
        self._send(message)

    def idle(self) -> None:
        if self.phase is Phase.AWAITING_START:
            wait = self.config.admission.handshake_timeout_s
            why = f"no `start` message within {wait:g} s of connecting; closing"
        else:
            why = f"no message for {self.config.limits.idle_timeout_s:g} s; closing"
        self._error(ErrorCode.IDLE_TIMEOUT, why, fatal=True)

    def rate_limited(self, why: str) -> None:
        """The client sent more than its rate limit: a flood, not a speaker."""
        self._error(ErrorCode.RATE_LIMITED, why, fatal=True)

    def shutdown(self) -> None:
        """Graceful stop: finish the open sentence (its final goes out), then tell the client."""
        if self.shutting_down or self.phase is Phase.DONE:
            return
        self.shutting_down = True
        if self.phase in (Phase.STREAMING, Phase.ENDING):
            self._effects.append(Submit(Op(OpKind.END_SOURCE, marker=Marker.SHUTDOWN)))
        else:
            self._shutdown_error()

    def _shutdown_error(self) -> None:
        self._error(
            ErrorCode.SHUTTING_DOWN,
            "this server process is stopping; start a new session (this one cannot be "
            "resumed) and send again the words that have no final yet",
            fatal=True,
        )

    def deliver(self, delivery: Delivery) -> None:
        """What the worker made of this session's ops."""
        self.inflight -= delivery.words_taken
        if self.phase is Phase.DONE:
            return
        for rejected in delivery.rejected:
            self._error(rejected.code, rejected.message, fatal=False)
        for feed, offset, count in delivery.dropped:  # before any update: they shift delays
            self.events.dropped(feed, offset, count)
        if delivery.error is not None:
            self._internal()
            return
        for update in delivery.updates:
            if update.sentence_id <= self._last_final:
                logger.warning("session %s: update after final dropped", self.session_id)
                continue
            before = self._committed.get(update.sentence_id, 0)
            if update.committed_len - len(update.delays) != before:  # words went missing
                logger.error("session %s: committed words lost in a failure", self.session_id)
                self._internal()
                return
            self._committed[update.sentence_id] = update.committed_len
            for message in update_messages(update):
                self._send(message)
            self.events.update(update)
            if update.final:
                self.sentences += 1
                self._last_final = update.sentence_id
                self._committed.pop(update.sentence_id, None)
        for marker in delivery.markers:
            if marker is Marker.END:
                self._send(end_message(self.sentences))
                self._finish(Close(CloseCode.NORMAL_CLOSURE, "end"))
            elif marker is Marker.SHUTDOWN:
                self._shutdown_error()

    def _internal(self) -> None:
        self._error(ErrorCode.INTERNAL, "translation failed; the session cannot go on", fatal=True)
