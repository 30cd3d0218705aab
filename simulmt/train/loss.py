"""Label-smoothed cross-entropy that never materializes the log-probabilities.

`F.cross_entropy` on a (tokens, vocabulary) matrix writes the whole log-softmax in float32
and reads it back in the backward pass; on a CPU that was a fifth of a training step
(bench/train_step.py). Per row the label-smoothed loss needs only the log-sum-exp:

    loss = lse(x) - (1 - eps) * x[y] - eps / V * sum(x)

and its gradient is softmax(x) - (1 - eps) * onehot(y) - eps / V. This function computes both
in row chunks, in float32 from the (bfloat16) logits, and keeps only the logits and one float
per row for the backward pass.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["smoothed_cross_entropy"]

# 64 rows of a 16k vocabulary: 4 MB of float32 per temporary, near the cache. Forward and
# backward over (2900, 16000) bf16 logits: 188 ms at 256 rows, 102 ms at 64, 89 ms at 32 (median
# of 8, alternating, 2 threads, the training allocator).
CHUNK_ROWS = 64
# On a GPU each chunk is a handful of kernel launches, so chunks are as large as memory allows:
# 8192 rows of a 16k vocabulary are 0.5 GB of float32 per temporary, a few launches per batch.
GPU_CHUNK_ROWS = 8192


class _SmoothedCE(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, target: torch.Tensor, eps: float, ignore: int,
        chunk: int,
    ) -> torch.Tensor:
        # logits (N, V) any float dtype; target (N,) int64 -> summed loss () float32
        n, v = logits.shape
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)  # (N,)
        total = torch.zeros((), dtype=torch.float32, device=logits.device)
        keep = target != ignore  # (N,)
        safe = target.masked_fill(~keep, 0)  # (N,) an index that exists
        for i in range(0, n, chunk):
            x = logits[i : i + chunk].float()  # (c, V)
            lse[i : i + chunk] = torch.logsumexp(x, dim=-1)
            picked = x.gather(1, safe[i : i + chunk, None]).squeeze(1)  # (c,)
            row = lse[i : i + chunk] - (1 - eps) * picked - (eps / v) * x.sum(dim=-1)
            # where(), not row[keep]: a boolean index reads its size back from a GPU (a sync)
            total += torch.where(keep[i : i + chunk], row, 0.0).sum()
        ctx.save_for_backward(logits, safe, keep, lse)
        ctx.eps, ctx.chunk = eps, chunk
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        logits, safe, keep, lse = ctx.saved_tensors
        eps: float = ctx.eps
        chunk: int = ctx.chunk
        n, v = logits.shape
        out = torch.empty_like(logits)  # (N, V) in the logits' dtype
        scale = keep.to(torch.float32) * grad  # (N,) 0 for ignored rows
        for i in range(0, n, chunk):
            rows = slice(i, i + chunk)
            p = torch.exp(logits[rows].float() - lse[rows, None])  # (c, V) softmax
            p -= eps / v
            p.scatter_add_(1, safe[rows, None],
                           torch.full((p.shape[0], 1), -(1 - eps), device=p.device))
            out[rows] = p * scale[rows, None]
        return out, None, None, None, None


def smoothed_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, *, smoothing: float, ignore_index: int,
    chunk_rows: int | None = None,
) -> torch.Tensor:
    """Summed label-smoothed cross-entropy over the rows whose target is not `ignore_index`:
    the value and gradient of `F.cross_entropy(logits.float(), target, ignore_index=...,
    label_smoothing=smoothing, reduction="sum")`. logits (N, V), target (N,). `chunk_rows`:
    rows per chunk (default CHUNK_ROWS on a CPU, GPU_CHUNK_ROWS on a GPU)."""
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"logits must be (N, V) and target (N,); got {tuple(logits.shape)} "
                         f"and {tuple(target.shape)}")
    if chunk_rows is None:
        chunk_rows = CHUNK_ROWS if logits.device.type == "cpu" else GPU_CHUNK_ROWS
    result: torch.Tensor = _SmoothedCE.apply(logits, target, float(smoothing), int(ignore_index),
                                             int(chunk_rows))
    return result
