"""One training step (forward, backward, AdamW) of a model config: the step the training loop
runs against the same step with PyTorch's stock loss and dropout, side by side.

  * reference: `F.cross_entropy(logits.float(), ..., label_smoothing)` and `nn.Dropout`
    (bernoulli masks) -- the loop before the change;
  * current: `simulmt.train.loss.smoothed_cross_entropy` (log-sum-exp in row chunks, no
    float32 log-softmax matrix) and `simulmt.model.layers.Dropout` (rand >= p masks).

Batches are synthetic, shaped like `bucket_batches` with max_tokens 6000 (padded source +
target tokens per batch), from short to long sentences. The two sides alternate per repeat so
that a busy machine slows both alike; the median per shape and the ratio are printed.

    python bench/train_step.py [--config configs/de-en-base.toml] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from simulmt.model.config import ModelConfig
from simulmt.model.layers import Dropout
from simulmt.model.transformer import SimulTransformer
from simulmt.train.batches import Batch
from simulmt.train.loss import smoothed_cross_entropy

CURRENT_DROPOUT = Dropout.forward  # the stock one is swapped in for the reference side
SHAPES = [(230, 12, 13), (115, 25, 27), (65, 45, 46), (32, 90, 95)]  # (B, S, T)


def batch(b: int, s: int, t: int, vocab: int) -> Batch:
    g = torch.Generator().manual_seed(b * 1000 + s)
    vis = torch.clamp(torch.arange(1, t + 1) * s // t + 3, max=s).expand(b, t).contiguous()
    return Batch(src=torch.randint(4, vocab, (b, s), generator=g),
                 tgt_in=torch.randint(4, vocab, (b, t), generator=g),
                 tgt_out=torch.randint(4, vocab, (b, t), generator=g), vis=vis, n_tokens=b * t)


def reference_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target, ignore_index=0, label_smoothing=0.1,
                           reduction="sum")


def current_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return smoothed_cross_entropy(logits, target, smoothing=0.1, ignore_index=0)


def step(model: SimulTransformer, opt: torch.optim.Optimizer, b: Batch,
         loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], stock_dropout: bool) -> float:
    Dropout.forward = nn.Dropout.forward if stock_dropout else CURRENT_DROPOUT  # type: ignore[method-assign]
    start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(b.src, b.tgt_in, b.vis)  # (B, T, V)
        value = loss(logits.flatten(0, 1), b.tgt_out.flatten()) / b.n_tokens
    value.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return time.perf_counter() - start



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=Path("configs/de-en-base.toml"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = ModelConfig(**tomllib.loads(args.config.read_text())["model"])
    model = SimulTransformer(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batches = [batch(*shape, cfg.vocab_size) for shape in SHAPES]
    sides = {"reference": (reference_loss, True), "current": (current_loss, False)}
    for b in batches:  # warm-up: allocator, kernels
        for loss, stock in sides.values():
            step(model, opt, b, loss, stock)
    times: dict[str, list[list[float]]] = {name: [[] for _ in SHAPES] for name in sides}
    for _ in range(args.repeats):
        for i, b in enumerate(batches):
            for name, (loss, stock) in sides.items():
                times[name][i].append(step(model, opt, b, loss, stock))
    print(f"{cfg.d_model}d {cfg.enc_layers}+{cfg.dec_layers} layers, vocab {cfg.vocab_size}, "
          f"{args.threads} threads, median of {args.repeats} (s per step)")
    print("| batch (B × S × T) | reference | current | ratio |")
    print("|---|---:|---:|---:|")
    total = {name: 0.0 for name in sides}
    for i, shape in enumerate(SHAPES):
        ref, cur = (statistics.median(times[n][i]) for n in ("reference", "current"))
        total["reference"] += ref
        total["current"] += cur
        print(f"| {' × '.join(map(str, shape))} | {ref:.2f} | {cur:.2f} | {ref / cur:.2f}× |")
    ref, cur = total["reference"], total["current"]
    print(f"| all four | {ref:.2f} | {cur:.2f} | {ref / cur:.2f}× |")


if __name__ == "__main__":
    main()
