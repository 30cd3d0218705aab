"""A tiny trained model for tests and demos (`Engine.tiny`, `simulmt serve --tiny`).

It trains a tokenizer and a model, so it lives with the training code: the engine imports it
only when a tiny engine is asked for, and inference never loads the trainers.
"""

from __future__ import annotations

import functools
import tempfile
from importlib import resources
from pathlib import Path

import torch

from simulmt.data.tokenizer import Tokenizer, train_tokenizer
from simulmt.model.config import ModelConfig
from simulmt.model.transformer import SimulTransformer
from simulmt.train.batches import collate, make_examples

__all__ = ["tiny_model", "tiny_pairs", "tiny_tokenizer"]


@functools.lru_cache(maxsize=1)
def tiny_tokenizer() -> Tokenizer:
    """A 200-piece tokenizer trained on `tiny_pairs` (cached: every tiny engine shares it)."""
    lines = [side for pair in tiny_pairs() for side in pair]
    with tempfile.TemporaryDirectory() as tmp:
        path = train_tokenizer(lines, Path(tmp), vocab_size=200, seed=0)
        return Tokenizer.load(path)


def tiny_pairs() -> list[tuple[str, str]]:
    """The bundled toy corpus: 30 German-English sentence pairs."""
    text = (resources.files("simulmt") / "assets" / "tiny.tsv").read_text(encoding="utf-8")
    return [(row.split("\t")[0], row.split("\t")[1]) for row in text.splitlines() if row]


@functools.lru_cache(maxsize=4)
def tiny_model(seed: int, train_steps: int) -> SimulTransformer:
    """The model trained for `train_steps` multi-path wait-k steps on `tiny_pairs` (so it
    writes words and ends sentences); deterministic for a seed. Cached: callers that change
    it must copy it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same weights whatever the caller's thread setting
    try:
        return _train(seed, train_steps)
    finally:
        torch.set_num_threads(threads)


def _train(seed: int, train_steps: int) -> SimulTransformer:
    tok = tiny_tokenizer()
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=tok.vocab_size,
        d_model=32,
        n_heads=4,
        enc_layers=2,
        dec_layers=2,
        d_ff=64,
        dropout=0.0,
        max_len=512,
    )
    model = SimulTransformer(cfg)
    ids = [(tok.encode(s), tok.encode(t)) for s, t in tiny_pairs()]
    examples = make_examples(ids, tok.is_word_start, max_len=100)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(train_steps):
        k = int(torch.randint(0, 5, (1,), generator=g))  # 0 = full sentence
        batch = collate(examples, k)
        logits = model(batch.src, batch.tgt_in, batch.vis)  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()
