"""Training steps (forward, backward, AdamW) on real batches of a training config: the step the
training loop runs against the same step with PyTorch's stock loss and dropout.

  * reference: `F.cross_entropy(logits.float(), ..., label_smoothing)` and `nn.Dropout`
    (bernoulli masks) -- the loop before the change;
  * current: `simulmt.train.loss.smoothed_cross_entropy` (log-sum-exp in row chunks, no
    float32 log-softmax matrix) and `simulmt.model.layers.Dropout` (rand >= p masks).

The batches are the config's own (its corpus, tokenizer, max_tokens, wait-k draws and
recognizer view), taken in the order of the first epoch. The two sides alternate per batch so
that a busy machine slows both alike. The process takes the allocator settings `simulmt train`
takes, or `--mmap-threshold` bytes: an earlier synthetic version of this benchmark ran with
glibc's defaults, showed 1.5x, and the real run (1 MB threshold) saw nothing of it.

    python bench/train_step.py [--config configs/de-en-base.toml] [--batches 12] [--threads 2]
                               [--mmap-threshold BYTES]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import simulmt.train.loop as loop
from simulmt.model.layers import Dropout
from simulmt.model.runtime import tune_allocator, tune_allocator_for_training
from simulmt.train.batches import Batch
from simulmt.train.config import TrainConfig

CURRENT_DROPOUT = Dropout.forward  # the stock one is swapped in for the reference side
CURRENT_LOSS = loop.loss_fn


def reference_loss(
    model: torch.nn.Module, batch: Batch, smoothing: float, device: torch.device
) -> torch.Tensor:
    logits = model(batch.src, batch.tgt_in, batch.vis)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(),
                           ignore_index=0, label_smoothing=smoothing,
                           reduction="sum") / batch.n_tokens


def use(side: str) -> None:
    """Swap the loop's loss and every Dropout's forward to one side."""
    reference = side == "reference"
    loss: Callable[..., torch.Tensor] = reference_loss if reference else CURRENT_LOSS
    loop.loss_fn = loss
    Dropout.forward = nn.Dropout.forward if reference else CURRENT_DROPOUT  # type: ignore[method-assign,assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=Path("configs/de-en-base.toml"))
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mmap-threshold", type=int, default=0,
                    help="glibc mmap threshold in bytes (default: what `simulmt train` sets)")
    args = ap.parse_args()
    from machine import describe  # bench/machine.py: where this ran

    print(describe(), flush=True)
    if args.mmap_threshold:
        tune_allocator(mmap_threshold=args.mmap_threshold, trim_threshold=128 << 10)
    else:
        tune_allocator_for_training()
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig.from_toml(args.config).override([f"out={out}",
                                                           f"threads={args.threads}"])
        trainer = loop.Trainer(cfg)
    order = loop.epoch_order(len(trainer.batches), cfg.seed, 0)
    batches = [trainer._batch(trainer.batches[i], step)
               for step, i in enumerate(order[: args.batches + 1])]
    for side in ("reference", "current"):  # warm-up: kernels, allocator
        use(side)
        trainer._update(batches[0])
    times: dict[str, list[float]] = {"reference": [], "current": []}
    for n, b in enumerate(batches[1:]):
        for side in ("reference", "current") if n % 2 == 0 else ("current", "reference"):
            use(side)
            start = time.perf_counter()
            trainer._update(b)
            times[side].append(time.perf_counter() - start)
    ref, cur = times["reference"], times["current"]
    threshold = args.mmap_threshold or "as `simulmt train`"
    print(f"{args.config}: {len(ref)} real batches, {args.threads} threads, "
          f"mmap threshold {threshold}; s per step")
    print("| | reference | current | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| median | {statistics.median(ref):.2f} | {statistics.median(cur):.2f} | "
          f"{statistics.median(ref) / statistics.median(cur):.2f}× |")
    print(f"| total | {sum(ref):.1f} | {sum(cur):.1f} | {sum(ref) / sum(cur):.2f}× |")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"peak RSS {peak:.1f} GB")


if __name__ == "__main__":
    main()
