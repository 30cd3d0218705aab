"""YAAL, LongYAAL and the degenerate-policy diagnostics (IWSLT 2026's metrics), with tables of
expected values worked out by hand, and a deliberately degenerate policy that must be flagged."""

from __future__ import annotations

import pytest
import torch
from simulmt.eval.corpus import (
    EmptyHypothesis,
    LatencyConfig,
    SentenceStats,
    corpus_latency,
    sentence_latency,
)
from simulmt.eval.degeneracy import Degeneracy, SentenceEmission, degeneracy
from simulmt.eval.latency import yet_another_average_lagging
from simulmt.eval.report import PolicyResult, degeneracy_warning, format_table
from simulmt.eval.runner import RunConfig, simulate

from simulmt.data.tokenizer import EOS_ID
from simulmt.engine import Engine

YAAL_TABLE = [  # delays, |X|, |Y|, YAAL
    ((1, 2, 3, 4), 4, 4, 1.0),  # γ = 1; the word written at d = |X| does not count
    ((2, 2, 4, 4), 4, 6, (2 + (2 - 1 / 1.5)) / 2),  # γ = max(4, 6)/4
    ((3, 5, 6), 5, 3, 3.0),  # γ = 3/5; only the first word is before the end
    ((1, 4, 4, 4, 4, 4), 4, 6, 1.0),  # a few early words, the rest late: YAAL is the early lag
    ((4, 4, 4), 4, 3, None),  # nothing before the end (offline): no YAAL
]


@pytest.mark.parametrize(("delays", "x", "y", "expected"), YAAL_TABLE)
def test_yaal(delays: tuple[int, ...], x: int, y: int, expected: float | None) -> None:
    got = yet_another_average_lagging(delays, x, y)
    assert got == (None if expected is None else pytest.approx(expected))


LONG_YAAL_TABLE = [  # delays from the sentence's start, |X|, |Y|, stream end, LongYAAL
    ((-1, 2, 5, 9), 4, 4, 9, (-1 + 1 + 3) / 3),  # words past |X| count until the stream ends
    ((-1, 2, 5, 9), 4, 4, 5, 0.0),
    ((-1, 2, 5, 9), 4, 4, -1, None),  # the first word came at the stream's end
    ((0.5, 1.5), 2, 3, 2, (0.5 + (1.5 - 2 / 3)) / 2),  # time-valued delays
]


@pytest.mark.parametrize(("delays", "x", "y", "end", "expected"), LONG_YAAL_TABLE)
def test_long_yaal(
    delays: tuple[float, ...], x: int, y: int, end: float, expected: float | None
) -> None:
    got = yet_another_average_lagging(delays, x, y, stream_end=end)
    assert got == (None if expected is None else pytest.approx(expected))


A = SentenceEmission(words=4, early_words=3, source_length=4, yaal=1.0)  # (1, 2, 3, 4)
LATE = SentenceEmission(words=4, early_words=1, source_length=4, yaal=1.0)  # (1, 4, 4, 4)
EMPTY = SentenceEmission(words=0, early_words=0, source_length=6, yaal=None)
OFFLINE = SentenceEmission(words=3, early_words=0, source_length=3, yaal=None)

DEGENERACY_TABLE = [  # sentences, SWF, EFSW, DSPTV, flagged
    ([A], 75.0, 75.0, 0.0, False),
    ([A, LATE], 50.0, 75.0, 25.0, True),  # half the words late, 75% expected early
    ([A, EMPTY, OFFLINE], 300 / 7, 75.0, 75.0 - 300 / 7, True),  # no YAAL: only in SWF
    ([OFFLINE], 0.0, None, None, False),
]


@pytest.mark.parametrize(("rows", "swf", "efsw", "dsptv", "flagged"), DEGENERACY_TABLE)
def test_degeneracy(
    rows: list[SentenceEmission], swf: float, efsw: float | None, dsptv: float | None,
    flagged: bool,
) -> None:  # fmt: skip
    got = degeneracy(rows)
    assert got is not None
    assert got.swf == pytest.approx(swf) and got.degenerate is flagged
    assert got.efsw == (None if efsw is None else pytest.approx(efsw))
    assert got.dsptv == (None if dsptv is None else pytest.approx(dsptv))


def test_degeneracy_needs_output_words() -> None:
    assert degeneracy([EMPTY]) is None
    assert degeneracy([A, A]) == Degeneracy(75.0, 75.0, 0.0, False)


def _stats(i: int, prediction: str, delays: tuple[int, ...], x: int) -> SentenceStats:
    return SentenceStats(index=i, source_length=x, reference="a b c d", prediction=prediction,
                         delays=delays)  # fmt: skip


@pytest.mark.parametrize("empty", list(EmptyHypothesis))
def test_corpus_yaal_leaves_out_sentences_without_one(empty: EmptyHypothesis) -> None:
    """YAAL's mean covers the sentences that have one, whatever --empty says; the empty and
    the offline sentence still count in SWF and in `empty`."""
    config = LatencyConfig(empty=empty)
    stats = [_stats(0, "a b c d", (1, 2, 3, 4), 4), _stats(1, "a b c d", (1, 4, 4, 4), 4),
             _stats(2, "", (), 6), _stats(3, "a b c", (3, 3, 3), 3)]  # fmt: skip
    lat = corpus_latency([sentence_latency(s, config) for s in stats], config)
    assert (lat.yaal, lat.yaal_scored, lat.empty) == (pytest.approx(1.0), 2, 1)
    assert lat.swf == pytest.approx(100 * 4 / 11)  # 4 of 11 words before the end
    assert lat.efsw == pytest.approx(75.0) and lat.degenerate is True


def scripted(*, eos: float) -> Engine:
    """A real tiny engine whose decoder always ranks "the" at 1 and EOS at `eos` (EOS is
    allowed only once the source is complete): eos > 1 stops as soon as the source ends, eos
    < 1 writes "the" until the length limit."""
    engine = Engine.tiny(seed=0)
    tok, model = engine.tokenizer, engine.model
    (the,) = tok.encode("the")
    with torch.no_grad():
        model.dec_ln.weight.zero_()
        model.dec_ln.bias.zero_()
        model.dec_ln.bias[0] = 1.0  # every decoder state is e_0
        model.out_proj.weight.zero_()
        model.out_proj.weight[the, 0] = 1.0
        model.out_proj.weight[EOS_ID, 0] = eos
    return engine


SOURCES = ["Ich habe heute ein Buch gelesen", "Der Hund läuft schnell"]
REFERENCES = ["I read a book today", "The dog runs fast"]


def _result(engine: Engine, policy: str) -> PolicyResult:
    config = LatencyConfig()
    sim = simulate(engine, policy, SOURCES, REFERENCES, config=RunConfig(batch_size=2))
    sents = [sentence_latency(s, config) for s in sim.stats]
    from simulmt.eval.quality import corpus_quality

    quality = corpus_quality([s.prediction for s in sim.stats], REFERENCES)
    return PolicyResult(policy, quality, corpus_latency(sents, config), config)


def test_a_degenerate_policy_is_flagged() -> None:
    """One word after the first source word, everything else after the source ended: its
    YAAL (1 word) promises ~80% of the words early, but only one per sentence was."""
    result = _result(scripted(eos=0.0), "schedule:g=[1,1000]")
    lat = result.latency
    assert lat.yaal == pytest.approx(1.0)
    assert lat.swf is not None and lat.swf < 10.0 and lat.degenerate is True
    warning = degeneracy_warning(result)
    assert warning is not None and "schedule:g=[1,1000]" in warning
    assert warning in format_table([result])


def test_wait_k_that_writes_along_is_not_flagged() -> None:
    result = _result(scripted(eos=2.0), "wait-k:k=1")  # writes one word per word read
    lat = result.latency
    assert lat.swf == pytest.approx(100.0)  # it stops when the source ends
    assert lat.dsptv is not None and abs(lat.dsptv) < 20 and lat.degenerate is False
    assert degeneracy_warning(result) is None and "WARNING" not in format_table([result])
