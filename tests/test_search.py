"""Beam search pieces: scoring formulas, pruning, stopping, speculative commits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from simulmt.policies import (
    DEFAULT_AGREEMENT,
    Action,
    AgreementPolicy,
    ChunkedPolicy,
    CommitMode,
    Observation,
    Policy,
    PolicyError,
    Signal,
    load_policy,
)
from simulmt.policies.heuristic import LocalAgreement

from simulmt.data.vocab import BOS_ID, EOS_ID
from simulmt.engine import Engine
from simulmt.model.cache import StepKV
from simulmt.search.beam import expand, finished, score
from simulmt.search.online import OnlineSearch
from simulmt.search.options import Scoring, SearchOptions, Stopping
from simulmt.search.state import BeamState, Hypothesis, StreamState
from simulmt.search.step import StepResult
from simulmt.session import Session

V = 10


def step_with(beam: BeamState, log_probs: list[list[float]]) -> StepResult:
    """A decoder step's result for `beam` with these log-probabilities (its K/V staged in the
    beam's cache, as `run_step` leaves it)."""
    lp = torch.log_softmax(torch.tensor(log_probs), dim=-1)  # (Bm, V)
    n = lp.shape[0]
    kv = torch.zeros(2, n, 1, 1, 2)  # (2L, Bm, H, 1, dh), one layer
    beam.cache.stage(StepKV(kv), 0, n)
    return StepResult.of(log_probs=lp, self_kv=kv, state=torch.zeros(n, 4))


@pytest.mark.parametrize(
    ("scoring", "expected"),
    [
        (Scoring.NONE, -6.0),
        (Scoring.LENGTH_REWARD, -6.0 + 0.5 * 4),
        (Scoring.BOUNDED_LENGTH_REWARD, -6.0 + 0.5 * min(4, 1.2 * 2)),
        (Scoring.LENGTH_NORM, -6.0 / 4),
        (Scoring.GNMT, -6.0 / ((5 + 4) ** 2.0 / 6**2.0)),  # default alpha 2.0
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
    opts = SearchOptions(beam=3)
    expand(beam, step_with(beam, [[0.0] * V]), opts, allow_eos=False, max_len=10, src_len=3)
    assert beam.size == 3


def test_relative_threshold_prunes_unlikely_candidates() -> None:
    logits = [[0.0, 0.0, 0.0, 0.0, 5.0, 4.9, 0.0, 0.0, 0.0, 0.0]]
    for rel, expected in ((0.5, 2), (0.95, 1)):
        beam = BeamState.start()
        opts = SearchOptions(beam=5, rel_threshold=rel)
        expand(beam, step_with(beam, logits), opts, allow_eos=False, max_len=10, src_len=3)
        assert beam.size == expected


def test_absolute_threshold() -> None:
    logits = [[0.0, 0.0, 0.0, 0.0, 5.0, 4.0, 3.0, 0.0, 0.0, 0.0]]
    beam = BeamState.start()
    expand(
        beam,
        step_with(beam, logits),
        SearchOptions(beam=5, abs_threshold=1.5),
        allow_eos=False,
        max_len=10,
        src_len=3,
    )
    assert beam.tokens[:, 1].tolist() == [4, 5]


def test_eos_is_masked_until_the_source_is_complete() -> None:
    logits = [[0.0] * V]
    logits[0][EOS_ID] = 10.0
    opts = SearchOptions(beam=2)
    beam = BeamState.start()
    expand(beam, step_with(beam, logits), opts, allow_eos=False, max_len=10, src_len=3)
    assert EOS_ID not in beam.tokens[:, 1].tolist() and not beam.complete
    beam = BeamState.start()
    expand(beam, step_with(beam, logits), opts, allow_eos=True, max_len=10, src_len=3)
    assert len(beam.complete) == 1


@pytest.mark.parametrize("beam_size", [1, 2])
def test_an_ending_token_completes_the_hypothesis_without_itself(beam_size: int) -> None:
    """`ends`: the row's best token ends it as EOS would, and is not written; a token that
    is not among the ends is written as usual (greedy's fast path included)."""
    logits = [[0.0] * V]
    logits[0][7] = 10.0
    logits[0][EOS_ID] = -100.0  # no EOS among the candidates: only the ending token completes
    beam = BeamState.start([5])
    expand(
        beam, step_with(beam, logits), SearchOptions(beam=beam_size), allow_eos=True,
        max_len=10, src_len=3, ends=[(0, 7)],
    )
    assert [h.tokens for h in beam.complete] == [(5,)]
    assert 7 not in beam.tokens[:, -1].tolist()
    beam = BeamState.start([5])
    expand(
        beam, step_with(beam, logits), SearchOptions(beam=beam_size), allow_eos=True,
        max_len=10, src_len=3, ends=[(0, 8)],
    )
    assert beam.tokens[0].tolist() == [BOS_ID, 5, 7] and 8 not in beam.tokens[:, -1].tolist()


def test_max_length_forces_the_end() -> None:
    beam = BeamState.start([5, 6])
    step = step_with(beam, [[0.0] * V])
    expand(beam, step, SearchOptions(), allow_eos=True, max_len=2, src_len=3)
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
        s = Session(engine, policy="wait-k:k=2", options=SearchOptions(beam=3, speculate=w))
        ups = [u for word in text.split() for u in s.push(word)] + s.finish()
        final = [u for u in ups if u.final]
        assert len(final) == 1 and final[0].text == "".join(u.committed_delta for u in ups).strip()
        outs[w] = [d for u in ups for d in u.delays]
        assert outs[w] == sorted(outs[w]) and all(1 <= d <= 8 for d in outs[w])


def test_speculative_commit_waits_for_the_beam_to_be_deep_enough() -> None:
    """With beam > 1 a token is committed only once every hypothesis agrees on it or the beam
    has searched `lookahead` tokens past the committed ones (speculative beam search)."""
    engine = Engine.tiny(0)

    def pick(lookahead: int, rows: list[list[int]]) -> tuple[int, bool] | None:
        search = OnlineSearch(load_policy("wait-k:k=2"), SearchOptions(beam=3, speculate=lookahead),
                              engine.tokenizer)  # fmt: skip
        st = StreamState(committed=[11])
        st.beam.tokens = torch.tensor([[1, 11, *r] for r in rows])  # (Bm, T): BOS + tokens
        st.beam.token_lp = torch.zeros(len(rows), 1 + len(rows[0]))
        return search._pick(st)

    disagree_2 = [[20, 30], [21, 30]]  # two tokens past the commit, first token disputed
    assert pick(3, disagree_2) is None  # not deep enough yet
    assert pick(2, disagree_2) == (20, False)  # deep enough: the best hypothesis' token
    assert pick(3, [[20, 30], [20, 31]]) == (20, True)  # agreed: no need to wait
    assert pick(1, [[20], [21]]) == (20, False)


def test_time_budget_ends_the_sentence() -> None:
    engine = Engine.tiny(0)
    s = Session(engine, policy="full", options=SearchOptions(beam=4, time_budget_ms=1e-6))
    ups = s.push("Der Hund läuft schnell über die Straße .")
    assert ups[-1].final


@dataclass(frozen=True)
class _Redecode:
    """A third-party re-translation policy: re-decodes after every word, and declares how many
    consecutive hypotheses must agree (`AgreementPolicy`) or, with None, declares nothing."""

    name: ClassVar[str] = "redecode"
    needs: ClassVar[frozenset[Signal]] = frozenset()
    mode: ClassVar[CommitMode] = CommitMode.RETRANSLATION
    agreement: int = 2

    def decide(self, obs: Observation) -> Action:
        return Action.WRITE if obs.source_finished else Action.READ


@dataclass(frozen=True)
class _RedecodeUndeclared:
    name: ClassVar[str] = "redecode-undeclared"
    needs: ClassVar[frozenset[Signal]] = frozenset()
    mode: ClassVar[CommitMode] = CommitMode.RETRANSLATION

    def decide(self, obs: Observation) -> Action:
        return Action.WRITE if obs.source_finished else Action.READ


def _committed(policy: Policy) -> list[tuple[str, tuple[int, ...]]]:
    """Each update's committed text and delays, streaming a sentence word by word."""
    s = Session(Engine.tiny(0), policy=policy)
    words = "Der Hund läuft heute schnell über die große Straße zum Haus ."
    ups = [u for word in words.split() for u in s.push(word)] + s.finish()
    return [(u.committed_delta, u.delays) for u in ups if u.committed_delta]


def test_retranslation_agreement_is_the_policys_to_declare() -> None:
    """The search commits what `agreement` consecutive hypotheses agree on, for any policy
    that declares it (LocalAgreement's n is one); without it, LocalAgreement-2."""
    runs = {n: _committed(_Redecode(agreement=n)) for n in (1, 2, 4)}
    assert isinstance(_Redecode(), AgreementPolicy)
    assert not isinstance(_RedecodeUndeclared(), AgreementPolicy)
    for n, run in runs.items():
        assert run == _committed(LocalAgreement(n=n))
    assert _committed(_RedecodeUndeclared()) == runs[DEFAULT_AGREEMENT]
    assert runs[1] != runs[4]  # the count matters: more agreement, later commits


@dataclass(frozen=True)
class _ChunkedRedecode(_Redecode):
    """A third-party re-translation policy that reads `chunk` words between re-decodings."""

    chunk: int = 1


@pytest.mark.parametrize("every", [1, 2, 3, 5])
def test_retranslation_re_decodes_once_a_chunk_is_read(every: int) -> None:
    """A re-translation policy with `chunk` re-decodes after every chunk-th word, never in
    between: commits before the end carry delays that are multiples of the chunk."""
    words = "Der Hund läuft heute schnell über die große Straße zum Haus .".split()
    for policy in (LocalAgreement(n=2, chunk=every), _ChunkedRedecode(agreement=2, chunk=every)):
        assert isinstance(policy, ChunkedPolicy)
        s = Session(Engine.tiny(0), policy=policy)
        ups = [u for word in words for u in s.push(word)] + s.finish()
        delays = [d for u in ups for d in u.delays]  # "." ends the sentence: its delays are 12
        early = [d for d in delays if d < len(words)]
        assert all(d % every == 0 for d in early), delays
        assert early or every == 5, delays  # the tiny model agrees early enough for 1-3
    assert _committed(LocalAgreement(n=2, chunk=1)) == _committed(_Redecode(agreement=2))
    with pytest.raises(PolicyError, match="chunk"):
        LocalAgreement(chunk=0)


def test_the_greedy_pick_never_takes_a_token_the_decoder_never_writes() -> None:
    """`_best_writable`: the row's best writable token, also when an unwritable one (PAD,
    BOS, UNK) has the highest log-probability, and the same as the max over writable ids."""
    from simulmt.data.vocab import NEVER, UNK_ID
    from simulmt.search.step import _best_writable

    gen = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(6, 40, generator=gen), dim=1)  # (N, V)
    lp[1, UNK_ID] = 0.0  # row 1 and 4 prefer an id never written
    lp[4, BOS_ID] = 0.0
    tops, top_lps = _best_writable(lp)
    allowed = lp.clone()
    allowed[:, NEVER] = float("-inf")
    want_lp, want = allowed.max(dim=1)
    assert tops == want.tolist() and top_lps == want_lp.tolist()
    assert tops[1] not in NEVER and tops[4] not in NEVER
