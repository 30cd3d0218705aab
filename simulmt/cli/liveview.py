"""Live captions in a terminal, for `simulmt translate` (session `Update`s) and `simulmt client`
(protocol messages): one view, so both commands show a stream the same way.

No torch here: the client imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TextIO

from simulmt.output.updates import Update

DIM, RESET, CLEAR_LINE = "\x1b[2m", "\x1b[0m", "\r\x1b[K"


def render_live(committed: str, tentative: str, *, width: int, color: bool) -> str:
    """One terminal line: committed text, then the tentative tail (dim); the newest end if long."""
    committed, tentative = committed.strip(), tentative.strip()
    tail = (" " if committed and tentative else "") + tentative
    room = max(2, width - 1)  # the last column would wrap on some terminals
    if len(committed) + len(tail) > room:
        drop = len(committed) + len(tail) - (room - 1)  # characters cut, "…" takes one more
        if drop <= len(committed):
            committed = "…" + committed[drop:]
        else:
            tail, committed = tail[drop - len(committed) :], "…"
    if color and tail:
        return f"{committed}{DIM}{tail}{RESET}"
    return committed + tail


@dataclass
class LiveView:
    """Prints captions as they change: a live line redrawn in place when `live` (a terminal),
    else each finished sentence once (a pipe or a file gets finals only)."""

    out: TextIO
    _: KW_ONLY
    live: bool  # a terminal: redraw one line with \r
    width: int = 80
    committed: dict[int, str] = field(default_factory=dict)  # per unfinished sentence
    tentative: str = ""

    def partial(self, sentence_id: int, committed_delta: str, tentative: str) -> None:
        text = self.committed[sentence_id] = self.committed.get(sentence_id, "") + committed_delta
        self.tentative = tentative
        if self.live:
            line = render_live(text, tentative, width=self.width, color=True)
            self.out.write(CLEAR_LINE + line)

    def final(self, sentence_id: int, text: str) -> None:
        self.committed.pop(sentence_id, None)
        self.tentative = ""
        self.out.write((CLEAR_LINE if self.live else "") + text + "\n")

    def show(self, updates: Iterable[Update]) -> None:
        """A session's updates (`simulmt translate`)."""
        for u in updates:
            self.partial(u.sentence_id, u.committed_delta, u.tentative)
            if u.final:
                self.final(u.sentence_id, u.text)
        self.out.flush()

    def __call__(self, message: Mapping[str, Any]) -> None:
        """A protocol message (`simulmt client`'s `on_message`)."""
        kind = message.get("type")
        if kind == "partial":
            self.partial(message["sentence_id"], message["committed_delta"], message["tentative"])
        elif kind == "final":
            self.final(message["sentence_id"], message["text"])
        elif kind == "error":
            print(f"server error {message['code']}: {message['message']}", file=sys.stderr)
        self.out.flush()
