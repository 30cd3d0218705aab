"""The sessions of one server process: slots, resume tokens, and parking between connections.

A session holds a slot from its `start` until it is removed: while a connection carries it,
and while it is parked after a drop (for `resume_window_s`), so a burst of drops cannot let
more sessions in than the process can translate. A resume must name the session and its
token; the session then moves to the new connection (taking it over from an old one that has
not noticed its own death yet).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

from simulmt.server.auth import token_matches
from simulmt.server.machine import Close, Discard, SessionMachine
from simulmt.server.ops import Delivery
from simulmt.server.protocol import ErrorCode, ProtocolError, Resume
from simulmt.server.worker import Stream, Worker

logger = logging.getLogger(__name__)
EXPIRED_REMEMBERED = 4096  # ids of expired sessions kept to tell "expired" from "unknown" (log)
# one answer for every failed resume, whatever the cause (it would tell a guesser which session
# ids exist); the cause goes to the log
RESUME_FAILED_TEXT = (
    "this session cannot be resumed (it ended or expired, lives in another process, or the "
    "resume token or last_seq is wrong); start a new session"
)


class Host(Protocol):
    """Whoever carries a session's effects: a connection."""

    def pump(self) -> None: ...  # carry out the machine's pending effects

    def detach(self) -> None: ...  # another connection took the session over


@dataclass(eq=False)
class Hosted:
    """A started session: its machine, its model stream, and the connection carrying it."""

    machine: SessionMachine
    table: SessionTable
    stream: Stream | None = None
    owner: Host | None = None  # None while parked
    address: str = ""  # the client address that started it (per-address session limit)
    expiry: asyncio.TimerHandle | None = field(default=None, repr=False)

    def deliver(self, delivery: Delivery) -> None:
        """The worker's results for this session (on the event loop)."""
        self.machine.deliver(delivery)
        if self.owner is not None:
            self.owner.pump()
        else:
            self.table.drain_parked(self)


def new_token() -> str:
    return secrets.token_urlsafe(18)


class SessionTable:
    def __init__(self, *, max_sessions: int, resume_window_s: float, worker: Worker) -> None:
        self.max_sessions = max_sessions
        self.resume_window_s = resume_window_s
        self.worker = worker
        self.sessions: dict[str, Hosted] = {}
        self.closing = False
        self._expired: OrderedDict[str, None] = OrderedDict()

    @property
    def parked(self) -> int:
        return sum(h.owner is None for h in self.sessions.values())

    def sessions_from(self, address: str) -> int:
        """Sessions started from this client address, parked ones included."""
        return sum(h.address == address for h in self.sessions.values())

    def reserve(self, machine: SessionMachine) -> Hosted | None:
        """A slot for a new session, or None when every slot is taken (parked ones count)."""
        if self.closing or len(self.sessions) >= self.max_sessions:
            return None
        hosted = Hosted(machine, self)
        self.sessions[machine.session_id] = hosted
        return hosted

    def remove(self, hosted: Hosted) -> None:
        if self.sessions.get(hosted.machine.session_id) is hosted:
            del self.sessions[hosted.machine.session_id]
        if hosted.expiry is not None:
            hosted.expiry.cancel()
        if hosted.stream is not None:
            self.worker.discard(hosted.stream)

    def park(self, hosted: Hosted) -> None:
        """The connection dropped: keep the session (its compute paused) for a resume."""
        if self.closing or self.resume_window_s <= 0:
            self.remove(hosted)
            return
        hosted.owner = None
        if hosted.stream is not None:
            self.worker.set_paused(hosted.stream, True)  # the replay stays what was missed
        loop = asyncio.get_running_loop()
        hosted.expiry = loop.call_later(self.resume_window_s, self._expire, hosted)
        logger.info("session %s parked for %g s", hosted.machine.session_id, self.resume_window_s)

    def _expire(self, hosted: Hosted) -> None:
        if hosted.owner is not None:
            return
        self.remove(hosted)
        self._expired[hosted.machine.session_id] = None
        while len(self._expired) > EXPIRED_REMEMBERED:
            self._expired.popitem(last=False)
        logger.info("session %s expired unresumed", hosted.machine.session_id)

    def drain_parked(self, hosted: Hosted) -> None:
        """Effects of a parked session: messages wait in its replay log; a failure ends it."""
        for effect in hosted.machine.take():
            if isinstance(effect, Discard) and hosted.stream is not None:
                self.worker.discard(hosted.stream)
            elif isinstance(effect, Close):
                logger.debug("parked session %s finished", hosted.machine.session_id)

    def claim(self, resume: Resume, owner: Host) -> Hosted:
        """Move a session to `owner`; raise RESUME_FAILED (one answer for every cause)."""
        sid = resume.session_id
        hosted = self.sessions.get(sid)
        if hosted is None or hosted.stream is None:
            why = "expired unresumed" if sid in self._expired else "no such session here"
        elif not token_matches(resume.token, hosted.machine.token):
            why = "wrong resume token"
        else:
            why = hosted.machine.resume_problem(resume.last_seq) or ""
        if why:
            logger.info("resume of session %r refused: %s", sid[:40], why)
            raise ProtocolError(ErrorCode.RESUME_FAILED, RESUME_FAILED_TEXT)
        assert hosted is not None
        if hosted.expiry is not None:
            hosted.expiry.cancel()
            hosted.expiry = None
        previous, hosted.owner = hosted.owner, owner
        if previous is not None:
            previous.detach()
        logger.info("session %s resumed after seq %d", sid, resume.last_seq)
        return hosted

    def close_all_parked(self) -> None:
        """Shutdown: parked sessions cannot finish anywhere; free them."""
        self.closing = True
        parked = [h for h in self.sessions.values() if h.owner is None]
        for hosted in parked:  # no connection to tell: the log says it
            logger.info(
                "session %s dropped at shutdown while parked: its client cannot resume it and "
                "must start a new session",
                hosted.machine.session_id,
            )
            self.remove(hosted)
        if parked:
            logger.warning("shutdown dropped %d parked sessions", len(parked))
