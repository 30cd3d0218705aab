"""Outputs split into two or more sentences: one source sentence in, one sentence out.

A simultaneous model that judges a short source prefix a complete sentence writes a stop and
starts again ("I saw a long letter yesterday. I wrote a long letter to my sister."). The share
of outputs with a sentence end followed by more words (`simulmt.output.sentence_ends`), counted over
the lines whose source has none inside it, measures how often that happens (and what the
engine's premature-stop rule, simulmt.search.stops, leaves of it). A source line counts as one
sentence only if neither the detector nor the engine's punctuation segmentation (which also
ends sentences at "…" and at "!" inside quotes: `simulmt.input.words.ends_sentence`) finds an
end inside it: where the engine cut the line, a second target sentence is no premature stop.
"""

from __future__ import annotations

from collections.abc import Sequence

from simulmt.input.words import ends_sentence
from simulmt.output.sentence_ends import inner_sentence_end

__all__ = ["one_sentence", "split_rate"]


def split_rate(sources: Sequence[str], hypotheses: Sequence[str]) -> float | None:
    """Percent of hypotheses with an inner sentence end, over the lines whose source has no
    inner sentence end; None if there is no such line."""
    if len(sources) != len(hypotheses):
        raise ValueError(f"{len(sources)} sources for {len(hypotheses)} hypotheses")
    single = [h for s, h in zip(sources, hypotheses, strict=True) if one_sentence(s)]
    if not single:
        return None
    return 100.0 * sum(inner_sentence_end(h) for h in single) / len(single)


def one_sentence(source: str) -> bool:
    """No sentence end inside `source`, by the detector or by the engine's segmentation."""
    words = source.split()
    return not inner_sentence_end(source) and not any(ends_sentence(w) for w in words[:-1])
