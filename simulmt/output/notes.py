"""A list of human-readable notes with a memory bound: a session that runs for hours warns
about its input now and then, and nobody may read the notes for a long time (the server never
does). The oldest notes go first once the count or the size passes its cap."""

from __future__ import annotations

MAX_NOTES = 256  # notes kept
MAX_BYTES = 64 * 1024  # characters kept, all notes together
MAX_NOTE = 1000  # characters of one note (a note may quote many words)


class Notes(list[str]):
    """`append` keeps the newest notes within MAX_NOTES and MAX_BYTES; `dropped` counts the
    rest. Read and clear it as a list."""

    def __init__(self, *, max_notes: int = MAX_NOTES, max_bytes: int = MAX_BYTES) -> None:
        super().__init__()
        self.max_notes, self.max_bytes = max_notes, max_bytes
        self.size = 0  # characters held
        self.dropped = 0  # notes dropped to stay within the caps

    def append(self, note: str) -> None:
        note = note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 1] + "…"
        super().append(note)
        self.size += len(note)
        while len(self) > 1 and (len(self) > self.max_notes or self.size > self.max_bytes):
            self.size -= len(self.pop(0))
            self.dropped += 1

    def clear(self) -> None:
        super().clear()
        self.size = 0
