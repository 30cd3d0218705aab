"""Latency metrics of one sentence, as pure functions of its delays.

Notation (one sentence): source ``X`` with ``|X|`` units, hypothesis ``Y*`` with ``|Y*|`` words,
reference ``Y`` with ``|Y|`` words, and delays ``d_1 … d_|Y*|``: ``d_t`` is the amount of source
read when target word ``t`` was written — a number of source *words* (1-based, at most ``|X|``)
for the plain metrics, a time in milliseconds for the computation-aware (CA) ones, where ``|X|``
is then the source duration in milliseconds. All formulas follow SimulEval 1.1.4
(``simuleval.evaluator.scorers.latency_scorer``) so that scores are comparable with papers;
the tests check agreement on random delay sequences.

Every function takes a non-empty delay sequence: an empty hypothesis has no delays, and how it
is scored is a corpus-level decision (see ``simulmt.eval.corpus``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "average_lagging",
    "average_proportion",
    "average_token_delay",
    "computation_aware_delays",
    "differentiable_average_lagging",
    "length_adaptive_average_lagging",
    "yet_another_average_lagging",
]


def _check(delays: Sequence[float], source_length: float, target_length: float) -> None:
    if len(delays) == 0:
        raise ValueError("delays is empty: latency is undefined for an empty hypothesis")
    if not source_length > 0:
        raise ValueError(f"source_length must be > 0, got {source_length!r}")
    if not target_length > 0:
        raise ValueError(f"target_length must be > 0, got {target_length!r}")
    bad = [d for d in delays if not (math.isfinite(d) and d >= 0)]
    if bad:
        raise ValueError(f"delays must be finite and >= 0, got {bad[0]!r}")


def _lagging(delays: Sequence[float], source_length: float, gamma: float) -> float:
    """(1/τ) Σ_{t=1..τ} (d_t − (t−1)/γ), τ = first t with d_t ≥ |X|; d_1 if d_1 > |X|."""
    if delays[0] > source_length:
        return float(delays[0])
    total = 0.0
    tau = 0
    for t_minus_1, d in enumerate(delays):
        total += d - t_minus_1 / gamma
        tau = t_minus_1 + 1
        if d >= source_length:
            break
    return total / tau


def average_lagging(delays: Sequence[float], source_length: float, target_length: float) -> float:
    r"""Average Lagging (Ma et al. 2019, STACL, arXiv:1810.08398), as SimulEval 1.1.x computes it.

    ``AL = (1/τ) Σ_{t=1..τ} (d_t − (t−1)/γ)`` with ``γ = target_length/|X|`` and
    ``τ = min{t : d_t ≥ |X|}`` (inclusive; ``τ = |Y*|`` if the source is never fully read).
    If ``d_1 > |X|`` (possible only for time-valued delays), ``AL = d_1``.

    ``target_length`` is the reference length ``|Y|`` in SimulEval's default
    (``use_ref_len=True``), or the hypothesis length ``|Y*|`` (``--no-use-ref-len``).
    """
    _check(delays, source_length, target_length)
    return _lagging(delays, source_length, target_length / source_length)


def length_adaptive_average_lagging(
    delays: Sequence[float], source_length: float, reference_length: float
) -> float:
    r"""Length-Adaptive Average Lagging (Papi et al. 2022, arXiv:2206.05807).

    AL with ``γ = max(|Y*|, |Y|)/|X|``: an over-long hypothesis cannot lower its lag by
    writing more words than the reference. Same τ and ``d_1 > |X|`` rule as AL.
    """
    _check(delays, source_length, reference_length)
    return _lagging(delays, source_length, max(len(delays), reference_length) / source_length)


def yet_another_average_lagging(
    delays: Sequence[float],
    source_length: float,
    reference_length: float,
    *,
    stream_end: float | None = None,
) -> float | None:
    r"""YAAL (Polák et al. 2025, "Better Late Than Never", arXiv:2509.17349), as OmniSTEval
    0.1.10 computes it (``omnisteval.scoring.YAALScorer``): the metric of IWSLT 2026.

    LAAL's ``γ = max(|Y*|, |Y|)/|X|``, but only the words written *before* the end of the
    source count: ``YAAL = (1/τ) Σ_{t=1..τ} (d_t − (t−1)/γ)`` with ``τ`` the number of leading
    words with ``d_t < |X|``. A word written once the whole source is in does not lower the
    lag of the others (AL's ``τ`` would include it). None (left out of the mean) when no word
    was written before the end: an offline or empty sentence has no simultaneous lag.

    ``stream_end`` gives LongYAAL, for a sentence cut out of a stream: the cut-off is the end
    of the stream (in the delays' unit, from the same origin) instead of the sentence's end,
    since a stream's later words can still be in flight when the sentence's source is over.
    Its delays count from the sentence's start and may be negative (a word the resegmentation
    put here was written before the sentence's source began).
    """
    if stream_end is None:
        _check(delays, source_length, reference_length)
    elif not (delays and source_length > 0 and all(math.isfinite(d) for d in delays)):
        raise ValueError("LongYAAL needs finite delays and source_length > 0")
    end = source_length if stream_end is None else stream_end
    gamma = max(len(delays), reference_length) / source_length
    total = 0.0
    tau = 0
    for t_minus_1, d in enumerate(delays):
        if d >= end:
            break
        total += d - t_minus_1 / gamma
        tau = t_minus_1 + 1
    return total / tau if tau else None


def differentiable_average_lagging(delays: Sequence[float], source_length: float) -> float:
    r"""Differentiable Average Lagging (Cherry & Foster 2019, arXiv:1906.05218).

    ``g'_1 = d_1``, ``g'_t = max(d_t, g'_{t−1} + 1/γ)`` with ``γ = |Y*|/|X|`` (always the
    hypothesis length, as in SimulEval), and ``DAL = (1/|Y*|) Σ_{t=1..|Y*|} (g'_t − (t−1)/γ)``.
    No cut-off at τ: every word counts, and words written together are spread 1/γ apart.
    """
    _check(delays, source_length, len(delays))
    gamma = len(delays) / source_length
    total = 0.0
    g_prime = 0.0
    for t_minus_1, d in enumerate(delays):
        g_prime = d if t_minus_1 == 0 else max(d, g_prime + 1 / gamma)
        total += g_prime - t_minus_1 / gamma
    return total / len(delays)


def average_proportion(
    delays: Sequence[float], source_length: float, target_length: float
) -> float:
    r"""Average Proportion (Cho & Esipova 2016, arXiv:1606.02012), as SimulEval computes it.

    ``AP = Σ_{t=1..|Y*|} d_t / (|X| · target_length)``; ``target_length`` is ``|Y|`` by
    default (SimulEval), ``|Y*|`` in the original paper — so with the reference length AP can
    exceed 1 when the hypothesis is longer than the reference.
    """
    _check(delays, source_length, target_length)
    return sum(delays) / (source_length * target_length)


def average_token_delay(delays: Sequence[int], source_length: int) -> float:
    r"""Average Token Delay for text input and output (Kano et al. 2023, arXiv:2211.13173).

    As SimulEval 1.1.4 computes it for text-to-text without computation time: every source and
    target word lasts one time unit; source word ``s`` ends at time ``s``. Words written at the
    same delay form a chunk ``c``; target word ``t`` starts at ``max(d_t, end_{t−1})`` and ends
    one unit later. It is paired with source word ``a(t) = min(t − max(0, Y_<c − X_<c), X_≤c)``
    (``Y_<c``, ``X_<c``: target/source words in earlier chunks, ``X_≤c`` up to chunk c), and
    ``ATD = (1/|Y*|) Σ_t (end_t − a(t))``. Delays must be non-decreasing word counts.
    """
    _check(delays, source_length, len(delays))
    if any(b < a for a, b in zip(delays, delays[1:], strict=False)):
        raise ValueError(f"ATD needs non-decreasing delays, got {list(delays)}")
    total = 0.0
    end = 0.0  # end time of the previous target word
    src_before = 0  # X_<c: source words read before the current chunk
    tgt_before = 0  # Y_<c: target words written before the current chunk
    prev = None
    for t, d in enumerate(delays, start=1):
        if d != prev:
            if prev is not None:
                src_before = prev
                tgt_before = t - 1
            prev = d
        end = max(float(d), end) + 1.0
        aligned = min(t - max(0, tgt_before - src_before), d)
        total += end - aligned
    return total / len(delays)


def computation_aware_delays(
    delays: Sequence[int], compute_ms: Sequence[float], *, ms_per_word: float
) -> list[float]:
    r"""Time-valued delays for the CA metrics, as SimulEval builds them for speech input.

    Source word ``j`` is fully spoken (has arrived) at ``j · ms_per_word`` ms after the speaker
    started, so the whole source lasts ``|X| · ms_per_word``; target word ``t`` is emitted at
    ``e_t = d_t · ms_per_word + c_t`` with ``c_t`` the model time spent on the sentence up to
    writing it (cumulative). Feed ``e`` and ``|X| · ms_per_word`` to AL / LAAL to get CA-AL /
    CA-LAAL in ms; with ``c = 0`` they equal the word-level values times ``ms_per_word``.
    """
    if len(compute_ms) != len(delays):
        raise ValueError(
            f"compute_ms has {len(compute_ms)} entries but delays has {len(delays)}: "
            "give one cumulative compute time per target word"
        )
    if not ms_per_word > 0:
        raise ValueError(f"ms_per_word must be > 0, got {ms_per_word!r}")
    return [d * ms_per_word + c for d, c in zip(delays, compute_ms, strict=True)]
