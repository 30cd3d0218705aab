"""Dev-set BLEU during training: batched greedy decoding on the training device."""

from __future__ import annotations

import sacrebleu
import torch

from simulmt.data.tokenizer import Tokenizer
from simulmt.input.words import word_ends
from simulmt.model.transformer import SimulTransformer
from simulmt.search.offline import greedy_decode

DEV_BATCH = 64  # sentences decoded together (a CPU's sweet spot; a GPU takes larger)
GPU_DEV_BATCH = 512


def translate(model: SimulTransformer, tok: Tokenizer, sources: list[str], *, k: int,
              batch: int | None = None) -> list[str]:
    """Greedy wait-k (k = 0: full sentence) translations of `sources`, in their order. Sources
    are decoded in batches of similar length (less padding), each cut to half the model's
    max_len tokens."""
    device = next(model.parameters()).device
    size = batch or (DEV_BATCH if device.type == "cpu" else GPU_DEV_BATCH)
    srcs = [tok.encode(s)[: model.cfg.max_len // 2] or [1] for s in sources]
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    out: list[str] = [""] * len(srcs)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, len(order), size):
            chunk = order[i : i + size]
            ids = [srcs[j] for j in chunk]
            ends = [word_ends(s, tok.is_word_start) for s in ids]
            for j, hyp in zip(chunk, greedy_decode(model, ids, ends, k=k), strict=True):
                out[j] = tok.decode(hyp)
    model.train(was_training)
    return out


def bleu(model: SimulTransformer, tok: Tokenizer, pairs: list[tuple[str, str]], *,
         k: int) -> float:
    """Corpus BLEU (sacrebleu's defaults) of greedy wait-k translations of `pairs`."""
    hyps = translate(model, tok, [s for s, _ in pairs], k=k)
    return float(sacrebleu.corpus_bleu(hyps, [[t for _, t in pairs]]).score)
