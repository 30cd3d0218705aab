"""scripts/model_card.py: the card states what the model, the corpus manifest and the
benchmark lines recorded (scripts/model_table.py makes its result tables)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def row(model: str, set_: str, view: str, policy: str, bleu: float, **extra: object) -> str:
    return json.dumps({"set": set_, "view": view, "model": model, "policy": policy, "beam": 1,
                       "bleu": bleu, "al": 3.21, "loops": 0.5,
                       "bleu_signature": "nrefs:1|tok:13a", **extra})


def write_model(model: Path, meta: dict[str, object]) -> None:
    model.mkdir()
    torch.save({
        "meta": meta,
        "model_config": {"vocab_size": 16000, "d_model": 384, "n_heads": 6, "enc_layers": 5,
                         "dec_layers": 3, "d_ff": 1536, "tie_embeddings": True},
        "model": {"w": torch.zeros(1000, 22, dtype=torch.float16),
                  # tied: saved twice, counted once
                  "embed.weight": torch.zeros(100_000, 1, dtype=torch.float16),
                  "out_proj.weight": torch.zeros(100_000, 1, dtype=torch.float16)},
        "train_config": {"wait_k": [1, 3, 0], "target_words": True, "asr_rate": 0.3,
                         "label_smoothing": 0.1, "lr": 0.0008, "warmup": 2000,
                         "max_tokens": 6000, "bf16": True, "threads": 2,
                         "upsample": {"europarl": 4}, "subword_alpha": 0.3},
    }, model / "model.pt")
    (model / "spm.model").write_bytes(b"x" * 1000)


def test_the_card_states_the_recorded_facts(tmp_path: Path) -> None:
    model = tmp_path / "de-en"
    write_model(model, {"name": "simulmt-de-en-base", "src": "de", "tgt": "en", "steps": 12345,
                        "averaged": ["step-12000.pt", "step-12345.pt"], "train_hours": 9.5})
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "manifest.json").write_text(json.dumps({
        "splits": {"train": 1000, "dev": 20, "test": 30},
        "sources": {
            "ding": {"train": 400, "dev": 10, "test": 10, "licence": "GPL-2+",
                     "package": "trans-de-en=1.9-6"},
            "tatoeba": {"train": 600, "dev": 10, "test": 20,
                        "licence": "CC-BY 2.0 FR; attribution: www.manythings.org/anki and "
                                   "tatoeba.org",
                        "files": [{"file": "../shared/corpora/tatoeba/tatoeba.de",
                                   "sha256": "78b90b42ef51b2809d", "lines": 169813}]},
        }}), encoding="utf-8")
    groups = {"groups": {"ding": {"bleu": 12.5}, "tatoeba": {"bleu": 33.25}}}
    new, old = tmp_path / "de-en-base.jsonl", tmp_path / "de-en-small.jsonl"
    new.write_text(row("base", "own", "text", "full", 25.5, **groups) + "\n"
                   + row("base", "newstest2015", "asr", "wait-k:k=3", 10.25) + "\n")
    old.write_text(row("small", "own", "text", "full", 22.0) + "\n")
    notes = tmp_path / "notes.md"
    notes.write_text("## Limits\n\nNews is outside its domains.\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/model_card.py"), "--model", str(model), "--corpus",
         str(corpus), "--results", str(new), "--previous", str(old), "--notes", str(notes)],
        capture_output=True, text=True, check=True).stdout
    assert out.startswith("# Model card: `simulmt-de-en-base`")
    assert "| parameters | 0.1 M |" in out  # 122,000 weights (0.2 M if counted twice)
    assert "causal encoder 5 layers, decoder 3 layers, d_model 384, 6 heads, FFN 1536" in out
    assert "k per batch from {1, 3, full} counted in target words; 30% of the sources" in out
    assert "upsampled: europarl ×4" in out
    assert "(lowercase, no punctuation); subword regularization (every pair's segmentation " \
        "sampled anew each epoch, α 0.3) |" in out
    assert "12,345 updates, 9.5 h wall on 2 CPU threads; shipped: the average of " \
           "step-12000.pt, step-12345.pt" in out
    assert "(float16)" in out and "`spm.model`" in out
    assert "| ding | 400 | 10 | 10 | GPL-2+ | trans-de-en=1.9-6 |" in out
    assert "| tatoeba | 600 | 10 | 20 | CC-BY 2.0 FR; attribution: www.manythings.org/anki " \
           "and tatoeba.org | `tatoeba.de` (169,813 lines, sha256 78b90b42ef51…) |" in out
    assert "| own | text | `full` | 25.50 | 3.21 | 0.5 | 22.00 | 3.21 | 0.5 |" in out
    assert "| newstest2015 | asr | `wait-k:k=3` | 10.25 | 3.21 | 0.5 | – | – | – |" in out
    assert "| text | `full` | de-en-base | 12.50 | 33.25 |" in out  # per source
    assert "| text | `full` | de-en-small | – | – |" in out
    assert "BLEU signature: `nrefs:1|tok:13a`" in out
    assert out.rstrip().endswith("News is outside its domains.")


def test_a_soup_card_names_its_ingredients_and_their_extra_data(tmp_path: Path) -> None:
    model = tmp_path / "soup"
    write_model(model, {"name": "v2", "src": "de", "tgt": "en", "steps": 12002,
                        "train_hours": 10.66, "soup": [
                            {"model": "base", "weight": 0.5, "steps": 11002, "train_hours": 9.34},
                            {"model": "names", "weight": 0.5, "steps": 12002,
                             "train_hours": 1.32}]})
    main, extra = tmp_path / "corpus", tmp_path / "corpus-names"
    for folder, sources in ((main, {"ding": 400}), (extra, {"ding": 400, "namecopy": 50})):
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps({
            "splits": {"train": sum(sources.values()), "dev": 20, "test": 30},
            "sources": {name: {"train": n, "dev": 0, "test": 0, "licence": "L"}
                        for name, n in sources.items()}}), encoding="utf-8")
    results = tmp_path / "v2.jsonl"
    results.write_text(row("v2", "own", "text", "full", 25.5) + "\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/model_card.py"), "--model", str(model), "--corpus",
         str(main), "--corpus", str(extra), "--results", str(results)],
        capture_output=True, text=True, check=True).stdout
    assert "the weighted mean of the weights (a model soup, `simulmt soup`) of `base` (0.50; " \
           "11,002 updates counted from scratch, 9.3 h of its own), `names` (0.50; 12,002 " \
           "updates counted from scratch, 1.3 h of its own); 10.7 h wall in all" in out
    assert "400 training pairs" in out  # the main corpus's
    assert "| ding | 400 |" in out and "| namecopy (corpus-names) | 50 |" in out
    assert out.count("| ding") == 1
