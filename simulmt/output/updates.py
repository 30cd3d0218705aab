"""What a streaming session emits: one `Update` each time its visible output changes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Update:
    """A change of a stream's output.

    `committed_delta` is new committed text (never retracted) to append, with its own leading
    space where it continues a word sequence; `tentative` replaces the previous tentative tail.
    `delays[w]` is the number of source words read when the w-th newly committed word was
    written (1-based, <= |x|); `emitted_ms[w]` is its wall-clock emit time in milliseconds since
    the sentence's first source word arrived. `final` is set on the last update of a sentence,
    whose `text` is then the whole committed sentence and `source` its source text.
    """

    sentence_id: int
    committed_delta: str
    committed_len: int  # words committed in this sentence so far, including the delta
    tentative: str
    delays: tuple[int, ...] = ()
    emitted_ms: tuple[float, ...] = ()
    compute_ms: tuple[
        float, ...
    ] = ()  # model time spent on this sentence when each word was written
    final: bool = False
    text: str = ""  # the sentence's whole committed text, set when final
    source: str = ""  # the sentence's source text, set when final
