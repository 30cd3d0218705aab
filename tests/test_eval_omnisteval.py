"""Agreement with OmniSTEval, the IWSLT 2026 scorer, on the files `simulmt eval` writes.

Skipped where `omnisteval` is not installed (`pip install simulmt[iwslt]`; `make setup-test`
installs it, so CI runs these). Short form: its `shortform --word_level` reading of our
instances.log gives our YAAL, degeneracy diagnostics, AL/LAAL/AP/DAL and BLEU, and its CA
figures are ours in source words. Long form: its `longform` reading of our OmniSTEval files
gives our BLEU and LongYAAL where its alignment is ours (a hypothesis that is the references).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from simulmt.eval.corpus import LatencyConfig, SentenceStats, corpus_latency, sentence_latency
from simulmt.eval.documents import Document
from simulmt.eval.instances import write_run
from simulmt.eval.longform import score_documents
from simulmt.eval.omnisteval_files import (
    HYPOTHESES,
    REFERENCES,
    SEGMENTATION,
    write_omnisteval_longform,
)
from simulmt.eval.quality import corpus_quality
from simulmt.eval.report import PolicyResult

omni_io = pytest.importorskip("omnisteval.io")
omni_scoring = pytest.importorskip("omnisteval.scoring")
omni_resegment = pytest.importorskip("omnisteval.resegment")

WORDS = "the a cat dog sat ran on under mat house it was happy then left room quickly".split()


def _fixture(seed: int = 0, n: int = 40) -> list[SentenceStats]:
    """Sentences of every kind: wait-k-like, bursts at the end, offline, empty, with compute."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        x = rng.randint(1, 12)
        ref = " ".join(rng.choices(WORDS, k=rng.randint(1, 14)))
        kind = i % 5
        length = 0 if kind == 4 else rng.randint(1, 16)
        if kind == 3:
            delays = [x] * length  # offline: every word after the end
        else:
            delays = sorted(rng.randint(1, x) for _ in range(length))
        compute, spent = [], 0.0
        for _ in delays:
            spent += rng.uniform(0.0, 300.0)
            compute.append(spent)
        out.append(SentenceStats(
            index=i, source_length=x, reference=ref,
            prediction=" ".join(rng.choices(WORDS, k=length)), delays=tuple(delays),
            compute_ms=tuple(compute), sentence_compute_ms=spent + 1.0,
            source=" ".join(["w"] * x),
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shortform_agrees_on_our_instances_log(tmp_path: Path, seed: int) -> None:
    config = LatencyConfig()
    stats = _fixture(seed)
    sents = [sentence_latency(s, config) for s in stats]
    ours = corpus_latency(sents, config)
    quality = corpus_quality([s.prediction for s in stats], [s.reference for s in stats])
    write_run(tmp_path, PolicyResult("p", quality, ours, config), stats, sents)
    refs = tmp_path / "refs.txt"
    refs.write_text("".join(s.reference + "\n" for s in stats), encoding="utf-8")
    # what `omnisteval shortform --word_level --hypothesis_file … --ref_sentences_file …` runs
    instances = omni_io.load_shortform_instances(
        str(tmp_path / "instances.log"), str(refs), emission_cu_key="delays",
        emission_ca_key="elapsed", char_level=False,
    )  # fmt: skip
    theirs, _, _ = omni_scoring.evaluate_instances(instances, is_longform=False)
    assert theirs["yaal"] == pytest.approx(ours.yaal, abs=5e-4)
    assert theirs["swf"] == pytest.approx(ours.swf, abs=5e-4)
    assert theirs["efsw"] == pytest.approx(ours.efsw, abs=5e-4)
    assert theirs["dsptv"] == pytest.approx(ours.dsptv, abs=5e-4)
    assert theirs["degenerate_policy"] == float(bool(ours.degenerate))
    assert theirs["bleu"] == pytest.approx(quality.bleu, abs=5e-4)
    # AL/LAAL/AP/DAL skip empty hypotheses there: ours with `--empty skip`
    skip = corpus_latency(sents, LatencyConfig(empty=config.empty.SKIP))
    for key in ("al", "laal", "ap", "dal"):
        assert theirs[key] == pytest.approx(getattr(skip, key), abs=5e-4), key
    # its CA scores are in the log's unit, source words; ours are in ms
    ms = config.ms_per_word
    assert theirs["ca_yaal"] * ms == pytest.approx(ours.ca_yaal, abs=5e-4)
    assert theirs["ca_al"] * ms == pytest.approx(skip.ca_al, abs=5e-4)
    assert theirs["ca_laal"] * ms == pytest.approx(skip.ca_laal, abs=5e-4)


def test_longform_files_read_by_omnisteval(tmp_path: Path) -> None:
    """Two documents whose hypotheses are their references: OmniSTEval's own alignment then
    finds our segments, so BLEU is 100 and LongYAAL is ours (CU in ms = ours × ms per word)."""
    docs = [
        Document("talk1", (("a", "b", "c"), ("d", "e"), ("f", "g", "h", "i")),
                 ("x y z", "u v", "p q r s")),
        Document("talk2", (("j", "k"), ("l", "m", "n")), ("one two", "three four five")),
    ]  # fmt: skip
    delays = [(2, 3, 3, 4, 5, 7, 8, 9, 9), (1, 2, 4, 5, 5)]
    stats = [
        SentenceStats(i, len(d.words), " ".join(d.references), " ".join(d.references), dl,
                      compute_ms=tuple(10.0 * (t + 1) for t in range(len(dl))),
                      source=" ".join(d.words))
        for i, (d, dl) in enumerate(zip(docs, delays, strict=True))
    ]  # fmt: skip
    config = LatencyConfig()
    ours, results = score_documents("p", docs, stats, config)
    out = tmp_path / "omnisteval"
    write_omnisteval_longform(out, results, ms_per_word=config.ms_per_word)
    # what `omnisteval longform --word_level --speech_segmentation segmentation.json
    # --ref_sentences_file references.txt --hypothesis_file hypotheses.jsonl` runs
    ref_words, hyp_words, seg, ref_sentences = omni_io.load_resegmentation_inputs(
        str(out / SEGMENTATION), None, str(out / REFERENCES), str(out / HYPOTHESES),
    )  # fmt: skip
    instances, _ = omni_resegment.resegment(ref_words, hyp_words, seg, ref_sentences)
    assert [i.prediction for i in instances] == [s for r in results for s in r.segments]
    theirs, _, _ = omni_scoring.evaluate_instances(instances, is_longform=True)
    assert theirs["bleu"] == pytest.approx(ours.quality.bleu)
    assert ours.long_yaal is not None and ours.ca_long_yaal is not None
    assert theirs["long_yaal"] == pytest.approx(ours.long_yaal * config.ms_per_word)
    assert theirs["ca_long_yaal"] == pytest.approx(ours.ca_long_yaal)
