"""The premature-stop rule (simulmt.search.stops): no committed sentence end before the source
sentence is finished, for every policy, commit mode, write unit and segmentation mode."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulmt.engine import Engine
from simulmt.output.sentence_ends import inner_sentence_end, may_end_sentence
from simulmt.output.updates import Update
from simulmt.search.online import OnlineSearch, SourceView
from simulmt.search.options import PrematureStops, SearchOptions, WriteUnit
from simulmt.search.state import StreamState
from simulmt.search.step import StepRequest, StepResult
from simulmt.search.stops import StopRule, end_pieces
from simulmt.segment.model import SegmenterConfig, SegmenterNet
from simulmt.session import Session
from tests._model_helpers import Favour


def _engine(boost: float) -> Engine:
    engine = Engine.tiny(seed=0)
    dot = next(i for i, text, _ in end_pieces(engine.tokenizer) if text == ".")
    engine.model.out_proj = Favour(engine.model.out_proj, dot, boost)  # type: ignore[assignment]
    engine.segmenter = SegmenterNet(SegmenterConfig(buckets=64, dim=4, hidden=4)).eval()
    return engine


ENGINES = {boost: _engine(boost) for boost in (0.0, 3.0, 6.0)}
TOK = ENGINES[0.0].tokenizer
WORDS = ("der Hund sieht die Katze und ich habe heute ein Buch gelesen weil es warm war "
         "sie trinkt Kaffee im Garten").split()  # fmt: skip
TEXT = "der Hund sieht die Katze und die Katze sieht den Hund am Morgen"


@contextmanager
def checking() -> Iterator[dict[int, int]]:
    """After every step the search plans or applies while its stream's source is unfinished,
    check that no committed whole word may end the sentence; yield, per stream, how many
    committed tokens were whole words then (at most)."""
    before: dict[int, int] = {}
    alive: list[StreamState] = []  # ids stay unique while the streams live
    plan, apply = OnlineSearch.plan, OnlineSearch.apply

    def check(s: StreamState, src: SourceView) -> None:
        if id(s) not in before:
            alive.append(s)
            before[id(s)] = 0
        if src.complete:
            return
        ids = s.committed[: s.complete_tokens]
        starts = [i for i in range(len(ids)) if i == 0 or TOK.is_word_start(ids[i])]
        ends = [*starts[1:], len(ids)] if starts else []
        words = [TOK.decode(ids[a:b]) for a, b in zip(starts, ends, strict=True)]
        assert not any(may_end_sentence(w) for w in words), words
        before[id(s)] = max(before.get(id(s), 0), len(words))

    def plan_spy(self: OnlineSearch, s: StreamState, src: SourceView, now: float
                 ) -> StepRequest | None:  # fmt: skip
        out = plan(self, s, src, now)
        check(s, src)
        return out

    def apply_spy(self: OnlineSearch, s: StreamState, src: SourceView, req: StepRequest,
                  res: StepResult) -> None:  # fmt: skip
        apply(self, s, src, req, res)
        check(s, src)

    with mock.patch.object(OnlineSearch, "plan", plan_spy), \
            mock.patch.object(OnlineSearch, "apply", apply_spy):  # fmt: skip
        yield before


def _finals(ups: list[Update]) -> list[str]:
    return [u.text for u in ups if u.final]


POLICIES = ["wait-k:k=1", "wait-k:k=2", "confidence:threshold=0.3", "alignatt:f=2",
            "local-agreement:n=2", "wait-if-diff"]  # fmt: skip
SEGMENTATION = ["client", "punctuation", "auto"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=14),
    st.lists(st.integers(1, 4), max_size=8),
    st.sampled_from(POLICIES),
    st.sampled_from(SEGMENTATION),
    st.sampled_from([PrematureStops.MASK, PrematureStops.TENTATIVE]),
    st.sampled_from([1, 1, 3]),
    st.sampled_from(list(WriteUnit)),
    st.sampled_from(sorted(ENGINES)),
)
def test_no_committed_sentence_end_before_the_source_sentence_is_finished(
    words: list[str], cuts: list[int], policy: str, segmentation: str, mode: PrematureStops,
    beam: int, unit: WriteUnit, boost: float,
) -> None:  # fmt: skip
    opts = SearchOptions(beam=beam, unit=unit, premature_stops=mode, speculate=2)
    session = Session(ENGINES[boost], policy=policy, options=opts, segmentation=segmentation)
    ups: list[Update] = []
    with checking() as before:
        pos = 0
        for c in cuts:
            ups += session.push(" ".join(words[pos : pos + c]))
            pos += c
        ups += session.push(" ".join(words[pos:])) + session.finish()
    finals = _finals(ups)
    assert finals and len(finals) == len(before)  # one stream per sentence, checked
    # and the final texts: a sentence end only among the words written after the source ended
    for text, n in zip(finals, before.values(), strict=True):
        assert not inner_sentence_end(" ".join(text.split()[:n]))


@pytest.mark.parametrize("policy", ["wait-k:k=2", "wait-k:k=1"])
@pytest.mark.parametrize("beam", [1, 3])
def test_a_model_that_ends_early_commits_stops_without_the_rule_and_not_with_it(
    policy: str, beam: int
) -> None:
    """Committed words while the source goes on (no flush yet): without the rule, a word that
    ends the sentence is among them; with either mode, none is."""
    committed = {}
    for mode in PrematureStops:
        opts = SearchOptions(beam=beam, premature_stops=mode, loop_guard=8)
        s = Session(ENGINES[6.0], policy=policy, options=opts, segmentation="client")
        committed[mode] = "".join(u.committed_delta for u in s.push(TEXT)).split()
    assert any(may_end_sentence(w) for w in committed[PrematureStops.ALLOW])  # else: shows nothing
    for mode in (PrematureStops.MASK, PrematureStops.TENTATIVE):
        assert committed[mode] and not any(may_end_sentence(w) for w in committed[mode]), mode


def test_mask_bans_stops_that_would_end_the_sentence_only() -> None:
    rule = StopRule(PrematureStops.MASK, TOK)
    stops = {i for i, _, _ in end_pieces(TOK)}
    assert {TOK.piece(i) for i in stops} == {".", "?", "!"}

    def banned(text: str) -> set[int]:
        ids = TOK.encode(text)
        beam = torch.tensor([[2, *ids]])  # BOS, then the written tokens
        return {tok for _, tok in rule.bans(StreamState(), beam)}

    dot = next(i for i in stops if TOK.piece(i) == ".")
    assert banned("the dog") == stops
    assert banned("") == stops
    assert banned("the U.S") == banned("the e") == stops - {dot}  # "U.S." and "e." may follow
    allow = StopRule(PrematureStops.ALLOW, TOK)
    assert allow.bans(StreamState(), torch.tensor([[2, *TOK.encode("the dog")]])) == []
    tentative = StopRule(PrematureStops.TENTATIVE, TOK)
    state = StreamState()
    assert tentative.bans(state, torch.tensor([[2, *TOK.encode("the dog")]])) == []
    n = len(TOK.encode("the dog"))
    state.stop_ban = (n, 0)  # a stop was dropped here: all stops banned until the next READ
    assert {t for _, t in tentative.bans(state, torch.tensor([[2, *TOK.encode("the dog")]]))} \
        == stops  # fmt: skip
    state.words_read = 1
    assert tentative.bans(state, torch.tensor([[2, *TOK.encode("the dog")]])) == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["the", "dog", "U.S", "Mr", "e", "3", "."]), max_size=8),
       st.integers(0, 2))  # fmt: skip
def test_mask_bans_answer_membership_without_working_them_out(words: list[str], row: int) -> None:
    # `in` skips the work for tokens that are no stop piece; its answers are the list's
    rule = StopRule(PrematureStops.MASK, TOK)
    ids = TOK.encode(" ".join(words))
    rows = [[2, *ids], [2, *ids[:-1], 5]] if ids else [[2]]  # BOS, then the written tokens
    beam = torch.tensor(rows)
    bans = rule.bans(StreamState(), beam)
    whole = list(bans)
    assert whole == rule.mask_bans(beam)
    for tok in {i for i, _, _ in end_pieces(TOK)} | set(ids) | {0, 5}:
        assert ((row, tok) in bans) == ((row, tok) in whole)


def test_local_agreement_commits_up_to_the_word_before_the_stop() -> None:
    rule = StopRule(PrematureStops.TENTATIVE, TOK)
    hyp = TOK.encode("the dog. the cat")
    words = [i for i, t in enumerate(hyp) if TOK.is_word_start(t)]
    agreed = len(hyp)
    cut = rule.agreed(hyp, 0, agreed)
    assert TOK.decode(hyp[:cut]).strip() == "the"  # "dog." stays tentative
    assert cut in words
    assert StopRule(PrematureStops.ALLOW, TOK).agreed(hyp, 0, agreed) == agreed
    assert rule.agreed(TOK.encode("the dog"), 0, 2) == 2


def test_one_option_name_and_one_default_in_eval_translate_and_serve() -> None:
    import argparse

    from simulmt.eval import cli as eval_cli
    from simulmt.eval.options import RunConfig
    from simulmt.server import cli as serve_cli
    from simulmt.server.config import ServerConfig

    from simulmt.cli import translate

    default = SearchOptions.premature_stops
    assert RunConfig().premature_stops is ServerConfig().premature_stops is default
    assert RunConfig(premature_stops=PrematureStops.ALLOW).search_options().premature_stops \
        is PrematureStops.ALLOW  # fmt: skip
    for module in (eval_cli, translate, serve_cli):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        assert parser.get_default("premature_stops") == default.value, module
        action = next(a for a in parser._actions if a.dest == "premature_stops")
        assert action.option_strings == ["--premature-stops"]
        assert list(action.choices or []) == [m.value for m in PrematureStops]



def _first_redecode(mode: PrematureStops) -> tuple[int, ...]:
    """Local agreement's first hypothesis (nothing committed yet) for TEXT pushed at once, on
    a model that favours "." enough to end its sentence before the source does."""
    first: list[tuple[int, ...]] = []
    apply = OnlineSearch._apply_retranslation

    def spy(self: OnlineSearch, s: StreamState, src: SourceView, res: StepResult) -> None:
        apply(self, s, src, res)
        if s.history and not first:
            first.append(s.history[0])

    opts = SearchOptions(premature_stops=mode, loop_guard=8)
    with mock.patch.object(OnlineSearch, "_apply_retranslation", spy):
        Session(ENGINES[3.0], policy="local-agreement:n=2", options=opts,
                segmentation="client").push(TEXT)  # fmt: skip
    return first[0]


def test_a_local_agreement_redecode_ends_where_the_model_would_end_the_sentence() -> None:
    """With MASK, a re-decode of an unfinished source is not pushed past a stop the model
    wants: it ends there, without the stop (pushed on, it ran on and repeated phrases)."""
    free = _first_redecode(PrematureStops.ALLOW)
    masked = _first_redecode(PrematureStops.MASK)
    assert len(masked) >= 3 and free[: len(masked)] == masked  # the same words up to the stop
    assert free[len(masked)] in {i for i, _, _ in end_pieces(TOK)}  # where the model stopped
    assert may_end_sentence(TOK.decode(list(free[: len(masked) + 1])))
