"""WebVTT and SRT captions from finished sentences, as pure functions.

Input: one `TimedSentence` per `final` message, with the time at which each of its words was
emitted (ms on the stream's clock). Each sentence is wrapped into lines of at most
`max_line_chars` characters and cut into cues of at most `max_lines` lines. A cue appears when
its first word was emitted and stays for its reading time (`chars_per_second`), at least
`min_duration_ms`, at most `max_duration_ms`, and never past the next cue's start: cues are
sorted and never overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TimedSentence:
    words: tuple[str, ...]
    times_ms: tuple[float, ...]  # emission time of each word, same length as `words`

    def __post_init__(self) -> None:
        if len(self.words) != len(self.times_ms):
            raise ValueError(
                f"TimedSentence needs one time per word: {len(self.words)} words, "
                f"{len(self.times_ms)} times"
            )


@dataclass(frozen=True)
class CueConfig:
    max_line_chars: int = 42  # the BBC/Netflix line limit
    max_lines: int = 2  # more lines cover the picture
    chars_per_second: float = 17.0  # comfortable adult reading speed
    min_duration_ms: int = 1000  # shorter flashes are unreadable
    max_duration_ms: int = 7000  # a cue standing longer looks stuck

    def __post_init__(self) -> None:
        if self.max_line_chars < 1 or self.max_lines < 1:
            raise ValueError("max_line_chars and max_lines must be >= 1")
        if self.chars_per_second <= 0:
            raise ValueError("chars_per_second must be > 0")
        if not 1 <= self.min_duration_ms <= self.max_duration_ms:
            raise ValueError("need 1 <= min_duration_ms <= max_duration_ms")


@dataclass(frozen=True)
class Cue:
    start_ms: int
    end_ms: int  # > start_ms
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def wrap_words(words: Sequence[str], max_chars: int) -> list[list[str]]:
    """Greedy line wrap; a word longer than a line is cut into line-sized pieces."""
    lines: list[list[str]] = []
    current: list[str] = []
    width = 0
    for word in words:
        pieces = [word[i : i + max_chars] for i in range(0, len(word), max_chars)] or [word]
        for piece in pieces:
            needed = len(piece) if not current else width + 1 + len(piece)
            if current and needed > max_chars:
                lines.append(current)
                current, width = [], 0
                needed = len(piece)
            current.append(piece)
            width = needed
    if current:
        lines.append(current)
    return lines


@dataclass(frozen=True)
class _Chunk:
    lines: tuple[str, ...]
    first_ms: float  # emission time of the chunk's first word


def _chunks(sentence: TimedSentence, config: CueConfig) -> list[_Chunk]:
    wrapped = wrap_words(sentence.words, config.max_line_chars)
    # the time of each line's first piece: walk the words as wrap_words cut them
    piece_times: list[float] = []
    for word, t in zip(sentence.words, sentence.times_ms, strict=True):
        n = max(1, -(-len(word) // config.max_line_chars))
        piece_times.extend([t] * n)
    chunks: list[_Chunk] = []
    k = 0  # index of the next piece
    for i in range(0, len(wrapped), config.max_lines):
        group = wrapped[i : i + config.max_lines]
        chunks.append(_Chunk(tuple(" ".join(line) for line in group), piece_times[k]))
        k += sum(len(line) for line in group)
    return chunks


def build_cues(sentences: Sequence[TimedSentence], *, config: CueConfig | None = None) -> list[Cue]:
    """Cut sentences into timed cues; see the module docstring for the timing rules."""
    config = config or CueConfig()
    chunks = [c for s in sentences for c in _chunks(s, config)]
    cues: list[Cue] = []
    start = 0
    for i, chunk in enumerate(chunks):
        start = max(round(chunk.first_ms), cues[-1].end_ms if cues else 0)
        chars = sum(len(line) for line in chunk.lines)
        reading = round(1000 * chars / config.chars_per_second)
        end = start + min(max(reading, config.min_duration_ms), config.max_duration_ms)
        if i + 1 < len(chunks):  # make room for the next cue once this one was readable a while
            end = min(end, max(round(chunks[i + 1].first_ms), start + config.min_duration_ms))
        cues.append(Cue(start, max(end, start + 1), chunk.lines))
    return cues


def _timestamp(ms: int, sep: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{sep}{millis:03d}"


def _vtt_escape(line: str) -> str:
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_webvtt(cues: Sequence[Cue]) -> str:
    """A WebVTT file: header, then `start --> end` and the escaped lines of each cue."""
    blocks = ["WEBVTT\n"]
    for cue in cues:
        timing = f"{_timestamp(cue.start_ms, '.')} --> {_timestamp(cue.end_ms, '.')}"
        blocks.append("\n".join([timing, *(_vtt_escape(line) for line in cue.lines)]) + "\n")
    return "\n".join(blocks)


def to_srt(cues: Sequence[Cue]) -> str:
    """An SRT file: 1-based index, `start --> end` with comma millis, lines, blank line."""
    blocks = []
    for n, cue in enumerate(cues, start=1):
        timing = f"{_timestamp(cue.start_ms, ',')} --> {_timestamp(cue.end_ms, ',')}"
        lines = (line.replace("-->", "->") for line in cue.lines)  # "-->" would read as timing
        blocks.append("\n".join([str(n), timing, *lines]) + "\n")
    return "\n".join(blocks)
