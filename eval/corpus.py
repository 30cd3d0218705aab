"""Per-sentence latency statistics and their corpus means.

A corpus score is the mean of the sentence scores (as in SimulEval). Empty hypotheses have no
delays, so no AL: SimulEval 1.1.4 drops them from the mean with a warning, which flatters a
system that gives up on hard sentences. Here they are always counted in ``empty`` and, by
default (``EmptyHypothesis.FULL_LATENCY``), scored as an offline system that wrote after the
whole source: AL = LAAL = DAL = ATD = |X| words, AP = 1, CA-AL = CA-LAAL = the source duration
plus the compute time spent on the sentence, flicker as computed from the displays.
``EmptyHypothesis.SKIP`` reproduces SimulEval (left out of the latency means, still counted).

YAAL is the exception: by its definition (OmniSTEval's, IWSLT 2026) a sentence with no word
written before the end of its source, an empty one included, has no YAAL and is left out of
its mean whatever ``EmptyHypothesis`` says; ``yaal_scored`` says how many entered it. The
degeneracy diagnostics (`simulmt.eval.degeneracy`) say whether that flatters the policy.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

from simulmt.eval import flicker, latency
from simulmt.eval.degeneracy import SentenceEmission, degeneracy
from simulmt.eval.quality import SegmentStats

__all__ = [
    "CorpusLatency",
    "EmptyHypothesis",
    "LatencyConfig",
    "SentenceLatency",
    "SentenceStats",
    "TargetLength",
    "corpus_latency",
    "sentence_latency",
]


class TargetLength(enum.Enum):
    """Which |Y| AL and AP divide by."""

    REFERENCE = "reference"  # SimulEval's default (use_ref_len=True)
    HYPOTHESIS = "hypothesis"  # SimulEval's --no-use-ref-len, the original STACL definition


class EmptyHypothesis(enum.Enum):
    """How an empty hypothesis enters the latency means (it is always counted)."""

    FULL_LATENCY = "full-latency"  # scored as writing everything after the whole source
    SKIP = "skip"  # left out of the latency means, like SimulEval 1.1.4


@dataclass(frozen=True)
class LatencyConfig:
    target_length: TargetLength = TargetLength.REFERENCE  # SimulEval default: comparable to papers
    empty: EmptyHypothesis = EmptyHypothesis.FULL_LATENCY  # never let a give-up look fast
    rate: float = 2.5  # simulated speaking rate in source words/s (~150 words/min) for CA metrics

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 words/s, got {self.rate!r}")

    @property
    def ms_per_word(self) -> float:
        return 1000.0 / self.rate


@dataclass(frozen=True)
class SentenceStats:
    """What one simulated sentence produced: enough to compute every metric."""

    index: int
    source_length: int  # |X| in words
    reference: str
    prediction: str  # detokenized hypothesis; its whitespace words are the target words
    delays: tuple[int, ...]  # per target word: source words read when it was written
    compute_ms: tuple[float, ...] | None = None  # per word: model ms spent on the sentence so far
    sentence_compute_ms: float | None = None  # model ms spent on the whole sentence
    displays: tuple[str, ...] | None = None  # successive displayed texts (re-translation flicker)
    source: str = ""  # the source text, written to instances.log when known
    quality: SegmentStats | None = None  # its BLEU/chrF statistics, if the run computed them

    def __post_init__(self) -> None:
        n_words = len(self.prediction.split())
        if len(self.delays) != n_words:
            raise ValueError(
                f"sentence {self.index}: {len(self.delays)} delays for {n_words} hypothesis "
                "words; give exactly one delay per whitespace-separated word"
            )
        if self.source_length < 1:
            raise ValueError(f"sentence {self.index}: source_length must be >= 1")
        if any(not 1 <= d <= self.source_length for d in self.delays):
            raise ValueError(
                f"sentence {self.index}: delays must lie in 1..{self.source_length} "
                f"(source words read), got {list(self.delays)}"
            )
        if self.compute_ms is not None and len(self.compute_ms) != len(self.delays):
            raise ValueError(f"sentence {self.index}: compute_ms needs one entry per word")

    @property
    def reference_length(self) -> int:
        """|Y| in whitespace words, at least 1 (SimulEval also counts an empty reference as 1)."""
        return max(len(self.reference.split()), 1)


@dataclass(frozen=True)
class SentenceLatency:
    """The latency metrics of one sentence; None where not measurable."""

    index: int
    empty: bool
    al: float
    laal: float
    dal: float
    ap: float
    atd: float
    ca_al: float | None = None  # ms
    ca_laal: float | None = None  # ms
    normalized_erasure: float | None = None
    revisions_per_word: float | None = None
    yaal: float | None = None  # None: no word written before the end of the source
    ca_yaal: float | None = None  # ms
    words: int = 0  # |Y*|
    early_words: int = 0  # words written before the whole source was read (degeneracy)
    source_length: int = 0  # |X|

    def as_dict(self) -> dict[str, float | int | bool | None]:
        return asdict(self)


def _flicker(stats: SentenceStats) -> tuple[float | None, float | None]:
    if stats.displays is None:
        return None, None
    shown = [d.split() for d in stats.displays] or [stats.prediction.split()]
    return flicker.normalized_erasure(shown), flicker.revisions_per_word(shown)


def _empty_latency(stats: SentenceStats, config: LatencyConfig) -> SentenceLatency:
    x = float(stats.source_length)
    ca = None
    if stats.sentence_compute_ms is not None:
        ca = x * config.ms_per_word + stats.sentence_compute_ms
    ne, rpw = _flicker(stats)
    return SentenceLatency(
        stats.index, True, x, x, x, 1.0, x, ca, ca, ne, rpw, source_length=stats.source_length
    )


def sentence_latency(stats: SentenceStats, config: LatencyConfig) -> SentenceLatency:
    """Every latency metric of one sentence (see the module docstring for empty ones)."""
    if not stats.delays:
        return _empty_latency(stats, config)
    d, x, ref = stats.delays, stats.source_length, stats.reference_length
    y = ref if config.target_length is TargetLength.REFERENCE else len(d)
    ca_al = ca_laal = ca_yaal = None
    if stats.compute_ms is not None:
        ms = config.ms_per_word
        elapsed = latency.computation_aware_delays(d, stats.compute_ms, ms_per_word=ms)
        ca_al = latency.average_lagging(elapsed, x * ms, y)
        ca_laal = latency.length_adaptive_average_lagging(elapsed, x * ms, ref)
        ca_yaal = latency.yet_another_average_lagging(elapsed, x * ms, ref)
    ne, rpw = _flicker(stats)
    return SentenceLatency(
        index=stats.index,
        empty=False,
        al=latency.average_lagging(d, x, y),
        laal=latency.length_adaptive_average_lagging(d, x, ref),
        dal=latency.differentiable_average_lagging(d, x),
        ap=latency.average_proportion(d, x, y),
        atd=latency.average_token_delay(d, x),
        ca_al=ca_al,
        ca_laal=ca_laal,
        normalized_erasure=ne,
        revisions_per_word=rpw,
        yaal=latency.yet_another_average_lagging(d, x, ref),
        ca_yaal=ca_yaal,
        words=len(d),
        early_words=sum(1 for t in d if t < x),
        source_length=x,
    )


@dataclass(frozen=True)
class CorpusLatency:
    """Means over sentences; a metric is None when no sentence could be scored for it."""

    sentences: int
    empty: int  # empty hypotheses (always counted, whatever `EmptyHypothesis` says)
    scored: int  # sentences that entered the latency means
    al: float | None
    laal: float | None
    dal: float | None
    ap: float | None
    atd: float | None
    ca_al: float | None
    ca_laal: float | None
    normalized_erasure: float | None
    revisions_per_word: float | None
    yaal: float | None = None  # mean over the `yaal_scored` sentences that have one
    ca_yaal: float | None = None  # ms
    yaal_scored: int = 0
    swf: float | None = None  # %, degeneracy diagnostics (simulmt.eval.degeneracy)
    efsw: float | None = None  # %
    dsptv: float | None = None  # EFSW − SWF
    degenerate: bool | None = None  # |DSPTV| > 20; None: no output words to judge


_OWN_MEAN = ("yaal", "ca_yaal", "words", "early_words", "source_length")
_METRICS = [
    f.name for f in fields(SentenceLatency) if f.name not in ("index", "empty", *_OWN_MEAN)
]


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    if not present or len(present) != len(values):
        return None  # a metric missing for some sentences has no honest corpus mean
    return math.fsum(present) / len(present)


def corpus_latency(sentences: Sequence[SentenceLatency], config: LatencyConfig) -> CorpusLatency:
    """Mean of each metric over the sentences, with empty ones handled per `config.empty`."""
    empty = sum(1 for s in sentences if s.empty)
    used = [s for s in sentences if not (s.empty and config.empty is EmptyHypothesis.SKIP)]
    means = {name: _mean([getattr(s, name) for s in used]) for name in _METRICS}
    yaal = [s.yaal for s in sentences if s.yaal is not None]
    ca_yaal = [s.ca_yaal for s in sentences if s.ca_yaal is not None]
    diag = degeneracy(
        SentenceEmission(s.words, s.early_words, s.source_length, s.yaal) for s in sentences
    )
    return CorpusLatency(
        sentences=len(sentences),
        empty=empty,
        scored=len(used),
        **means,
        yaal=math.fsum(yaal) / len(yaal) if yaal else None,
        ca_yaal=math.fsum(ca_yaal) / len(ca_yaal) if ca_yaal else None,
        yaal_scored=len(yaal),
        swf=None if diag is None else diag.swf,
        efsw=None if diag is None else diag.efsw,
        dsptv=None if diag is None else diag.dsptv,
        degenerate=None if diag is None else diag.degenerate,
    )
