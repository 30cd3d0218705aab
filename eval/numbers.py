"""Numbers right: how often a translation writes the source's numbers as the reference does.

A caption that writes "25,000" for 250.000 or "2.100" for 2,100 misleads its reader while BLEU
barely moves. Counted: each number of a source line that its reference repeats (in the
target's notation: German 2.100 as 2,100); right: the hypothesis has it too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from simulmt.output.numbers import NumberNotation

__all__ = ["number_counts", "number_rate"]

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def number_counts(
    sources: Sequence[str],
    references: Sequence[str],
    hypotheses: Sequence[str],
    *,
    src: str,
    tgt: str,
) -> tuple[int, int]:
    """(numbers written as the reference does, numbers the references repeat) over a set;
    `src`/`tgt`: the languages, whose notations (`NumberNotation`) may differ."""
    if not len(sources) == len(references) == len(hypotheses):
        raise ValueError(f"line counts differ: {len(sources)} sources, {len(references)} "
                         f"references, {len(hypotheses)} hypotheses")
    notation = NumberNotation.for_pair(src, tgt)
    right = total = 0
    for source, ref, hyp in zip(sources, references, hypotheses, strict=True):
        in_ref, in_hyp = set(_NUMBER.findall(ref)), set(_NUMBER.findall(hyp))
        for number in _NUMBER.findall(source):
            target = (notation.convert(number) if notation else None) or number
            if target in in_ref:
                total += 1
                right += target in in_hyp
    return right, total


def number_rate(
    sources: Sequence[str],
    references: Sequence[str],
    hypotheses: Sequence[str],
    *,
    src: str,
    tgt: str,
) -> float | None:
    """Percent of the numbers the references repeat that the hypotheses write as they do;
    None when the references repeat none."""
    right, total = number_counts(sources, references, hypotheses, src=src, tgt=tgt)
    return 100.0 * right / total if total else None
