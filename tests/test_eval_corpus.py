"""Corpus aggregation (empty hypotheses), quality scores, and the run files."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.eval.corpus import (
    EmptyHypothesis,
    LatencyConfig,
    SentenceStats,
    TargetLength,
    corpus_latency,
    sentence_latency,
)
from simulmt.eval.instances import read_instances, read_scores, write_run
from simulmt.eval.quality import corpus_quality, quality_from_statistics, segment_statistics
from simulmt.eval.report import PolicyResult, format_table

REF = "the cat sat on the mat"


def _stats(
    i: int, prediction: str, delays: tuple[int, ...], x: int = 4, **kw: object
) -> SentenceStats:
    return SentenceStats(index=i, source_length=x, reference=REF, prediction=prediction,
                         delays=delays, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_empty_hypothesis_is_counted_and_scored_as_full_latency() -> None:
    config = LatencyConfig()
    sents = [
        sentence_latency(_stats(0, "a b c d", (1, 2, 3, 4), x=4), config),
        sentence_latency(_stats(1, "", (), x=6, sentence_compute_ms=50.0), config),
    ]
    assert sents[1].empty and sents[1].al == 6.0 and sents[1].ap == 1.0
    assert sents[1].ca_al == pytest.approx(6 * 400.0 + 50.0)  # whole source + compute
    # sentence 0: |Y| = 6, gamma = 6/4: (1 + (2 - 2/3) + (3 - 4/3) + (4 - 2)) / 4
    al0 = (1 + 4 / 3 + 5 / 3 + 2) / 4
    assert sents[0].al == pytest.approx(al0)
    full = corpus_latency(sents, config)
    assert (full.sentences, full.empty, full.scored) == (2, 1, 2)
    assert full.al == pytest.approx((al0 + 6.0) / 2)
    skip = corpus_latency(sents, LatencyConfig(empty=EmptyHypothesis.SKIP))
    assert (skip.sentences, skip.empty, skip.scored) == (2, 1, 1)
    assert skip.al == pytest.approx(al0)


def test_hypothesis_length_option_and_ca() -> None:
    stats = _stats(0, "a b", (2, 4), x=4, compute_ms=(10.0, 30.0), sentence_compute_ms=40.0)
    ref_len = sentence_latency(stats, LatencyConfig(rate=2.0))
    hyp_len = sentence_latency(stats, LatencyConfig(target_length=TargetLength.HYPOTHESIS))
    assert ref_len.al == pytest.approx((2 + (4 - 4 / 6)) / 2)  # gamma = 6/4
    assert hyp_len.al == pytest.approx((2 + (4 - 2)) / 2)  # gamma = 2/4
    assert ref_len.laal == hyp_len.laal  # LAAL always takes max(|Y*|, |Y|)
    # rate 2 words/s = 500 ms/word: e = 1010, 2030; |X| = 2000 ms; 1/gamma = 2000/6
    assert ref_len.ca_al == pytest.approx((1010 + 2030 - 2000 / 6) / 2)
    assert ref_len.normalized_erasure is None  # no displays recorded


def test_missing_compute_gives_no_ca_mean() -> None:
    config = LatencyConfig()
    a = sentence_latency(_stats(0, "a", (1,), compute_ms=(5.0,)), config)
    b = sentence_latency(_stats(1, "a", (1,)), config)
    assert corpus_latency([a], config).ca_al is not None
    assert corpus_latency([a, b], config).ca_al is None


def test_flicker_from_displays() -> None:
    stats = _stats(0, "a c d", (1, 2, 3), displays=("a", "a b", "a c", "a c d"))
    lat = sentence_latency(stats, LatencyConfig())
    assert lat.normalized_erasure == pytest.approx(1 / 3)
    assert lat.revisions_per_word == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prediction": "a b", "delays": (1,)}, "1 delays for 2 hypothesis words"),
        ({"prediction": "a", "delays": (5,)}, r"delays must lie in 1\.\.4"),
        ({"prediction": "a", "delays": (0,)}, r"delays must lie in 1\.\.4"),
        ({"prediction": "a", "delays": (1,), "compute_ms": ()}, "compute_ms"),
    ],
)
def test_bad_stats_are_explained(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SentenceStats(index=0, source_length=4, reference=REF, **kwargs)  # type: ignore[arg-type]


def test_bad_rate() -> None:
    with pytest.raises(ValueError, match="rate"):
        LatencyConfig(rate=0)


def test_quality_hand_values() -> None:
    q = corpus_quality([REF], [REF])
    assert q.bleu == pytest.approx(100.0) and q.chrf == pytest.approx(100.0)
    assert q.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    # the empty hypothesis stays in the corpus: all 4-gram precisions 100, BP = exp(1 - 8/6)
    q = corpus_quality([REF, ""], [REF, "a dog"])
    assert q.bleu == pytest.approx(100 * math.exp(1 - 8 / 6))
    with pytest.raises(ValueError, match="1 hypotheses but 2 references"):
        corpus_quality([REF], [REF, REF])


_WORDS = st.sampled_from(["the", "cat", "sat", "on", "a", "mat", "dog", ".", "Cat", "ß", "2,5"])
_LINES = st.lists(_WORDS, max_size=12).map(" ".join)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_LINES, _LINES), min_size=1, max_size=12), st.integers(0, 12))
def test_summed_sentence_statistics_equal_corpus_scores(
    pairs: list[tuple[str, str]], cut: int
) -> None:
    """Evaluation jobs score their own sentences and the caller sums the statistics: the
    result equals sacreBLEU's corpus_score on all sentences (scores, signatures, details)."""
    hyps, refs = [h for h, _ in pairs], [r for _, r in pairs]
    cut = min(cut, len(pairs))
    parts = [(hyps[:cut], refs[:cut]), (hyps[cut:], refs[cut:])]
    stats = [x for h, r in parts if h for x in segment_statistics(h, r)]
    assert quality_from_statistics(stats) == corpus_quality(hyps, refs)


def _run(tmp: Path) -> tuple[PolicyResult, list[SentenceStats]]:
    config = LatencyConfig()
    stats = [
        _stats(0, "the cat sat on mat", (1, 2, 3, 4, 4), compute_ms=(3.0, 4.0, 5.0, 6.0, 7.0),
               sentence_compute_ms=7.5, source="a b c d"),
        _stats(1, "the cat", (3, 4), compute_ms=(1.0, 2.0), sentence_compute_ms=2.0,
               source="a b c d"),
        _stats(2, "", (), sentence_compute_ms=1.0, source="a b c d"),
    ]  # fmt: skip
    sents = [sentence_latency(s, config) for s in stats]
    quality = corpus_quality([s.prediction for s in stats], [s.reference for s in stats])
    result = PolicyResult("wait-k:k=3", quality, corpus_latency(sents, config), config)
    write_run(tmp, result, stats, sents)
    return result, stats


def test_run_files_round_trip(tmp_path: Path) -> None:
    result, stats = _run(tmp_path)
    assert read_instances(tmp_path / "instances.log") == stats
    scores = read_scores(tmp_path)
    assert scores["policy"] == "wait-k:k=3" and scores["empty"] == 1 and scores["sentences"] == 3
    assert scores["al"] == pytest.approx(result.latency.al)
    header, row = (tmp_path / "scores.tsv").read_text().splitlines()
    assert (
        dict(zip(header.split("\t"), row.split("\t"), strict=True))["AL"]
        == f"{result.latency.al:.3f}"
    )
    assert len((tmp_path / "metrics.tsv").read_text().splitlines()) == 4
    first = json.loads((tmp_path / "instances.log").read_text().splitlines()[0])
    # in source words, as delays and source_length: d + compute / 400 ms per word
    assert first["elapsed"] == pytest.approx([1.0075, 2.01, 3.0125, 4.015, 4.0175])
    table = format_table([result])
    assert "wait-k:k=3" in table and "nrefs:1" in table


def test_read_instances_errors(tmp_path: Path) -> None:
    bad = tmp_path / "instances.log"
    bad.write_text('{"index": 0, "prediction": "a"}\n')
    with pytest.raises(ValueError, match="line 1"):
        read_instances(bad)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="not JSON"):
        read_instances(bad)


@pytest.mark.skipif(shutil.which("simuleval", path=str(Path(sys.executable).parent)) is None,
                    reason="simuleval CLI not installed")  # fmt: skip
def test_simuleval_score_only_reads_our_log(tmp_path: Path) -> None:
    """SimulEval rescoring our instances.log gives our AL/LAAL/AP/DAL (it skips the empty one)."""
    _run(tmp_path)
    config = LatencyConfig(empty=EmptyHypothesis.SKIP)
    stats = read_instances(tmp_path / "instances.log")
    ours = corpus_latency([sentence_latency(s, config) for s in stats], config)
    exe = str(Path(sys.executable).parent / "simuleval")
    out = subprocess.run(
        [exe, "--score-only", "--output", str(tmp_path), "--latency-metrics", "AL", "LAAL",
         "AP", "DAL", "--quality-metrics", "BLEU"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    header, row = out.stdout.strip().splitlines()[-2:]  # its score-only mode prints a table
    theirs = dict(zip(header.split(), map(float, row.split()[1:]), strict=True))
    assert theirs["BLEU"] == pytest.approx(read_scores(tmp_path)["bleu"], abs=1e-3)
    for name, value in [("AL", ours.al), ("LAAL", ours.laal), ("AP", ours.ap), ("DAL", ours.dal)]:
        assert theirs[name] == pytest.approx(value, abs=1e-3), (name, out.stdout)
