"""What a session's state machine tells the outside (metrics) as it goes: no I/O, no state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from simulmt.server.protocol import ErrorCode, Start

from simulmt.output.updates import Update


class SessionEvents(Protocol):
    def started(self, start: Start) -> None: ...  # the session was built for this `start`

    def error(self, code: ErrorCode) -> None: ...  # an `error` message was sent

    # source words handed to the model, from the session's `feed`-th source message
    def source(self, words: Sequence[str], *, feed: int = 0) -> None: ...

    # words[offset:offset + count] of that message, dropped by the model worker unread
    def dropped(self, feed: int, offset: int, count: int) -> None: ...

    def update(self, update: Update) -> None: ...  # an update's messages were sent

    def resumed(self) -> None: ...  # a new connection took the session over


class NoEvents:
    """Tells nobody (a machine without metrics: tests, tools)."""

    def started(self, start: Start) -> None:
        pass

    def error(self, code: ErrorCode) -> None:
        pass

    def source(self, words: Sequence[str], *, feed: int = 0) -> None:
        pass

    def dropped(self, feed: int, offset: int, count: int) -> None:
        pass

    def update(self, update: Update) -> None:
        pass

    def resumed(self) -> None:
        pass


NO_EVENTS = NoEvents()
