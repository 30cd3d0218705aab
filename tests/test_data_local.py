"""Local aligned files as corpus sources: reading, grouping into documents, leakage-free splits,
manifest entries and the errors a user meets; and the recognizer view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.cli import main
from simulmt.data.asr import recognizer_view
from simulmt.data.build import BuildConfig, build_corpus
from simulmt.data.corpus import read_parallel
from simulmt.data.sources import parse_sources
from simulmt.data.split import SplitConfig
from simulmt.data.src_local import (
    LocalSourceError,
    components,
    group_documents,
    local_files,
    shared_sources,
)


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _tatoeba_like(root: Path, n: int = 600) -> Path:
    """n pairs where every German sentence has two English translations (as in Tatoeba)."""
    de, en = [], []
    for i in range(n // 2):
        de += [f"Das ist Satz Nummer {i}."] * 2
        en += [f"This is sentence number {i}.", f"That is sentence {i}."]
    _write(root / "tat.de", de)
    _write(root / "tat.en", en)
    return root / "tat"


def test_components_join_pairs_sharing_either_side_transitively() -> None:
    pairs = [("a", "x"), ("b", "y"), ("A", "z"), ("c", "z"), ("d", "w")]
    groups = sorted(sorted(g) for g in components(pairs))
    assert groups == [[0, 2, 3], [1], [4]]  # a~A (case folded), A~c through z
    assert sorted(sorted(g) for g in components(pairs, block=2)) == [[0, 1, 2, 3], [4]]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from("uvwxyz")), max_size=30))
def test_documents_never_split_a_shared_sentence(pairs: list[tuple[str, str]]) -> None:
    docs = list(group_documents("t", pairs))
    assert sorted(p for d in docs for p in d.pairs) == sorted(pairs)
    owner: dict[tuple[int, str], str] = {}
    for doc in docs:
        for pair in doc.pairs:
            for side in (0, 1):
                assert owner.setdefault((side, pair[side]), doc.name) == doc.name


def test_build_with_a_local_source_splits_without_leakage(tmp_path: Path) -> None:
    source = local_files("tat", _tatoeba_like(tmp_path), licence="CC-BY 2.0 FR")
    config = BuildConfig(out=tmp_path / "out", cache=tmp_path / "cache",
                         sources=tuple(parse_sources("tat", [source])), progress=False,
                         split=SplitConfig(heldout_fraction=0.1, min_heldout_pairs=10))
    manifest = build_corpus(config)
    splits = {s: read_parallel(tmp_path / "out", s, "de", "en") for s in ("train", "dev", "test")}
    assert splits["test"] and splits["dev"]
    for side in (0, 1):
        train = {p[side] for p in splits["train"]}
        assert not train & {p[side] for s in ("dev", "test") for p in splits[s]}
    info = manifest["sources"]["tat"]
    assert info["licence"] == "CC-BY 2.0 FR" and info["package"] == "local files"
    assert [f["lines"] for f in info["files"]] == [600, 600]
    assert all(len(f["sha256"]) == 64 for f in info["files"])


def test_tsv_source_and_its_errors(tmp_path: Path) -> None:
    _write(tmp_path / "mine.tsv", ["Guten Morgen.\tGood morning.", "Danke.\tThanks."])
    docs = list(local_files("mine", tmp_path / "mine.tsv").read([]))
    assert [p for d in docs for p in d.pairs] == [("Guten Morgen.", "Good morning."),
                                                  ("Danke.", "Thanks.")]
    _write(tmp_path / "bad.tsv", ["Guten Morgen."])
    with pytest.raises(LocalSourceError, match=r"bad.tsv:1: expected 'German<TAB>English'"):
        list(local_files("bad", tmp_path / "bad.tsv").read([]))
    with pytest.raises(LocalSourceError, match=r"nothing.en not found; accepted: X.de \+ X.en"):
        _write(tmp_path / "nothing.de", ["a"])
        local_files("x", tmp_path / "nothing")
    _write(tmp_path / "uneven.de", ["a", "b"])
    _write(tmp_path / "uneven.en", ["a"])
    with pytest.raises(LocalSourceError, match="has 2 lines but .* has 1"):
        list(local_files("u", tmp_path / "uneven.de").read([]))


def test_shared_corpora_are_found_and_news_is_not_training_data(tmp_path: Path) -> None:
    (tmp_path / "tatoeba").mkdir()
    (tmp_path / "newstest").mkdir()
    _tatoeba_like(tmp_path / "tatoeba")
    (tmp_path / "tatoeba" / "tat.de").rename(tmp_path / "tatoeba" / "tatoeba.de")
    (tmp_path / "tatoeba" / "tat.en").rename(tmp_path / "tatoeba" / "tatoeba.en")
    _write(tmp_path / "newstest" / "newstest2015-ende.de", ["x"])
    _write(tmp_path / "newstest" / "newstest2015-ende.en", ["x"])
    found = shared_sources(tmp_path)
    assert [f.name for f in found] == ["tatoeba"]
    assert "manythings.org/anki and tatoeba.org" in found[0].licence


def test_cli_local_source_and_bad_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stem = _tatoeba_like(tmp_path)
    args = ["data", "build", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "c"),
            "--corpora", "none", "--local", f"mine={stem}.de", "--sources", "mine",
            "--min-heldout", "5", "--heldout-fraction", "0.1", "--no-progress"]
    assert main(args) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert list(manifest["sources"]) == ["mine"]
    assert main([*args[:8], "--local", "nopath", "--no-progress"]) == 2
    assert "--local 'nopath' must look like NAME=PATH" in capsys.readouterr().err
    assert main([*args[:8], "--local", "ding=" + str(stem), "--no-progress"]) == 2
    assert "must be unique and differ from wesnoth" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "view"), [
    ("Herr Modi reist nach Japan, um ...", "herr modi reist nach japan um"),
    ("Polizei verhaftet 20-Jährigen.", "polizei verhaftet 20-jährigen"),
    ("„Geht's noch?“, fragte er – 3,5 % mehr; 1.000 €.", "geht's noch fragte er 3,5 mehr 1.000"),
    ("...", ""),
])
def test_recognizer_view(text: str, view: str) -> None:
    assert recognizer_view(text) == view


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_recognizer_view_is_idempotent_lowercase_without_outer_punctuation(text: str) -> None:
    view = recognizer_view(text)
    assert recognizer_view(view) == view
    assert view == view.lower() and view == view.strip()
    assert not any(w[0] in ".,!?;:\"„“" or w[-1] in ".,!?;:\"„“" for w in view.split())
