"""Latency metrics: hand-computed tables, invariants, and agreement with SimulEval 1.1.4."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulmt.eval import flicker
from simulmt.eval.latency import (
    average_lagging,
    average_proportion,
    average_token_delay,
    computation_aware_delays,
    differentiable_average_lagging,
    length_adaptive_average_lagging,
)

# (case, delays, |X|, |Y| reference, AL(ref len), AL(hyp len), LAAL, DAL, AP(ref len))
# Every value worked out by hand from the formulas in DESIGN.md.
TABLE = [
    ("wait-1, |Y*|=|Y|=|X|", [1, 2, 3, 4], 4, 4, 1.0, 1.0, 1.0, 1.0, 10 / 16),
    # tau = 2 (d_2 = |X|): AL = (3 + (4-1)) / 2; DAL: g' = 3,4,5,6
    ("wait-3", [3, 4, 4, 4], 4, 4, 3.0, 3.0, 3.0, 3.0, 15 / 16),
    # hyp longer than ref: gamma = 2/4, 1/gamma = 2 -> (1 + 0 - 1 - 2)/4; LAAL gamma = 4/4
    ("hyp longer than ref", [1, 2, 3, 4], 4, 2, -0.5, 1.0, 1.0, 1.0, 10 / 8),
    # hyp shorter: gamma = 8/4 -> (2 + 3.5)/2; hyp len gamma = 2/4 -> (2 + 2)/2;
    # DAL g' = 2, max(4, 2+2) = 4 -> (2 + 2)/2
    ("hyp shorter than ref", [2, 4], 4, 8, 2.75, 2.0, 2.75, 2.0, 6 / 32),
    # tau at the first token: d_1 = |X| stops the sum at once; DAL g' = 3,4,5
    ("tau = 1", [3, 3, 3], 3, 3, 3.0, 3.0, 3.0, 3.0, 1.0),
    # source never fully read: tau = |Y*| = 2; gamma = 3/5 -> (2 + 3 - 5/3)/2;
    # hyp len gamma = 2/5 -> (2 + 3 - 2.5)/2; DAL g' = 2, max(3, 4.5) -> (2 + 2)/2
    ("never reaches |X|", [2, 3], 5, 3, 5 / 3, 1.25, 5 / 3, 2.0, 5 / 15),
    ("single word", [2], 2, 1, 2.0, 2.0, 2.0, 2.0, 1.0),
]


@pytest.mark.parametrize(
    ("case", "delays", "x", "y", "al_ref", "al_hyp", "laal", "dal", "ap"), TABLE
)
def test_table(
    case: str,
    delays: list[int],
    x: int,
    y: int,
    al_ref: float,
    al_hyp: float,
    laal: float,
    dal: float,
    ap: float,
) -> None:
    assert average_lagging(delays, x, y) == pytest.approx(al_ref), case
    assert average_lagging(delays, x, len(delays)) == pytest.approx(al_hyp), case
    assert length_adaptive_average_lagging(delays, x, y) == pytest.approx(laal), case
    assert differentiable_average_lagging(delays, x) == pytest.approx(dal), case
    assert average_proportion(delays, x, y) == pytest.approx(ap), case


def test_first_delay_beyond_source_returns_d1() -> None:
    # Time-valued delays (ms) can start after the source ended: AL = LAAL = d_1.
    assert average_lagging([1500.0, 1600.0], 1000.0, 2) == 1500.0
    assert length_adaptive_average_lagging([1500.0, 1600.0], 1000.0, 5) == 1500.0


@pytest.mark.parametrize(
    ("delays", "x", "atd"),
    [([1, 2, 3, 4], 4, 1.0), ([3, 4, 4, 4], 4, 3.0), ([4, 4, 4, 4], 4, 4.0), ([2, 2, 3], 3, 2.0)],
)
def test_atd_table(delays: list[int], x: int, atd: float) -> None:
    # [2,2,3]: ends 3,4,5; aligned 1,2,3 (chunk 2: Y<c=2, X<c=2) -> (2+2+2)/3
    assert average_token_delay(delays, x) == pytest.approx(atd)


def test_computation_aware_hand_value() -> None:
    elapsed = computation_aware_delays([1, 2], [100.0, 150.0], ms_per_word=400.0)
    assert elapsed == [500.0, 950.0]
    # |X| = 800 ms, gamma = 2/800: terms 500 and 950 - 400; tau = 2
    assert average_lagging(elapsed, 800.0, 2) == pytest.approx(525.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: average_lagging([], 3, 3), "empty"),
        (lambda: average_lagging([1], 0, 3), "source_length"),
        (lambda: average_proportion([1], 3, 0), "target_length"),
        (lambda: differentiable_average_lagging([1, math.nan], 3), "finite"),
        (lambda: average_token_delay([2, 1], 3), "non-decreasing"),
        (lambda: computation_aware_delays([1, 2], [1.0], ms_per_word=400), "compute_ms"),
    ],
)
def test_bad_input_is_explained(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


@given(st.integers(1, 40), st.integers(1, 40))
def test_ideal_wait_k_has_al_k(n: int, k: int) -> None:
    delays = [min(t + k - 1, n) for t in range(1, n + 1)]
    assert average_lagging(delays, n, n) == pytest.approx(min(k, n))


@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 30))
def test_full_sentence_lags_whole_source(x: int, hyp: int, ref: int) -> None:
    delays = [x] * hyp
    assert average_lagging(delays, x, ref) == x
    assert length_adaptive_average_lagging(delays, x, ref) == x
    assert differentiable_average_lagging(delays, x) == pytest.approx(x)
    assert average_proportion(delays, x, ref) == pytest.approx(hyp / ref)


delay_lists = st.integers(1, 25).flatmap(
    lambda x: st.tuples(
        st.just(x), st.lists(st.integers(1, x), min_size=1, max_size=30).map(sorted)
    )
)


@given(delay_lists, st.integers(1, 30), st.floats(10.0, 1000.0))
def test_invariants(xd: tuple[int, list[int]], ref: int, ms: float) -> None:
    x, delays = xd
    al = average_lagging(delays, x, ref)
    assert al <= x + 1e-9  # each term d_t - (t-1)/gamma <= d_t <= |X|
    gamma = len(delays) / x
    plain = sum(d - t / gamma for t, d in enumerate(delays)) / len(delays)
    assert differentiable_average_lagging(delays, x) >= plain - 1e-9  # g'_t >= d_t
    assert average_proportion(delays, x, len(delays)) <= 1.0 + 1e-12
    # zero compute: CA-AL is AL in milliseconds
    zero = computation_aware_delays(delays, [0.0] * len(delays), ms_per_word=ms)
    assert average_lagging(zero, x * ms, ref) == pytest.approx(al * ms, abs=1e-6)


@given(st.lists(st.lists(st.sampled_from("abc"), max_size=6), min_size=1, max_size=8))
def test_flicker_invariants(displays: list[list[str]]) -> None:
    ne = flicker.normalized_erasure(displays)
    assert ne >= flicker.revisions_per_word(displays) >= 0  # each revision erases >= 1 word
    grown = [displays[-1][:i] for i in range(len(displays[-1]) + 1)]  # append-only display
    assert flicker.normalized_erasure(grown) == 0.0


@pytest.mark.parametrize(
    ("displays", "ne", "rpw"),
    [
        (["a", "a b", "a c", "a c d"], 1 / 3, 1 / 3),
        (["x y", "a b", "a b c"], 2 / 3, 1 / 3),
        (["a b", ""], 2.0, 1.0),  # empty final output: divided by 1
        (["a", "a b", "a b c"], 0.0, 0.0),
    ],
)
def test_flicker_table(displays: list[str], ne: float, rpw: float) -> None:
    words = [d.split() for d in displays]
    assert flicker.normalized_erasure(words) == pytest.approx(ne)
    assert flicker.revisions_per_word(words) == pytest.approx(rpw)


# --- agreement with SimulEval 1.1.4's own scorers ---------------------------------------------


def _random_case(rng: random.Random) -> tuple[list[int], int, int]:
    x = rng.randint(1, 30)
    hyp = rng.randint(1, 40)
    ref = rng.randint(1, 40)
    delays = sorted(rng.randint(1, x) for _ in range(hyp))
    return delays, x, ref


def test_agrees_with_simuleval_on_random_sequences() -> None:
    from simuleval.evaluator.instance import LogInstance
    from simuleval.evaluator.scorers import latency_scorer as ls

    rng = random.Random(20261121)
    for case in range(600):
        delays, x, ref = _random_case(rng)
        reference = " ".join(f"w{i}" for i in range(ref))
        line = json.dumps(
            {"index": 0, "delays": delays, "elapsed": [0] * len(delays), "source_length": x,
             "reference": reference, "prediction": " ".join("h" * len(delays))}
        )  # fmt: skip
        ins = LogInstance(line, "word")
        for use_ref in (True, False):
            y = ref if use_ref else len(delays)
            ours = {
                "AL": average_lagging(delays, x, y),
                # SimulEval's LAAL takes max(|Y*|, y): with --no-use-ref-len that is AL(hyp)
                "LAAL": length_adaptive_average_lagging(delays, x, y),
                "DAL": differentiable_average_lagging(delays, x),
                "AP": average_proportion(delays, x, y),
            }
            for name, cls in [("AL", ls.ALScorer), ("LAAL", ls.LAALScorer),
                              ("DAL", ls.DALScorer), ("AP", ls.APScorer)]:  # fmt: skip
                theirs = cls(use_ref_len=use_ref).compute(ins)
                assert ours[name] == pytest.approx(theirs, rel=1e-12, abs=1e-12), (
                    case, name, use_ref, delays, x, ref,
                )  # fmt: skip


def test_time_valued_agrees_with_simuleval() -> None:
    """Float delays (CA, ms), including d_1 > |X|, through SimulEval's AL and LAAL."""
    from simuleval.evaluator.instance import LogInstance
    from simuleval.evaluator.scorers import latency_scorer as ls

    rng = random.Random(7)
    for _ in range(200):
        x_ms = rng.uniform(100.0, 5000.0)
        delays = sorted(rng.uniform(0.0, 1.5 * x_ms) for _ in range(rng.randint(1, 20)))
        ref = rng.randint(1, 20)
        ins = LogInstance(json.dumps({"index": 0, "delays": delays, "source_length": x_ms,
                                      "reference": " ".join(["r"] * ref)}), "word")  # fmt: skip
        assert average_lagging(delays, x_ms, ref) == pytest.approx(ls.ALScorer().compute(ins))
        assert length_adaptive_average_lagging(delays, x_ms, ref) == pytest.approx(
            ls.LAALScorer().compute(ins)
        )


def test_atd_agrees_with_simuleval_text_path() -> None:
    from simuleval.evaluator.instance import TextInputInstance
    from simuleval.evaluator.scorers import latency_scorer as ls

    rng = random.Random(11)
    for _ in range(500):
        delays, x, _ref = _random_case(rng)
        ins = TextInputInstance(0, None, None)  # SimulEval's text path: unit-length words
        ins.source = ["w"] * x
        ins.delays = delays
        theirs = ls.ATDScorer()({0: ins})
        assert average_token_delay(delays, x) == pytest.approx(theirs, rel=1e-12), (delays, x)
