"""Long-form evaluation: each document streams through one session as one word sequence.

The session cuts the stream into sentences however it does (punctuation today, a boundary
detector with `auto` segmentation); the evaluator never looks at those cuts. It collects the
committed words with their delays (source words received in the document when written) and
model time, resegments them onto the reference sentences with minimum-WER alignment, and
scores BLEU/chrF on the resegmented sentences and StreamLAAL (`stream_latency`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simulmt.eval.corpus import LatencyConfig, SentenceStats
from simulmt.eval.documents import Document
from simulmt.eval.loops import loop_rate
from simulmt.eval.numbers import number_rate
from simulmt.eval.options import RunConfig
from simulmt.eval.quality import QualityScores, corpus_quality
from simulmt.eval.resegment import resegment
from simulmt.eval.splits import split_rate
from simulmt.eval.stream_latency import (
    SentenceStreamLatency,
    emission_times,
    sentence_stream_latency,
)

from simulmt.engine import Engine

__all__ = ["DocumentResult", "LongFormResult", "evaluate_long_form", "score_documents"]


@dataclass(frozen=True)
class DocumentResult:
    """One document: its stream output, resegmented, with per-sentence latency."""

    index: int
    document: Document
    stats: SentenceStats  # the whole stream as one "sentence" (delays over the document)
    elapsed_ms: tuple[float, ...] | None  # emission time of each hypothesis word
    segments: tuple[str, ...]  # the hypothesis resegmented: one per reference sentence
    latency: tuple[SentenceStreamLatency | None, ...]  # None: empty and skipped

    def record(self, *, ms_per_word: float) -> dict[str, object]:
        """Its instances.log line (SimulEval's keys for the whole stream, plus ours); `elapsed`
        is in source words like `delays` (as in the sentence-level log): ms / ms_per_word."""
        s = self.stats
        return {
            "index": self.index,
            "document": self.document.name,
            "prediction": s.prediction,
            "delays": list(s.delays),
            "elapsed": [e / ms_per_word for e in self.elapsed_ms]
            if self.elapsed_ms is not None
            else [0.0] * len(s.delays),
            "prediction_length": len(s.delays),
            "reference": " ".join(self.document.references),
            "source": s.source,
            "source_length": s.source_length,
            "sentence_offsets": self.document.offsets,
            "segments": list(self.segments),
            "references": list(self.document.references),
            "stream_laal": [None if x is None else x.stream_laal for x in self.latency],
            "ca_stream_laal": [None if x is None else x.ca_stream_laal for x in self.latency],
        }


@dataclass(frozen=True)
class LongFormResult:
    policy: str
    quality: QualityScores  # BLEU/chrF over all resegmented sentences
    stream_laal: float | None  # mean over sentences, source words
    # the median over sentences: the mean can be carried by a few sentences whose words the
    # resegmentation took from far away (degenerate, looping output); README, "Long-form results"
    stream_laal_median: float | None
    ca_stream_laal: float | None  # ms
    # LongYAAL (IWSLT 2026): mean over the sentences that have one (`long_yaal_scored`)
    long_yaal: float | None  # source words
    ca_long_yaal: float | None  # ms
    long_yaal_scored: int
    documents: int
    sentences: int
    empty: int  # reference sentences the hypothesis had no words for
    config: LatencyConfig
    wall_s: float
    # % of resegmented sentences that loop (simulmt.eval.loops), and % of those whose source
    # sentence is one that read as two or more (simulmt.eval.splits); None: not counted
    loops: float | None = None
    splits: float | None = None
    # % of the numbers the reference sentences repeat that the resegmented outputs write as
    # they do (simulmt.eval.numbers); None: none to count, or no languages given
    numbers: float | None = None

    def as_dict(self) -> dict[str, object]:
        q = self.quality
        return {
            "policy": self.policy,
            "bleu": q.bleu,
            "chrf": q.chrf,
            "bleu_signature": q.bleu_signature,
            "chrf_signature": q.chrf_signature,
            "stream_laal": self.stream_laal,
            "stream_laal_median": self.stream_laal_median,
            "ca_stream_laal": self.ca_stream_laal,
            "long_yaal": self.long_yaal,
            "ca_long_yaal": self.ca_long_yaal,
            "long_yaal_scored": self.long_yaal_scored,
            "documents": self.documents,
            "sentences": self.sentences,
            "empty": self.empty,
            "rate": self.config.rate,
            "empty_policy": self.config.empty.value,
            "wall_s": self.wall_s,
            "loops": self.loops,
            "splits": self.splits,
            "numbers": self.numbers,
        }


def _document_result(
    index: int, doc: Document, stats: SentenceStats, config: LatencyConfig, first_sentence: int
) -> DocumentResult:
    words = stats.prediction.split()
    spans = resegment(words, doc.references)
    elapsed = None
    if stats.compute_ms is not None:
        elapsed = tuple(
            emission_times(stats.delays, stats.compute_ms, ms_per_word=config.ms_per_word)
        )
    latency = []
    for s, ((lo, hi), offset, src, ref) in enumerate(
        zip(spans, doc.offsets, doc.sources, doc.references, strict=True)
    ):
        latency.append(
            sentence_stream_latency(
                first_sentence + s,
                stats.delays[lo:hi],
                elapsed[lo:hi] if elapsed else None,
                offset=offset,
                source_length=len(src),
                reference_length=max(1, len(ref.split())),
                config=config,
                stream_length=stats.source_length,
            )
        )
    segments = tuple(" ".join(words[lo:hi]) for lo, hi in spans)
    return DocumentResult(index, doc, stats, elapsed, segments, tuple(latency))


def _mean_present(values: Sequence[float | None]) -> float | None:
    """The mean of the values there are (YAAL leaves some sentences out by definition)."""
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    if not present or len(present) != len(values):
        return None
    return math.fsum(present) / len(present)


def score_documents(
    policy: str,
    documents: Sequence[Document],
    stats: Sequence[SentenceStats],
    config: LatencyConfig,
    *,
    wall_s: float = 0.0,
    languages: tuple[str, str] | None = None,
) -> tuple[LongFormResult, list[DocumentResult]]:
    """Resegment and score the stream outputs `stats` (one per document, same order).
    `languages` (source, target): count numbers right in their notations; None: not counted."""
    if len(stats) != len(documents):
        raise ValueError(f"{len(stats)} stream outputs for {len(documents)} documents")
    results, first = [], 0
    for i, (doc, st) in enumerate(zip(documents, stats, strict=True)):
        results.append(_document_result(i, doc, st, config, first))
        first += len(doc.references)
    hyps = [seg for r in results for seg in r.segments]
    refs = [ref for doc in documents for ref in doc.references]
    sentence_sources = [" ".join(s) for doc in documents for s in doc.sources]
    lat = [x for r in results for x in r.latency if x is not None]
    result = LongFormResult(
        policy=policy,
        quality=corpus_quality(hyps, refs),
        stream_laal=_mean([x.stream_laal for x in lat]),
        stream_laal_median=statistics.median(x.stream_laal for x in lat) if lat else None,
        ca_stream_laal=_mean([x.ca_stream_laal for x in lat]),
        long_yaal=_mean_present([x.long_yaal for x in lat]),
        ca_long_yaal=_mean_present([x.ca_long_yaal for x in lat]),
        long_yaal_scored=sum(1 for x in lat if x.long_yaal is not None),
        documents=len(documents),
        sentences=len(refs),
        empty=sum(1 for h in hyps if not h.split()),
        config=config,
        wall_s=wall_s,
        loops=loop_rate(hyps),
        splits=split_rate(sentence_sources, hyps),
        numbers=None if languages is None
        else number_rate(sentence_sources, refs, hyps, src=languages[0], tgt=languages[1]),
    )
    return result, results


def evaluate_long_form(
    engine: Engine,
    policy: str,
    documents: Sequence[Document],
    *,
    run_config: RunConfig | None = None,
    latency_config: LatencyConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[LongFormResult, list[DocumentResult]]:
    """Stream every document through a session under `policy` and score it."""
    from simulmt.eval.runner import simulate

    latency_config = latency_config or LatencyConfig()
    sources = [" ".join(doc.words) for doc in documents]
    references = [" ".join(doc.references) for doc in documents]
    sim = simulate(engine, policy, sources, references, config=run_config, progress=progress)
    return score_documents(
        policy, documents, sim.stats, latency_config, wall_s=sim.wall_s,
        languages=(engine.info.src, engine.info.tgt),
    )
