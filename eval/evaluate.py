"""One policy over a test set, scored: what `simulmt eval` computes for one row of its table,
callable from Python with a spec string or a policy object (a notebook's class needs no
registration). `simulmt eval` runs each of its policies through `evaluate`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simulmt.eval.corpus import (
    LatencyConfig,
    SentenceLatency,
    SentenceStats,
    corpus_latency,
    sentence_latency,
)
from simulmt.eval.loops import loop_rate
from simulmt.eval.numbers import number_rate
from simulmt.eval.options import RunConfig
from simulmt.eval.quality import QualityScores, corpus_quality, quality_from_statistics
from simulmt.eval.report import PolicyResult
from simulmt.eval.runner import simulate
from simulmt.eval.splits import split_rate
from simulmt.policies.base import Policy

from simulmt.engine import Engine


@dataclass(frozen=True)
class Evaluation:
    """The corpus scores (the table's row) and what they were computed from."""

    result: PolicyResult
    stats: list[SentenceStats]  # per sentence, in test-set order: output, delays, times
    sentences: list[SentenceLatency]  # per sentence: AL, LAAL, YAAL, DAL, AP, …


def evaluate(
    engine: Engine,
    policy: str | Policy,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    config: RunConfig | None = None,
    latency: LatencyConfig | None = None,
    labels: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Evaluation:
    """Stream every source line through a session under `policy` and score the outputs
    against `references` (one line each): BLEU and chrF with sacreBLEU's signatures, the
    latency metrics, loop and split shares, numbers right; per label too when `labels` gives
    one per line.
    `config` holds the search and session options (`simulmt eval`'s defaults), `latency`
    how latency is scored. ValueError if the lines do not pair up or one cannot be read."""
    config = config or RunConfig()
    latency = latency or LatencyConfig()
    if labels is not None and len(labels) != len(sources):
        raise ValueError(f"{len(labels)} labels for {len(sources)} source lines")
    sim = simulate(engine, policy, sources, references, config=config, progress=progress)
    sentences = [sentence_latency(s, latency) for s in sim.stats]
    predictions = [s.prediction for s in sim.stats]
    result = PolicyResult(
        policy=policy if isinstance(policy, str) else _spec(policy),
        quality=_quality(sim.stats, references),
        latency=corpus_latency(sentences, latency),
        config=latency,
        beam=config.beam,  # the search the run used, as it used it
        scoring=config.scoring.value,
        alpha=config.alpha,
        beta=config.beta,
        speculate=config.speculate,
        unit=config.unit.value,
        wall_s=sim.wall_s,
        loops=loop_rate(predictions),
        splits=split_rate(sources, predictions),
        numbers=number_rate(
            sources, references, predictions, src=engine.info.src, tgt=engine.info.tgt
        ),
        groups=None if labels is None
        else _group_scores(labels, sim.stats, sentences, references, latency),  # fmt: skip
    )
    return Evaluation(result, sim.stats, sentences)


def _spec(policy: Policy) -> str:
    """A policy object's spec string (`BasePolicy.spec()`), or its class name without one."""
    spec = getattr(policy, "spec", None)
    return str(spec()) if callable(spec) else type(policy).__name__


def _quality(stats: Sequence[SentenceStats], references: Sequence[str]) -> QualityScores:
    """Corpus BLEU/chrF: summed from the statistics the jobs computed, or computed here."""
    seg = [s.quality for s in stats]
    if all(q is not None for q in seg):
        return quality_from_statistics([q for q in seg if q is not None])
    return corpus_quality([s.prediction for s in stats], list(references))


def _group_scores(
    labels: Sequence[str],
    stats: Sequence[SentenceStats],
    sentences: Sequence[SentenceLatency],
    references: Sequence[str],
    config: LatencyConfig,
) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for label in sorted(set(labels)):
        idx = [i for i, lab in enumerate(labels) if lab == label]
        quality = _quality([stats[i] for i in idx], [references[i] for i in idx])
        lat = corpus_latency([sentences[i] for i in idx], config)
        out[label] = {
            "bleu": quality.bleu,
            "chrf": quality.chrf,
            "al": lat.al,
            "laal": lat.laal,
            "sentences": len(idx),
        }
    return out
