"""Resegment a document's hypothesis onto its reference sentences (minimum-WER alignment).

The alignment is `mweralign`'s (the AS-WER algorithm used by IWSLT's streaming evaluation and
FBK's simulstream), never our own. Both sides are tokenized with sacreBLEU's 13a tokenizer
first, so "mat." aligns with "mat ." (Post & Hoang 2025 find tokenized alignment more
accurate); a hypothesis word goes to the segment that holds its first token. The result is
a span of hypothesis words per reference sentence, so each word keeps its delay.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

__all__ = ["resegment"]

_TOKENIZE = Tokenizer13a()


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """mweralign's C++ core prints two lines per call to file descriptor 2: hide them."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _tokens(text: str) -> list[str]:
    return _TOKENIZE(text.strip()).split()


def resegment(hypothesis: Sequence[str], references: Sequence[str]) -> list[tuple[int, int]]:
    """Spans [start, end) of `hypothesis` (its words, in order), one per reference sentence;
    they tile the hypothesis. Empty spans are sentences the hypothesis has nothing for."""
    if not references:
        raise ValueError("resegment needs at least one reference sentence")
    if any("\n" in r for r in references):
        raise ValueError("a reference sentence must not contain a newline")
    if not hypothesis:
        return [(0, 0)] * len(references)
    pieces: list[str] = []
    first_piece: list[int] = []  # per hypothesis word: the index of its first token
    for word in hypothesis:
        first_piece.append(len(pieces))
        pieces += _tokens(word) or [word]
    from mweralign import align_texts  # imported late: it configures logging on import

    with _quiet_stderr():
        aligned = align_texts("\n".join(" ".join(_tokens(r)) for r in references), " ".join(pieces))
    segments = [line.split() for line in aligned.split("\n")]
    if len(segments) != len(references) or [t for s in segments for t in s] != pieces:
        raise RuntimeError(
            f"mweralign returned {len(segments)} segments for {len(references)} references "
            "and did not keep the hypothesis tokens unchanged"
        )
    spans, token_start = [], 0
    for seg in segments:
        token_end = token_start + len(seg)
        lo = bisect.bisect_left(first_piece, token_start)
        hi = bisect.bisect_left(first_piece, token_end)
        spans.append((lo, hi))
        token_start = token_end
    return spans
