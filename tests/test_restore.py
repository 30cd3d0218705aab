"""The case and comma restorer: labels from written text, the applied prediction, streaming =
whole-sequence decisions, learning on a tiny synthetic corpus, files, `simulmt train-restorer`,
and recognizer sessions (words held for the lookahead, restored before the policy reads them)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.cli import main
from simulmt.data.asr import recognizer_word
from simulmt.engine import Engine
from simulmt.input.kinds import InputKind
from simulmt.output.updates import Update
from simulmt.restore import (
    Case,
    Punct,
    Restorer,
    RestorerConfig,
    RestorerError,
    RestorerNet,
    label_words,
    load_restorer,
    restore_word,
    save_restorer,
)
from simulmt.restore.train import FitConfig, Sentences, fit, score
from simulmt.segment.model import SegmenterConfig, SegmenterNet
from simulmt.session import Session
from simulmt.smallnet.features import words_features

TINY = RestorerConfig(buckets=512, dim=16, hidden=32, head=32, max_lookahead=2)
NOUNS = ["hund", "auto", "haus", "buch"]


def synthetic_sentences(n: int, seed: int = 0) -> list[str]:
    """Written sentences whose case and commas follow rules a restorer can learn: nouns and
    sentence starts are capitalised, "usa" is all caps, and "sagt" takes a comma only when
    "dass" follows it (so only a restorer that reads one word ahead can place it)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        subject = rng.choice(["Er", "Sie", "Die Frau"])
        noun = rng.choice(NOUNS).capitalize()
        if rng.random() < 0.5:
            out.append(f"{subject} sagt, dass der {noun} in den USA ist.")
        else:
            out.append(f"{subject} sagt nichts über den {noun}.")
    return out


@pytest.fixture(scope="module")
def trained() -> RestorerNet:
    torch.manual_seed(0)
    net = RestorerNet(TINY)
    docs = [synthetic_sentences(4, seed) for seed in range(80)]
    fit(net, Sentences.from_documents(docs, TINY.buckets), FitConfig(steps=150, batch=16, lr=1e-2))
    return net


def test_labels_come_from_the_written_words() -> None:
    lab = label_words("Der Mann , der die USA liebt, kam – gestern?".split())
    assert lab.words == ["der", "mann", "der", "die", "usa", "liebt", "kam", "gestern"]
    assert lab.cases == [
        Case.CAPITAL,
        Case.CAPITAL,
        Case.LOWER,
        Case.LOWER,
        Case.UPPER,
        Case.LOWER,
        Case.LOWER,
        Case.LOWER,
    ]
    assert lab.puncts == [
        Punct.NONE,
        Punct.COMMA,
        Punct.NONE,
        Punct.NONE,
        Punct.NONE,
        Punct.COMMA,
        Punct.NONE,
        Punct.QUESTION,
    ]


def test_restore_word_applies_case_and_commas_only() -> None:
    assert restore_word("usa", Case.UPPER, Punct.NONE) == "USA"
    assert restore_word("haus", Case.CAPITAL, Punct.COMMA) == "Haus,"
    assert restore_word("haus", Case.LOWER, Punct.PERIOD) == "haus"  # sentence ends: segmenter
    assert restore_word("Merkel", Case.LOWER, Punct.NONE) == "Merkel"  # never lowered
    assert restore_word("ja.", Case.LOWER, Punct.COMMA) == "ja."  # no comma after punctuation
    assert restore_word("straße", Case.UPPER, Punct.NONE) == "Straße"  # "STRASSE" changes it
    assert restore_word("ßx", Case.CAPITAL, Punct.NONE) == "ßx"


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet="abcßäöüxyz019-.'", min_size=1, max_size=12),
    st.sampled_from(list(Case)),
    st.sampled_from(list(Punct)),
)
def test_restoring_keeps_the_recognizers_word(word: str, case: Case, punct: Punct) -> None:
    restored = restore_word(word, case, punct)
    assert recognizer_word(restored) == recognizer_word(word)
    assert restored.removesuffix(",").lower() == word.lower()


def _whole_sequence(net: RestorerNet, words: list[str], lookahead: int) -> list[str]:
    """What `Restorer` must give: word j decided by head min(lookahead, words after j) on the
    state after word j + that many, computed over the whole sequence at once."""
    ids, flags = words_features(words, net.cfg.buckets)
    with torch.no_grad():
        x = net.embed_words(ids[None], flags[None])[0]  # (T, dim)
        h = net.encode(x[None])[0][0]  # (T, hidden)
        out = []
        for j, w in enumerate(words):
            ahead = min(lookahead, len(words) - 1 - j)
            o = net.decide(ahead, h[j + ahead], x[j])
            out.append(restore_word(w, Case(int(o[:3].argmax())), Punct(int(o[3:].argmax()))))
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.sampled_from("er sagt dass der hund in den usa ist nichts".split()),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 2),
    st.integers(0, 3),
)
def test_streaming_gives_every_word_once_in_order_as_the_whole_sequence(
    words: list[str], lookahead: int, seed: int
) -> None:
    torch.manual_seed(seed)
    net = RestorerNet(TINY).eval()
    r = Restorer(net, lookahead=lookahead)
    got: list[str] = []
    for i, w in enumerate(words):
        got += r.push(w)
        assert len(got) == max(0, i + 1 - lookahead) and r.pending == i + 1 - len(got)
    got += r.finish()
    assert got == _whole_sequence(net, words, lookahead)
    assert r.pending == 0 and r.push(words[0]) == ([] if lookahead else got[:1])


def test_a_trained_restorer_learns_case_and_the_comma_that_needs_lookahead(
    trained: RestorerNet,
) -> None:
    test = Sentences.from_documents([synthetic_sentences(60, seed=999)], TINY.buckets)
    s0, s1, s2 = score(trained, test, [0, 1, 2])
    assert s1.case_accuracy > 0.97 and s1.comma_recall > 0.95 and s1.comma_precision > 0.95
    assert s2.comma_recall > 0.95
    # head 0 decides "sagt" before seeing "dass": it cannot place that comma reliably
    assert s0.comma_recall + s0.comma_precision < s1.comma_recall + s1.comma_precision
    r = Restorer(trained, lookahead=2)
    words = [w for word in "sie sagt dass der hund in den usa ist".split() for w in r.push(word)]
    assert words + r.finish() == "Sie sagt, dass der Hund in den USA ist".split()


def test_bad_options_and_files_are_refused(trained: RestorerNet, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="restore lookahead must be in 0..2"):
        Restorer(trained, lookahead=3)
    with pytest.raises(ValueError, match="non-empty without whitespace"):
        Restorer(trained).push("zwei wörter")
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        RestorerConfig(hidden=0)
    path = tmp_path / "r" / "restorer.pt"
    save_restorer(path, trained, meta={"train": ["x"]})
    net, meta = load_restorer(path)
    assert meta == {"train": ["x"]} and net.cfg == TINY
    words = "er sagt dass der hund da ist".split()
    assert _whole_sequence(net, words, 2) == _whole_sequence(trained, words, 2)
    stored = torch.load(path, weights_only=True)["model"]
    assert stored["embed.weight"].dtype == torch.int8  # the big table: one byte a weight
    assert (
        net.embed.weight - trained.embed.weight
    ).abs().max() < 0.01 * trained.embed.weight.abs().max()
    with pytest.raises(RestorerError, match="does not exist"):
        load_restorer(tmp_path / "none.pt")
    path.write_bytes(b"garbage")
    with pytest.raises(RestorerError, match="corrupt or truncated"):
        load_restorer(path)
    torch.save({"format": "simulmt-segmenter-v1"}, path)
    with pytest.raises(RestorerError, match="is not a restorer file"):
        load_restorer(path)


def test_train_restorer_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.de").write_text(
        "\n\n".join("\n".join(synthetic_sentences(4, s)) for s in range(80)) + "\n"
    )
    (tmp_path / "test.de").write_text("\n".join(synthetic_sentences(30, 7)) + "\n")
    out = tmp_path / "restorer.pt"
    tiny = ["--buckets", "512", "--dim", "16", "--hidden", "32", "--batch", "16"]
    args = [
        "train-restorer",
        "--text",
        str(tmp_path / "train.de"),
        "--out",
        str(out),
        "--steps",
        "150",
        "--lr",
        "0.01",
        "--max-run",
        "2",
        *tiny,
        "--json",
        "--no-progress",
    ]
    assert main([*args, "--test-text", str(tmp_path / "test.de")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["lookahead"] for s in report["scores"]] == [0, 1, 2] and report["us_per_word"] > 0
    assert report["scores"][2]["case_accuracy"] > 0.95 and report["bytes"] < 200_000
    again = [
        "train-restorer",
        "--out",
        str(out),
        "--score-only",
        "--json",
        "--test-text",
        str(tmp_path / "test.de"),
    ]
    assert main(again) == 0
    assert json.loads(capsys.readouterr().out)["scores"][2]["case_accuracy"] == pytest.approx(
        report["scores"][2]["case_accuracy"], abs=0.01
    )
    assert main(["train-restorer", "--out", str(tmp_path / "x.pt")]) == 2  # no training text
    out.write_bytes(b"garbage")
    assert main(["train-restorer", "--out", str(out), "--score-only"]) == 2


# ---- recognizer sessions ----


def _finals(updates: list[Update]) -> list[str]:
    return [u.source for u in updates if u.final]


def test_a_recognizer_session_restores_words_before_the_policy_reads_them(
    trained: RestorerNet,
) -> None:
    engine = Engine.tiny(0)
    s = Session(
        engine,
        policy="wait-k:k=1",
        segmentation="client",
        input_kind="recognizer",
        restorer=Restorer(trained, lookahead=2),
    )
    words = "sie sagt dass der hund in den usa ist".split()
    out: list[Update] = []
    for i, w in enumerate(words):
        out += s.push(w)
        seen = sum(len(x.words) for x in s.sentences)
        assert seen == max(0, i - 1)  # word j reaches the sentence once j+2 has arrived
        assert s.backlog_words >= min(i + 1, 2)  # the held words are backlog too
    out += s.finish()
    assert _finals(out) == ["Sie sagt, dass der Hund in den USA ist"]
    text = Session(engine, policy="wait-k:k=1", segmentation="client", restorer=Restorer(trained))
    assert _finals(text.push(" ".join(words)) + text.finish()) == [" ".join(words)]


def test_recognizer_input_needs_a_restorer() -> None:
    engine = Engine.tiny(0)
    with pytest.raises(ValueError, match="input recognizer needs a case and comma restorer"):
        Session(engine, input_kind=InputKind.RECOGNIZER)
    with pytest.raises(ValueError, match="unknown input kind 'speech'; accepted: text, recognizer"):
        Session(engine, input_kind="speech")
    engine.restorer = RestorerNet(TINY).eval()
    with pytest.raises(ValueError, match="restore lookahead must be in 0..2"):
        Session(engine, input_kind="recognizer", restore_lookahead=5)
    # by default, the context that costs no latency: all of it only where nothing is read
    # before a sentence's end and that end releases every held word (full, not auto)
    engine.segmenter = SegmenterNet(SegmenterConfig(buckets=64, dim=4, hidden=4)).eval()
    for policy, segmentation, lookahead in [
        ("full", "punctuation", 2),
        ("full", "client", 2),
        ("full", "auto", 0),
        ("wait-k:k=3", "client", 0),
    ]:
        s = Session(engine, policy=policy, segmentation=segmentation, input_kind="recognizer")
        assert s.restorer is not None and s.restorer.lookahead == lookahead, policy
    s = Session(engine, policy="wait-k:k=2", input_kind="recognizer", restore_lookahead=0)
    assert len(_finals(s.push("der hund kommt") + s.finish())[0].split()) == 3


def test_the_boundary_detector_reads_the_words_as_received(trained: RestorerNet) -> None:
    """The detector was trained on recognizer and written text, not on restored text: it
    reads each word as the recognizer sent it, while the sentence gets the restored word."""
    from tests.test_segmentation import StopDetector

    def run(segmentation: str) -> tuple[list[str], list[str]]:
        det = StopDetector(lookahead=1)
        s = Session(
            Engine.tiny(0),
            policy="wait-k:k=1",
            segmentation=segmentation,
            detector=det,
            input_kind="recognizer",
            restorer=Restorer(trained, lookahead=1),
        )
        out = s.push(" ".join(words)) + s.finish()
        return det.pushes, _finals(out)

    words = "sie sagt nichts stop der hund ist in den usa".split()
    pushes, sentences = run("auto")
    assert pushes == words
    assert sentences == ["Sie sagt nichts stop", "der Hund ist in den USA"]
    assert run("client")[1] == [" ".join(sentences)]


def test_the_shipped_restorer_is_news_free_and_restores_case_and_commas() -> None:
    """The bundled restorer.pt: trained without any news set (news is dev/test only); it
    capitalises nouns, names and acronyms and puts the comma before a subordinate clause."""
    from simulmt.engine import RESTORER_FILE, default_model_dir

    net, meta = load_restorer(default_model_dir() / RESTORER_FILE)
    assert meta["train"] and not any("news" in str(t).lower() for t in meta["train"])
    r = Restorer(net, lookahead=2)
    words = "die bundeskanzlerin sagte in berlin dass die eu und die usa zusammenarbeiten".split()
    restored = [w for word in words for w in r.push(word)] + r.finish()
    assert " ".join(restored) == (
        "Die Bundeskanzlerin sagte in Berlin, dass die EU und die USA zusammenarbeiten"
    )
