"""Flicker of re-translation output: how much displayed text is taken back.

Input is the sequence of hypotheses a viewer saw for one sentence, in order (committed plus
tentative text of every update, as word lists); the last one is the final output.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["common_prefix_length", "erasures", "normalized_erasure", "revisions_per_word"]


def common_prefix_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Number of leading words that ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def erasures(displays: Sequence[Sequence[str]]) -> list[int]:
    """Words erased at each display change: ``|o_{i−1}| − |LCP(o_i, o_{i−1})|`` for i = 2..I."""
    return [
        len(prev) - common_prefix_length(prev, cur)
        for prev, cur in zip(displays, displays[1:], strict=False)
    ]


def _final_length(displays: Sequence[Sequence[str]]) -> int:
    if len(displays) == 0:
        raise ValueError("displays is empty: give at least the final hypothesis")
    return max(len(displays[-1]), 1)  # an empty final output normalizes by 1, not 0


def normalized_erasure(displays: Sequence[Sequence[str]]) -> float:
    r"""Normalized Erasure (Arivazhagan et al. 2020, "Re-translation versus streaming for
    simultaneous translation", arXiv:1912.03393).

    ``NE = (1/|o_I|) Σ_{i=2..I} (|o_{i−1}| − |LCP(o_i, o_{i−1})|)``: words taken off the screen
    per word of final output (0 for a streaming system, which only appends). If the final
    output is empty the sum is divided by 1.
    """
    return sum(erasures(displays)) / _final_length(displays)


def revisions_per_word(displays: Sequence[Sequence[str]]) -> float:
    """Display changes that erase at least one word, per word of final output.

    Counts how often the viewer sees text change (not how much: that is NE); divided by
    ``max(|o_I|, 1)`` like NE.
    """
    return sum(1 for e in erasures(displays) if e > 0) / _final_length(displays)
