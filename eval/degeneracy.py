"""Degenerate-policy diagnostics of IWSLT 2026 (OmniSTEval 0.1.10's shortform scorer).

A *degenerate* simultaneous policy writes a few words early and the rest once the source is
over: its YAAL counts only the early words, so it looks fast while most of the output came
late. Polák et al. 2025 ("Better Late Than Never", arXiv:2509.17349) test for it by comparing
two fractions, both in percent:

- SWF, the Simultaneous Words Fraction: the share of output words written before the end of
  their source, ``100 · Σ #{t : d_t < |X|} / Σ |Y*|`` over the corpus (micro-average).
- EFSW, the Expected Fraction of Simultaneous Words: the share that a policy lagging YAAL words
  behind would write before the end, ``100 · Σ max(0, |X| − YAAL) / Σ |X|`` over the sentences
  that have a YAAL.
- DSPTV, the test value: ``EFSW − SWF`` (OmniSTEval's sign: its docstring says the reverse,
  its code computes this); the policy is flagged when ``|DSPTV| > 20``.

Pure functions over per-sentence statistics, like every metric here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["DEGENERACY_THRESHOLD", "Degeneracy", "SentenceEmission", "degeneracy"]

DEGENERACY_THRESHOLD = 20.0  # |DSPTV| above this (percentage points) flags the policy


class SentenceEmission(NamedTuple):
    """What the diagnostics need of one sentence."""

    words: int  # |Y*|: hypothesis words (0 for an empty hypothesis)
    early_words: int  # words written before the whole source was read (d_t < |X|)
    source_length: float  # |X|
    yaal: float | None  # its YAAL; None where undefined (nothing written before the end)


@dataclass(frozen=True)
class Degeneracy:
    swf: float  # %, Simultaneous Words Fraction
    efsw: float | None  # %, Expected Fraction of Simultaneous Words; None: no sentence has a YAAL
    dsptv: float | None  # EFSW − SWF, percentage points
    degenerate: bool  # |DSPTV| > DEGENERACY_THRESHOLD


def degeneracy(sentences: Iterable[SentenceEmission]) -> Degeneracy | None:
    """The corpus diagnostics; None when the corpus has no output words at all."""
    early = words = 0
    expected = total_source = 0.0
    for s in sentences:
        early += s.early_words
        words += s.words
        if s.yaal is not None and not math.isnan(s.yaal):
            expected += max(0.0, s.source_length - s.yaal)
            total_source += s.source_length
    if words == 0:
        return None
    swf = 100.0 * early / words
    efsw = 100.0 * expected / total_source if total_source > 0 else None
    dsptv = None if efsw is None else efsw - swf
    return Degeneracy(swf, efsw, dsptv, dsptv is not None and abs(dsptv) > DEGENERACY_THRESHOLD)
