"""Long-form evaluation: documents, minimum-WER resegmentation, StreamLAAL, `eval --long-form`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.eval.corpus import EmptyHypothesis, LatencyConfig, SentenceStats
from simulmt.eval.documents import Document, read_documents
from simulmt.eval.latency import length_adaptive_average_lagging
from simulmt.eval.longform import evaluate_long_form, score_documents
from simulmt.eval.options import RunConfig
from simulmt.eval.resegment import resegment
from simulmt.eval.stream_latency import emission_times, stream_laal

from simulmt.cli import main
from simulmt.data.tokenizer import EOS_ID
from simulmt.engine import Engine
from simulmt.model.checkpoint import save_checkpoint
from simulmt.segment.views import SourceStyle

REFS = ["The cat sat on the mat.", "It was happy.", "Then it left the room, quickly."]


# ---- resegmentation -----------------------------------------------------------------------
def test_resegment_finds_the_known_sentence_ends() -> None:
    """The hypothesis is the references with case and punctuation changed, one word missing
    and one inserted: every sentence still gets exactly its own words."""
    hyp = "the cat sat on a mat . it was very happy then it left , the room quickly".split()
    spans = resegment(hyp, REFS)
    assert [" ".join(hyp[a:b]) for a, b in spans] == [
        "the cat sat on a mat .",
        "it was very happy",
        "then it left , the room quickly",
    ]


def test_resegment_keeps_words_with_attached_punctuation_whole() -> None:
    hyp = "The cat sat on the mat. It was happy. Then it left the room, quickly.".split()
    spans = resegment(hyp, REFS)
    assert [" ".join(hyp[a:b]) for a, b in spans] == REFS


def test_resegment_empty_hypothesis_and_bad_input() -> None:
    assert resegment([], REFS) == [(0, 0)] * 3
    with pytest.raises(ValueError, match="at least one"):
        resegment(["a"], [])
    with pytest.raises(ValueError, match="newline"):
        resegment(["a"], ["a\nb"])


WORDS = st.sampled_from("the a cat dog sat ran . , on mat it was happy then left".split())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(WORDS, max_size=30),
    st.lists(st.lists(WORDS, min_size=1, max_size=8), min_size=1, max_size=5),
)
def test_resegment_spans_tile_the_hypothesis(hyp: list[str], refs: list[list[str]]) -> None:
    spans = resegment(hyp, [" ".join(r) for r in refs])
    assert len(spans) == len(refs)
    assert spans[0][0] == 0 and spans[-1][1] == len(hyp)
    assert all(a <= b for a, b in spans)
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))


# ---- StreamLAAL -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("delays", "offset", "n_src", "n_ref", "expected"),
    [
        ([7, 8, 9, 9], 5, 4, 4, 2.0),  # shifted 2,3,4,4; γ=1; τ=3: (2+2+2)/3
        ([3], 5, 4, 2, -2.0),  # written before the sentence's source began: negative
        ([6, 6, 9], 5, 4, 6, (1 + (1 - 4 / 6) + (4 - 8 / 6)) / 3),  # γ = 6/4 (reference longer)
        ([10], 5, 4, 1, 5.0),  # d_1 past the sentence's end: LAAL = d_1 (shifted)
    ],
)
def test_stream_laal_table(
    delays: list[int], offset: int, n_src: int, n_ref: int, expected: float
) -> None:
    assert stream_laal(delays, offset, n_src, n_ref) == pytest.approx(expected)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.data())
def test_stream_laal_at_offset_zero_is_laal(n_src: int, n_ref: int, data: st.DataObject) -> None:
    delays = sorted(data.draw(st.lists(st.integers(1, n_src), min_size=1, max_size=15)))
    offset = data.draw(st.integers(0, 50))
    plain = length_adaptive_average_lagging(delays, n_src, n_ref)
    assert stream_laal(delays, 0, n_src, n_ref) == pytest.approx(plain)
    shifted = [d + offset for d in delays]
    assert stream_laal(shifted, offset, n_src, n_ref) == pytest.approx(plain)


def test_emission_times_charge_compute_serially_not_idle_time() -> None:
    # word 1 at source word 1 (400 ms) + 10 ms; word 2 in the same step; word 3 waits for
    # source word 3 (1200 ms), then 40 ms more of model time
    assert emission_times([1, 1, 3], [10.0, 10.0, 50.0], ms_per_word=400) == [410, 410, 1240]
    # a model slower than the speaker falls behind: 500 ms per word at 400 ms per word
    assert emission_times([1, 2], [500.0, 1000.0], ms_per_word=400) == [900, 1400]
    with pytest.raises(ValueError, match="entries"):
        emission_times([1], [], ms_per_word=400)


# ---- scoring a document whose alignment is known -----------------------------------------------
def _doc() -> Document:
    sources = (("a", "b", "c"), ("d", "e"), ("f", "g", "h", "i"))
    return Document("known", sources, ("x y z", "u v", "p q r s"))


def test_score_document_with_known_alignment() -> None:
    doc = _doc()
    hyp = "x y z u v p q r s"
    delays = (2, 3, 3, 4, 5, 7, 8, 9, 9)  # source words received in the document
    stats = SentenceStats(
        0,
        9,
        " ".join(doc.references),
        hyp,
        delays,
        compute_ms=(0.0,) * 9,
        source=" ".join(doc.words),
    )
    cfg = LatencyConfig(rate=2.5)
    result, (record,) = score_documents("p", [doc], [stats], cfg)
    assert record.segments == doc.references
    assert result.quality.bleu == pytest.approx(100.0)
    # sentence 1: shifted 2,3,3 over 3 words, γ=1, τ=2: (2 + 2)/2 = 2;  sentence 2: offset 3,
    # shifted 1,2 over 2 words, τ=2: (1 + 1)/2 = 1;  sentence 3: offset 5, shifted 2,3,4,4, τ=3:
    # (2+2+2)/3 = 2
    laal = [x.stream_laal for x in record.latency if x is not None]
    assert laal == pytest.approx([2.0, 1.0, 2.0])
    assert result.stream_laal == pytest.approx(5 / 3)
    assert result.stream_laal_median == pytest.approx(2.0)
    assert result.ca_stream_laal == pytest.approx(5 / 3 * 400)  # no compute: words x 400 ms
    # LongYAAL: as LAAL but only words before the end of the *stream* (9 words) count:
    # sentence 1 keeps its 3rd word (2 + 2 + 1)/3; sentence 2 (1 + 1)/2; sentence 3: its words
    # at shifted 4, the stream's end, do not count: (2 + 2)/2
    yaal = [x.long_yaal for x in record.latency if x is not None]
    assert yaal == pytest.approx([5 / 3, 1.0, 2.0])
    assert result.long_yaal == pytest.approx((5 / 3 + 3) / 3) and result.long_yaal_scored == 3
    assert result.ca_long_yaal == pytest.approx((5 / 3 + 3) / 3 * 400)
    line = record.record(ms_per_word=400.0)
    assert line["elapsed"] == list(delays)  # in source words, as the delays; no compute
    assert line["segments"] == list(doc.references) and line["sentence_offsets"] == [0, 3, 5]
    json.dumps(line)


def test_an_empty_segment_counts_at_full_latency_or_is_skipped() -> None:
    doc = _doc()
    hyp, delays = "x y z p q r s", (3, 3, 3, 9, 9, 9, 9)
    stats = SentenceStats(0, 9, "", hyp, delays, source=" ".join(doc.words))
    full, (rec,) = score_documents("p", [doc], [stats], LatencyConfig())
    assert rec.segments[1] == "" and full.empty == 1
    assert rec.latency[1] is not None and rec.latency[1].stream_laal == 2.0  # |X_2| words
    skip, (rec2,) = score_documents("p", [doc], [stats], LatencyConfig(empty=EmptyHypothesis.SKIP))
    assert rec2.latency[1] is None and skip.stream_laal != full.stream_laal


def test_the_median_stream_laal_is_not_carried_by_one_far_off_sentence() -> None:
    # the last sentence's words all come at the end of its 30 source words, 30 words after it
    # began (as when resegmentation hands it words from far later in the stream): its
    # StreamLAAL is 30, the mean jumps to 11, the median stays with the other two sentences
    last = tuple(f"w{i}" for i in range(30))
    doc = Document("far", (("a", "b", "c"), ("d", "e"), last), ("x y z", "u v", "p q r s"))
    stats = SentenceStats(0, 35, "", "x y z u v p q r s", (2, 3, 3, 4, 5, 35, 35, 35, 35),
                          source=" ".join(doc.words))
    result, _ = score_documents("p", [doc], [stats], LatencyConfig())
    assert result.stream_laal == pytest.approx((2 + 1 + 30) / 3)
    assert result.stream_laal_median == pytest.approx(2.0)
    assert result.as_dict()["stream_laal_median"] == pytest.approx(2.0)


# ---- documents -------------------------------------------------------------------------------
def test_read_documents_blocks_folders_and_styles(tmp_path: Path) -> None:
    (tmp_path / "src.txt").write_text("Ich bin da.\nDu, auch!\n\n\nEr geht.\n")
    (tmp_path / "ref.txt").write_text("I am here.\nYou too!\n\nHe goes.\n")
    docs = read_documents(tmp_path / "src.txt", tmp_path / "ref.txt", style=SourceStyle.ASR)
    assert [d.name for d in docs] == ["doc1", "doc2"]
    assert docs[0].words == ["ich", "bin", "da", "du", "auch"] and docs[0].offsets == [0, 3]
    for side, text in (("s", "Ich bin da.\nDu auch.\n"), ("r", "I am.\nYou.\n")):
        (tmp_path / side).mkdir()
        (tmp_path / side / "talk1.txt").write_text(text)
    (docs_dir,) = read_documents(tmp_path / "s", tmp_path / "r")
    assert docs_dir.name == "talk1.txt" and docs_dir.sources[1] == ("Du", "auch.")


def test_read_documents_refuses_bad_input(tmp_path: Path) -> None:
    (tmp_path / "src.txt").write_text("a b\nc\n")
    (tmp_path / "ref.txt").write_text("x\n")
    with pytest.raises(ValueError, match="2 source sentences but 1 reference"):
        read_documents(tmp_path / "src.txt", tmp_path / "ref.txt")
    (tmp_path / "ref2.txt").write_text("x\n\ny\n")
    with pytest.raises(ValueError, match="documents"):
        read_documents(tmp_path / "src.txt", tmp_path / "ref2.txt")
    (tmp_path / "p.txt").write_text("a\n...\n")
    (tmp_path / "q.txt").write_text("x\ny\n")
    with pytest.raises(ValueError, match="no source words left"):
        read_documents(tmp_path / "p.txt", tmp_path / "q.txt", style=SourceStyle.ASR)
    with pytest.raises(FileNotFoundError):
        read_documents(tmp_path / "missing", tmp_path / "q.txt")


# ---- the whole evaluation with a scripted model ------------------------------------------------
def scripted_engine() -> Engine:
    """A real tiny engine whose decoder always prefers EOS, then "the": under wait-k it writes
    "the" once per READ from the k-th word of each sentence on (as in test_eval_run)."""
    engine = Engine.tiny(seed=0)
    tok, model = engine.tokenizer, engine.model
    (the,) = tok.encode("the")
    with torch.no_grad():
        model.dec_ln.weight.zero_()
        model.dec_ln.bias.zero_()
        model.dec_ln.bias[0] = 1.0
        model.out_proj.weight.zero_()
        model.out_proj.weight[the, 0] = 1.0
        model.out_proj.weight[EOS_ID, 0] = 2.0
    return engine


@pytest.fixture(scope="module")
def engine() -> Engine:
    return scripted_engine()


def test_evaluate_long_form_streams_each_document_as_one_sequence(engine: Engine) -> None:
    doc = Document("d", (("a", "b", "cc."), ("d", "e", "f", "gg.")), ("the", "the the"))
    result, (rec,) = evaluate_long_form(
        engine, "wait-k:k=2", [doc], run_config=RunConfig(loop_guard=0)  # "the" again and again
    )
    # the session splits at "." here; in each sentence word-level wait-2 writes word i once
    # i + 1 source words are read; the delays count words of the whole document
    assert rec.stats.prediction == "the the the"
    assert rec.stats.delays == (2, 5, 6)
    assert rec.segments == ("the", "the the")
    assert result.quality.chrf == pytest.approx(100.0)
    laal = [x.stream_laal for x in rec.latency if x is not None]
    # sentence 1: one word at d=2 of |X|=3: 2;  sentence 2 starts after 3 words: delays
    # 5,6 -> 2,3 over 4 source words, γ = 2/4: (2 + (3 - 2)) / 2
    assert laal == pytest.approx([2.0, 1.5])


def test_eval_cli_long_form(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoint(
        tmp_path / "model" / "model.pt",
        {
            "model_config": engine.model.cfg.to_dict(),
            "model": engine.model.state_dict(),
            "tokenizer": engine.tokenizer.to_bytes(),
            "meta": {"name": "scripted", "src": "de", "tgt": "en"},
        },
    )
    (tmp_path / "src.txt").write_text("Ein Hund. Er läuft!\nNoch einer.\n\nDas Ende.\n")
    (tmp_path / "ref.txt").write_text("A dog. He runs!\nOne more.\n\nThe end.\n")
    out = tmp_path / "out"
    code = main(
        [
            "eval",
            "--long-form",
            "--source-view",
            "recognizer",
            "--policy",
            "wait-k:k=1",
            "--source",
            str(tmp_path / "src.txt"),
            "--reference",
            str(tmp_path / "ref.txt"),
            "--model",
            str(tmp_path / "model"),
            "--output",
            str(out),
            "--json",
            "--no-progress",
            "--threads",
            "1",
        ]
    )
    assert code == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["documents"] == 2 and row["sentences"] == 3
    assert row["bleu_signature"].startswith("nrefs:1|") and row["stream_laal"] is not None
    lines = (out / "wait-k_k=1" / "instances.log").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["source"] for r in records] == ["ein hund er läuft noch einer", "das ende"]
    assert [len(r["segments"]) for r in records] == [2, 1]
    assert all(len(r["delays"]) == len(r["prediction"].split()) for r in records)
    assert json.loads((out / "wait-k_k=1" / "scores.json").read_text())["sentences"] == 3
    record = json.loads((out / "wait-k_k=1" / "run.json").read_text())
    assert record["model"]["name"] == "scripted" and record["test_set"]["items"] == 2
    assert record["arguments"]["long_form"] is True
    assert record["arguments"]["source_view"] == "recognizer"
    code = main(
        [
            "eval",
            "--long-form",
            "--policy",
            "wait-k:k=1",
            "--source",
            str(tmp_path / "src.txt"),
            "--reference",
            str(tmp_path / "nope.txt"),
        ]
    )
    assert code == 2
