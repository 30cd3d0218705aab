"""Beam search pieces: scoring formulas, pruning, stopping, speculative commits."""

from __future__ import annotations

import math

import pytest
import torch

from simulmt.engine import Engine
from simulmt.model.state import BeamState, Hypothesis
from simulmt.search.beam import expand, finished, score
from simulmt.search.options import Scoring, SearchOptions, Stopping
from simulmt.search.step import StepResult
from simulmt.session import Session
from simulmt.vocab import EOS_ID

V = 10


def step_with(log_probs: list[list[float]]) -> StepResult:
    lp = torch.log_softmax(torch.tensor(log_probs), dim=-1)  # (Bm, V)
    n = lp.shape[0]
    kv = torch.zeros(2, n, 1, 1, 2)  # (2L, Bm, H, 1, dh), one layer
    return StepResult.of(log_probs=lp, self_kv=kv, state=torch.zeros(n, 4))


@pytest.mark.parametrize(
    ("scoring", "expected"),
    [
        (Scoring.NONE, -6.0),
        (Scoring.LENGTH_REWARD, -6.0 + 0.5 * 4),
        (Scoring.BOUNDED_LENGTH_REWARD, -6.0 + 0.5 * min(4, 1.2 * 2)),
        (Scoring.LENGTH_NORM, -6.0 / 4),
        (Scoring.GNMT, -6.0 / ((5 + 4) ** 0.6 / 6**0.6)),
    ],
)
def test_scoring_formulas(scoring: Scoring, expected: float) -> None:
    opts = SearchOptions(scoring=scoring, length_reward=0.5)
    assert score(opts, -6.0, 4, 2) == pytest.approx(expected)


def test_coverage_penalty() -> None:
    opts = SearchOptions(scoring=Scoring.NONE, beta=0.2)
    assert score(opts, -1.0, 3, 2, (0.5, 2.0)) == pytest.approx(-1.0 + 0.2 * math.log(0.5))


def test_histogram_pruning_keeps_beam_size() -> None:
    beam = BeamState.start()
    expand(
        beam, step_with([[0.0] * V]), SearchOptions(beam=3), allow_eos=False, max_len=10, src_len=3
    )
    assert beam.size == 3


def test_relative_threshold_prunes_unlikely_candidates() -> None:
    logits = [[0.0, 0.0, 0.0, 0.0, 5.0, 4.9, 0.0, 0.0, 0.0, 0.0]]
    for rel, expected in ((0.5, 2), (0.95, 1)):
        beam = BeamState.start()
        opts = SearchOptions(beam=5, rel_threshold=rel)
        expand(beam, step_with(logits), opts, allow_eos=False, max_len=10, src_len=3)
        assert beam.size == expected


def test_absolute_threshold() -> None:
    logits = [[0.0, 0.0, 0.0, 0.0, 5.0, 4.0, 3.0, 0.0, 0.0, 0.0]]
    beam = BeamState.start()
    expand(
        beam,
        step_with(logits),
        SearchOptions(beam=5, abs_threshold=1.5),
        allow_eos=False,
        max_len=10,
        src_len=3,
    )
    assert beam.tokens[:, 1].tolist() == [4, 5]


def test_eos_is_masked_until_the_source_is_complete() -> None:
    logits = [[0.0] * V]
    logits[0][EOS_ID] = 10.0
    beam = BeamState.start()
    expand(beam, step_with(logits), SearchOptions(beam=2), allow_eos=False, max_len=10, src_len=3)
    assert EOS_ID not in beam.tokens[:, 1].tolist() and not beam.complete
    beam = BeamState.start()
    expand(beam, step_with(logits), SearchOptions(beam=2), allow_eos=True, max_len=10, src_len=3)
    assert len(beam.complete) == 1


def test_max_length_forces_the_end() -> None:
    beam = BeamState.start([5, 6])
    expand(beam, step_with([[0.0] * V]), SearchOptions(), allow_eos=True, max_len=2, src_len=3)
    assert beam.size == 0 and [h.tokens for h in beam.complete] == [(5, 6)]


@pytest.mark.parametrize(
    ("stopping", "n_done", "expected"),
    [
        (Stopping.N_COMPLETE, 1, False),
        (Stopping.N_COMPLETE, 2, True),
        (Stopping.TOP_COMPLETE, 1, True),
        (Stopping.EARLY, 1, True),
    ],
)
def test_stopping_rules(stopping: Stopping, n_done: int, expected: bool) -> None:
    opts = SearchOptions(beam=2, stopping=stopping, scoring=Scoring.NONE)
    beam = BeamState.start([5])
    beam.token_lp = torch.tensor([[-3.0]])
    beam.complete = [Hypothesis((7,), -1.0, -1.0)] * n_done
    assert finished(beam, opts, 3) is expected


def test_speculative_lookahead_keeps_the_guarantees() -> None:
    engine = Engine.tiny(0)
    text = "Der Hund läuft schnell über die Straße ."
    outs: dict[int, list[int]] = {}
    for w in (1, 3):
        s = Session(engine, policy="wait-k:k=2", options=SearchOptions(beam=3, lookahead=w))
        ups = [u for word in text.split() for u in s.push(word)] + s.finish()
        final = [u for u in ups if u.final]
        assert len(final) == 1 and final[0].text == "".join(u.committed_delta for u in ups).strip()
        outs[w] = [d for u in ups for d in u.delays]
        assert outs[w] == sorted(outs[w]) and all(1 <= d <= 8 for d in outs[w])


def test_time_budget_ends_the_sentence() -> None:
    engine = Engine.tiny(0)
    s = Session(engine, policy="full", options=SearchOptions(beam=4, time_budget_ms=1e-6))
    ups = s.push("Der Hund läuft schnell über die Straße .")
    assert ups[-1].final
