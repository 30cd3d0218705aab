"""The sentence-boundary detector: features, streaming = batch, decisions, cut points, files,
and `simulmt train-segmenter` on a tiny synthetic corpus."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.cli import main
from simulmt.segment import (
    Segmenter,
    SegmenterError,
    SourceStyle,
    apply_style,
    cut_point,
    load_segmenter,
    recognizer_view,
    save_segmenter,
)
from simulmt.segment.data import make_stream, read_documents
from simulmt.segment.model import Encoder, SegmenterConfig, SegmenterNet
from simulmt.segment.train import FitConfig, boundary_probs, fit, score, tune_thresholds
from simulmt.smallnet.features import N_FLAGS, N_IDS, word_features

TINY = dict(buckets=512, dim=16, hidden=24, window=4, max_lookahead=3)


def synthetic_documents(n: int, seed: int = 0) -> list[list[str]]:
    """Sentences that always end with a verb from a small set ("geht", "kommt", "bleibt") and
    start with a pronoun: learnable without punctuation or case."""
    rng = random.Random(seed)
    fillers = "der hund nach hause heute mit dem auto morgen schnell".split()
    docs = []
    for _ in range(n):
        doc = []
        for _ in range(rng.randint(3, 6)):
            middle = rng.sample(fillers, rng.randint(1, 4))
            verb = rng.choice(["geht", "kommt", "bleibt"])
            doc.append(" ".join([rng.choice(["Er", "Sie", "Wir"]), *middle, verb + "."]))
        docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def trained() -> SegmenterNet:
    torch.manual_seed(0)
    net = SegmenterNet(SegmenterConfig(**TINY))  # type: ignore[arg-type]
    docs = synthetic_documents(60)
    streams = {s: make_stream(docs, s, 512) for s in (SourceStyle.TEXT, SourceStyle.ASR)}
    fit(
        net,
        streams,
        FitConfig(
            steps=150,
            batch=16,
            length=32,
            lr=1e-2,
            styles=((SourceStyle.TEXT, 0.5), (SourceStyle.ASR, 0.5)),
        ),
    )
    tune_thresholds(net, list(streams.values()))
    return net


def test_views() -> None:
    assert recognizer_view("Er sagte: „Nein!“ – und ging.") == "er sagte nein und ging"
    words = ["Er", "geht.", "–"]
    assert apply_style(words, SourceStyle.LOWER) == ["er", "geht.", "–"]
    assert apply_style(words, SourceStyle.NO_PUNCT) == ["Er", "geht"]
    assert apply_style(words, SourceStyle.TEXT) == words


def test_features_are_stable_and_carry_case_and_punctuation() -> None:
    ids, flags = word_features("Haus.", 1000)
    assert len(ids) == N_IDS and len(flags) == N_FLAGS
    assert ids == word_features("Haus.", 1000)[0]  # crc32: the same in every process
    assert ids[0] == word_features("haus", 1000)[0][0]  # same lowercased core
    assert flags[0] == 1.0 and flags[2] == 1.0  # capitalised, sentence-final punctuation
    assert word_features("haus", 1000)[1][:3] == [0.0, 0.0, 0.0]


WORD = st.sampled_from("er sie geht kommt. der Hund , heute 42 –".split())


@pytest.mark.parametrize("encoder", list(Encoder))
@settings(max_examples=15, deadline=None)
@given(words=st.lists(WORD, min_size=1, max_size=20))
def test_streaming_equals_whole_sequence(encoder: Encoder, words: list[str]) -> None:
    """Word-by-word pushes give the probabilities of one pass over the stream, so F1 measured
    offline is what a live session gets."""
    torch.manual_seed(1)
    net = SegmenterNet(SegmenterConfig(encoder=encoder, **TINY)).eval()  # type: ignore[arg-type]
    stream = make_stream([[" ".join(words)]], SourceStyle.TEXT, 512)
    probs = boundary_probs(net, stream)  # (N, L+1)
    seg = Segmenter(net, lookahead=2)
    decided = seg.push_many(stream.words)
    assert [d.index for d in decided] == list(range(len(words) - 2))
    for d in decided:
        assert d.lookahead == 2 and d.probability == pytest.approx(
            float(probs[d.index, 2]), abs=1e-5
        )


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 12), lookahead=st.integers(0, 3))
def test_every_word_is_decided_once_in_order(n: int, lookahead: int) -> None:
    net = SegmenterNet(SegmenterConfig(**TINY)).eval()  # type: ignore[arg-type]
    seg = Segmenter(net, lookahead=lookahead)
    decisions = seg.push_many(["wort"] * n) + seg.finish()
    assert [d.index for d in decisions] == list(range(n))
    assert all(d.lookahead == min(lookahead, n - 1 - d.index) for d in decisions[:-1])
    assert seg.words_seen == 0  # finish resets the stream
    assert decisions[-1].boundary or lookahead == 0  # a pending last word ends a sentence


def test_trained_detector_finds_boundaries_without_punctuation(trained: SegmenterNet) -> None:
    test = make_stream(synthetic_documents(20, seed=7), SourceStyle.ASR, 512)
    f1 = {s.lookahead: s.f1 for s in score(trained, test, [0, 1, 3])}
    assert f1[1] > 0.9 and f1[3] > 0.9  # the next word is a pronoun: easy with lookahead
    seg = Segmenter(trained, lookahead=1)
    words = "er der hund geht sie heute kommt wir mit dem auto bleibt".split()
    ends = [d.index for d in seg.push_many(words) + seg.finish() if d.boundary]
    assert ends == [3, 6, 11]


def test_cut_point_picks_the_likeliest_boundary_among_the_last_words(trained: SegmenterNet) -> None:
    words = "er der hund nach hause geht sie mit dem auto heute morgen schnell".split()
    assert cut_point(trained, words, window=10) == 6  # after "geht"
    assert cut_point(trained, words, window=3) >= len(words) - 2  # only the last 3 words
    assert Segmenter(trained).cut_point(words, window=10) == 6
    with pytest.raises(ValueError, match="at least one"):
        cut_point(trained, [])
    with pytest.raises(ValueError, match="whitespace"):
        cut_point(trained, ["a b"])


def test_bad_options_are_refused() -> None:
    net = SegmenterNet(SegmenterConfig(**TINY))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lookahead"):
        Segmenter(net, lookahead=4)
    with pytest.raises(ValueError, match="threshold"):
        Segmenter(net, threshold=1.5)
    with pytest.raises(ValueError, match="non-empty"):
        Segmenter(net).push("")


def test_save_load_roundtrip_and_corrupt_files(trained: SegmenterNet, tmp_path: Path) -> None:
    path = tmp_path / "seg.pt"
    save_segmenter(path, trained, meta={"note": "test"})
    net, meta = load_segmenter(path)
    assert meta == {"note": "test"} and torch.equal(net.thresholds, trained.thresholds)
    words = "er geht sie kommt".split()
    a = [d.probability for d in Segmenter(trained, lookahead=0).push_many(words)]
    b = [d.probability for d in Segmenter(net, lookahead=0).push_many(words)]
    assert a == pytest.approx(b, abs=1e-2)  # weights are stored as float16
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(SegmenterError, match="corrupt or truncated"):
        load_segmenter(path)
    torch.save({"format": "something-else"}, path)
    with pytest.raises(SegmenterError, match="not a segmenter"):
        load_segmenter(path)
    with pytest.raises(SegmenterError, match="does not exist"):
        Segmenter.load(tmp_path / "missing.pt")


def test_read_documents_splits_at_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "t.de").write_text("Ein Satz.\nNoch einer.\n\n\nNeues Dokument.\n")
    assert read_documents(tmp_path / "t.de") == [["Ein Satz.", "Noch einer."], ["Neues Dokument."]]


def test_train_segmenter_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, seed, n in (("train", 0, 60), ("dev", 1, 10), ("test", 2, 10)):
        docs = synthetic_documents(n, seed)
        (tmp_path / f"{name}.de").write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    out = tmp_path / "seg" / "segmenter.pt"
    args = [
        "train-segmenter",
        "--text",
        str(tmp_path / "train.de"),
        "--dev-text",
        str(tmp_path / "dev.de"),
        "--test-text",
        str(tmp_path / "test.de"),
        "--out",
        str(out),
        "--steps",
        "120",
        "--batch",
        "16",
        "--length",
        "32",
        "--buckets",
        "512",
        "--dim",
        "16",
        "--hidden",
        "24",
        "--lr",
        "0.01",
        "--json",
        "--no-progress",
    ]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert out.is_file() and report["bytes"] < 200_000
    assert [r["lookahead"] for r in report["f1_asr"]] == [0, 2, 4]
    assert report["f1_asr"][1]["f1"] > 0.8 and report["us_per_word"] > 0
    assert (
        main(
            [
                "train-segmenter",
                "--out",
                str(out),
                "--score-only",
                "--test-text",
                str(tmp_path / "test.de"),
                "--json",
            ]
        )
        == 0
    )
    again = json.loads(capsys.readouterr().out)
    assert again["f1_asr"][1]["f1"] == pytest.approx(report["f1_asr"][1]["f1"], abs=0.02)
    # a hand-set threshold is written into the file (and recorded), the other heads kept;
    # the extreme one marks every word a boundary, so recall is 1 and precision falls
    rescore = ["train-segmenter", "--out", str(out), "--score-only",
               "--test-text", str(tmp_path / "test.de"), "--json"]
    assert main([*rescore, "--set-threshold", "2=0.01"]) == 0
    low = json.loads(capsys.readouterr().out)
    assert low["thresholds"][2] == 0.01
    assert [t for i, t in enumerate(low["thresholds"]) if i != 2] == [
        t for i, t in enumerate(again["thresholds"]) if i != 2]
    assert low["f1_asr"][1]["recall"] == 1.0 and low["f1_asr"][1]["f1"] < again["f1_asr"][1]["f1"]
    net, meta = load_segmenter(out)
    assert float(net.thresholds[2]) == pytest.approx(0.01) and meta["thresholds_set"] == {"2": 0.01}
    capsys.readouterr()
    for bad in ("2=1.5", "9=0.3", "two=0.3", "2"):
        assert main([*rescore, "--set-threshold", bad]) == 2
        err = capsys.readouterr().err
        assert f"simulmt train-segmenter: --set-threshold {bad!r}: expected LOOKAHEAD=P" in err
    assert float(load_segmenter(out)[0].thresholds[2]) == pytest.approx(0.01)  # file untouched
    assert main(["train-segmenter", "--out", str(tmp_path / "x.pt")]) == 2  # no training text
    out.write_bytes(b"garbage")
    assert main(["train-segmenter", "--out", str(out), "--score-only"]) == 2


def test_the_shipped_detector_is_news_free_and_finds_sentence_ends() -> None:
    """The bundled segmenter.pt: trained without any news set (news is dev/test only), and
    it ends sentences of punctuated text where the full stops are."""
    from simulmt.engine import SEGMENTER_FILE, default_model_dir

    net, meta = load_segmenter(default_model_dir() / SEGMENTER_FILE)
    assert meta["train"] and not any("news" in str(t).lower() for t in meta["train"])
    text = (
        "Das Parlament hat heute über den Haushalt abgestimmt . Die Mehrheit war klar . "
        "Morgen beginnt die Debatte über die Landwirtschaft ."
    ).split()
    seg = Segmenter(net, lookahead=2)
    decisions = seg.push_many(text) + seg.finish()
    ends = [d.index for d in decisions if d.boundary]
    assert ends == [i for i, w in enumerate(text) if w == "."]
