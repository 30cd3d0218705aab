"""What a connection's session asks of the model worker, and what comes back: plain data."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from simulmt.server.protocol import ProtocolError

from simulmt.output.updates import Update


class OpKind(enum.Enum):
    FEED = "feed"  # append words to the source stream
    END_SOURCE = "end_source"  # the current sentence's source is complete


class Marker(enum.Enum):
    END = "end"  # the client's `end` has been processed
    SHUTDOWN = "shutdown"  # the server's graceful stop has been processed


@dataclass(frozen=True)
class Op:
    kind: OpKind
    words: tuple[str, ...] = ()
    marker: Marker | None = None  # handed back with the updates once this op has been advanced
    checked: bool = False  # the rest of a FEED whose words were already checked (a sliced paste)
    feed: int = 0  # FEED: which `source` message of its session these words came in (1, 2, ...)
    offset: int = 0  # FEED: the position of words[0] in that message (slices of a long paste)


@dataclass(frozen=True)
class Delivery:
    updates: list[Update]
    markers: list[Marker]  # markers of the ops applied before these updates were computed
    rejected: list[ProtocolError] = field(default_factory=list)  # FEED ops dropped whole
    error: BaseException | None = None  # the session failed; it cannot go on
    words_taken: int = 0  # source words of FEED ops consumed (fed or dropped)
    # the words of those dropped ops: (feed, offset, count) as in `Op`
    dropped: list[tuple[int, int, int]] = field(default_factory=list)
