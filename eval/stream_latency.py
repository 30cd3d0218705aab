"""StreamLAAL (Papi et al., ACL 2024): latency of an unsegmented stream, per reference sentence.

After resegmentation (`simulmt.eval.resegment`), sentence s owns some hypothesis words; their
delays count source words read since the start of the stream. StreamLAAL of s is LAAL with
every delay shifted to the start of s's source words, d - o_s, over s's source length |X_s|
and reference length |Y_s|: γ = max(|Y*_s|, |Y_s|)/|X_s|, and LAAL's τ cut-off at |X_s|. A word
the resegmentation puts in s but that was written before s's source began has a negative
delay, as in simulstream's implementation (no clipping). The corpus figure is the mean over
sentences. A sentence with no hypothesis words is counted per `EmptyHypothesis`: at its full
source length (default) or left out (simulstream and SimulEval skip it).

CA-StreamLAAL uses emission times in ms instead (`emission_times`), shifted by the sentence's
start time o_s · ms_per_word, over |X_s| · ms_per_word.

LongYAAL (Polák et al. 2025; OmniSTEval's long-form latency, IWSLT 2026) is YAAL on the same
shifted delays with the end of the *stream* as cut-off instead of the sentence's end
(`latency.yet_another_average_lagging`); a sentence with no word before the stream's end (an
empty one included) has none and is left out of the mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from simulmt.eval.corpus import EmptyHypothesis, LatencyConfig
from simulmt.eval.latency import _lagging, yet_another_average_lagging

__all__ = ["SentenceStreamLatency", "emission_times", "sentence_stream_latency", "stream_laal"]


def stream_laal(
    delays: Sequence[float], offset: float, source_length: float, reference_length: int
) -> float:
    """LAAL of one resegmented sentence: `delays` count from the start of the stream and are
    shifted by `offset` (the source read before this sentence, same unit as the delays)."""
    if not delays:
        raise ValueError("delays is empty: StreamLAAL of an empty segment is a corpus decision")
    if not source_length > 0:
        raise ValueError(f"source_length must be > 0, got {source_length!r}")
    if not all(math.isfinite(d) for d in delays):
        raise ValueError("delays must be finite")
    shifted = [d - offset for d in delays]
    gamma = max(len(delays), reference_length, 1) / source_length
    return _lagging(shifted, source_length, gamma)


def emission_times(
    delays: Sequence[int], compute_ms: Sequence[float], *, ms_per_word: float
) -> list[float]:
    """When each target word of a stream comes out, in ms since the stream began.

    Source word j arrives at j · ms_per_word. The engine works serially: the model time spent
    between writing word t-1 and word t (the increase of the cumulative `compute_ms`) starts
    once word t-1 is out and the source word that word t waited for (d_t) has arrived:
    e_t = max(e_{t-1}, d_t · ms_per_word) + (c_t − c_{t−1}). Unlike the sentence-level CA
    delays (d_t · ms + c_t, with c_t summed from the sentence start), idle time while waiting
    for the speaker is not charged, which matters in a stream of hundreds of words."""
    if len(compute_ms) != len(delays):
        raise ValueError(f"compute_ms has {len(compute_ms)} entries, delays {len(delays)}")
    if not ms_per_word > 0:
        raise ValueError(f"ms_per_word must be > 0, got {ms_per_word!r}")
    out: list[float] = []
    last, spent = 0.0, 0.0
    for d, c in zip(delays, compute_ms, strict=True):
        last = max(last, d * ms_per_word) + max(0.0, c - spent)
        spent = max(spent, c)
        out.append(last)
    return out


@dataclass(frozen=True)
class SentenceStreamLatency:
    index: int  # reference sentence, counted over all documents
    empty: bool  # the resegmentation gave it no hypothesis words
    stream_laal: float  # source words
    ca_stream_laal: float | None  # ms
    long_yaal: float | None = None  # source words; None: nothing written before the stream end
    ca_long_yaal: float | None = None  # ms


def sentence_stream_latency(
    index: int,
    delays: Sequence[int],
    elapsed_ms: Sequence[float] | None,
    *,
    offset: int,
    source_length: int,
    reference_length: int,
    config: LatencyConfig,
    stream_length: int | None = None,
) -> SentenceStreamLatency | None:
    """One sentence's StreamLAAL, CA-StreamLAAL and (given the stream's length in source
    words) LongYAAL; None for an empty one that `config` skips."""
    ms = config.ms_per_word
    if not delays:
        if config.empty is EmptyHypothesis.SKIP:
            return None
        full = float(source_length)
        return SentenceStreamLatency(
            index, True, full, full * ms if elapsed_ms is not None else None
        )
    ca = ca_yaal = yaal = None
    if elapsed_ms is not None:
        ca = stream_laal(elapsed_ms, offset * ms, source_length * ms, reference_length)
    laal = stream_laal(delays, offset, source_length, reference_length)
    if stream_length is not None:
        end = stream_length - offset
        yaal = yet_another_average_lagging(
            [d - offset for d in delays], source_length, reference_length, stream_end=end
        )
        if elapsed_ms is not None:
            ca_yaal = yet_another_average_lagging(
                [e - offset * ms for e in elapsed_ms], source_length * ms, reference_length,
                stream_end=end * ms,
            )
    return SentenceStreamLatency(index, False, laal, ca, yaal, ca_yaal)
