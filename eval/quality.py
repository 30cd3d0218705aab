"""Translation quality: sacreBLEU's corpus BLEU and chrF, each with its signature."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.bleu import BLEUScore
from sacrebleu.metrics.chrf import CHRFScore

__all__ = [
    "QualityConfig",
    "QualityScores",
    "SegmentStats",
    "corpus_quality",
    "quality_from_statistics",
    "segment_statistics",
]


@dataclass(frozen=True)
class QualityConfig:
    tokenize: str = "13a"  # sacreBLEU's default BLEU tokenizer (WMT standard)
    lowercase: bool = False  # case-sensitive, like sacreBLEU's default


@dataclass(frozen=True)
class QualityScores:
    bleu: float
    chrf: float
    bleu_signature: str  # e.g. nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
    chrf_signature: str
    bleu_detail: str  # the full sacreBLEU line: n-gram precisions, BP, lengths


@dataclass(frozen=True)
class SegmentStats:
    """One sentence's sufficient statistics for corpus BLEU and chrF (sacreBLEU's, e.g. BLEU's
    hypothesis/reference lengths and n-gram matches): corpus scores are functions of their sums,
    so parallel evaluation jobs compute them for their own sentences and the caller adds them."""

    bleu: tuple[int, ...]
    chrf: tuple[int, ...]


def _metrics(config: QualityConfig) -> tuple[BLEU, CHRF]:
    return BLEU(tokenize=config.tokenize, lowercase=config.lowercase), CHRF(
        lowercase=config.lowercase
    )


def _scores(bleu: BLEU, chrf: CHRF, b: BLEUScore, c: CHRFScore) -> QualityScores:
    return QualityScores(
        bleu=b.score,
        chrf=c.score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        bleu_detail=str(b),
    )


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: need one each"
        )
    if not hypotheses:
        raise ValueError("no sentences to score")


def segment_statistics(
    hypotheses: Sequence[str], references: Sequence[str], *, config: QualityConfig | None = None
) -> list[SegmentStats]:
    """Per sentence, the BLEU and chrF statistics of `corpus_quality` (same preprocessing)."""
    _check(hypotheses, references)
    bleu, chrf = _metrics(config or QualityConfig())
    hyps = [h.strip() for h in hypotheses]
    refs = [[r.strip() for r in references]]
    # sacreBLEU's corpus_score is exactly: these per-segment statistics, summed, then scored
    b = bleu._extract_corpus_statistics(hyps, refs)
    c = chrf._extract_corpus_statistics(hyps, refs)
    return [SegmentStats(tuple(x), tuple(y)) for x, y in zip(b, c, strict=True)]


def quality_from_statistics(
    stats: Sequence[SegmentStats], *, config: QualityConfig | None = None
) -> QualityScores:
    """Corpus BLEU and chrF from the sentences' statistics: equal to `corpus_quality` of the
    same sentences (one reference each)."""
    if not stats:
        raise ValueError("no sentences to score")
    bleu, chrf = _metrics(config or QualityConfig())
    bleu.num_refs = chrf.num_refs = 1  # for the signatures (corpus_score learns it from refs)
    b = bleu._aggregate_and_compute([list(s.bleu) for s in stats])
    c = chrf._aggregate_and_compute([list(s.chrf) for s in stats])
    return _scores(bleu, chrf, b, c)


def corpus_quality(
    hypotheses: Sequence[str], references: Sequence[str], *, config: QualityConfig | None = None
) -> QualityScores:
    """Corpus BLEU and chrF of detokenized ``hypotheses`` against one reference each.

    Empty hypotheses stay in (they score zero matches); lines are stripped of surrounding
    whitespace (a trailing newline would otherwise reach the tokenizer).
    """
    _check(hypotheses, references)
    config = config or QualityConfig()
    hyps = [h.strip() for h in hypotheses]
    refs = [[r.strip() for r in references]]
    bleu, chrf = _metrics(config)
    b = bleu.corpus_score(hyps, refs)
    c = chrf.corpus_score(hyps, refs)
    return _scores(bleu, chrf, b, c)
