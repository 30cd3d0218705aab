"""`simulmt data pack` / `unpack`: a corpus folder comes back byte for byte, also lines the
tokenizer cannot reproduce, and a damaged or foreign pack is refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulmt.cli import main
from simulmt.data.pack import (
    PACK_FILE,
    PackConfig,
    PackError,
    pack_corpus,
    read_manifest,
    unpack_corpus,
)
from simulmt.data.tokenizer import train_tokenizer
from simulmt.train.tiny import tiny_pairs as _tiny_pairs


def _corpus(root: Path) -> Path:
    d = root / "corpus"
    d.mkdir()
    pairs = _tiny_pairs()
    # lines that encode/decode does not reproduce: double and trailing spaces, a tab, an empty
    # line, characters outside the tokenizer's training text
    odd = [("zwei  Leerzeichen ", "two  spaces "), ("Tab\there", ""), ("Grüße 😀", "ẞ € ✓")]
    rows = pairs + odd
    for split, part in (("train", rows), ("dev", pairs[:5]), ("test", pairs[5:9])):
        (d / f"{split}.de").write_text("".join(s + "\n" for s, _ in part), encoding="utf-8")
        (d / f"{split}.en").write_text("".join(t + "\n" for _, t in part), encoding="utf-8")
        names = "".join(("tatoeba" if i % 3 else "europarl") + "\n" for i in range(len(part)))
        (d / f"{split}.source").write_text(names, encoding="utf-8")
    (d / "manifest.json").write_text(json.dumps({"src": "de", "tgt": "en"}) + "\n")
    (d / "train.distill.en").write_text("".join(t + " !\n" for _, t in rows), encoding="utf-8")
    train_tokenizer([x for p in pairs for x in p], d, vocab_size=120, seed=0)
    news = root / "news2013"
    news.with_suffix(".de").write_text("Ein Satz.\nNoch einer", encoding="utf-8")  # no final \n
    news.with_suffix(".en").write_text("A sentence.\nAnother", encoding="utf-8")
    return d


def test_pack_and_unpack_round_trip_exactly(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    pack, back = tmp_path / "pack", tmp_path / "back"
    assert main(["data", "pack", "--data", str(corpus), "--out", str(pack),
                 "--extra", f"newstest2013={tmp_path / 'news2013'}"]) == 0
    manifest = read_manifest(pack)
    assert manifest["files"]["train.de"]["kind"] == "tokens"
    assert manifest["files"]["train.source"]["kind"] == "labels"
    assert manifest["files"]["train.de"]["verbatim"]  # the odd lines were kept as text
    assert main(["data", "unpack", str(pack), "--out", str(back)]) == 0
    expected = {p.name: p.read_bytes() for p in corpus.iterdir()}
    expected["newstest2013.de"] = (tmp_path / "news2013.de").read_bytes()
    expected["newstest2013.en"] = (tmp_path / "news2013.en").read_bytes()
    got = {p.name: p.read_bytes() for p in back.iterdir()}
    assert got == expected
    # the ids are what is stored: the train text takes fewer bytes than itself
    entry = manifest["files"]["train.de"]
    assert entry["packed_bytes"] < entry["bytes"]


def test_a_damaged_or_foreign_pack_is_refused(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    pack = tmp_path / "pack"
    assert main(["data", "pack", "--data", str(corpus), "--out", str(pack)]) == 0
    manifest = json.loads((pack / PACK_FILE).read_text())
    manifest["files"]["dev.en"]["sha256"] = "0" * 64
    (pack / PACK_FILE).write_text(json.dumps(manifest))
    with pytest.raises(PackError, match="dev.en .* differs"):
        unpack_corpus(pack, tmp_path / "back")
    manifest["version"] = 99
    (pack / PACK_FILE).write_text(json.dumps(manifest))
    with pytest.raises(PackError, match="version 99"):
        unpack_corpus(pack, tmp_path / "back")
    assert main(["data", "unpack", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    (corpus / "spm.model").unlink()
    assert main(["data", "pack", "--data", str(corpus), "--out", str(tmp_path / "p2")]) == 2
    with pytest.raises(PackError, match="no corpus folder .*nowhere: give --data the folder"):
        pack_corpus(PackConfig(corpus=tmp_path / "nowhere", out=tmp_path / "p3"))
