"""Incremental engine vs recomputation from scratch (what SimulEval-style agents do).

For sources of 10, 30 and 60 tokens streamed one token per READ under wait-3, greedy, the
total model time of
  * incremental: encode only the new token at each READ (causal encoder cache), one decoder
    step per WRITE (self-attention cache, cross-attention K/V cache);
  * recompute: at each WRITE, re-encode the whole source prefix and re-run the decoder over
    the whole target prefix (same prefix-to-prefix mask), keeping only the last position.
Both write |x| tokens (EOS is masked) and must produce identical outputs (asserted).

    python bench/incremental.py [--model DIR] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from simulmt.data.vocab import BOS_ID, EOS_ID, NEVER
from simulmt.model.config import ModelConfig
from simulmt.model.layers import stack_kv
from simulmt.model.pool import KVPool, PoolShape
from simulmt.model.state import SourceState
from simulmt.model.transformer import SimulTransformer
from simulmt.search.state import BeamState
from simulmt.search.step import StepRequest, run_step

K = 3


def incremental(model: SimulTransformer, src: torch.Tensor) -> tuple[list[list[int]], float]:
    """src: (B, n) — B streams in lockstep; READs encode one new token per stream (one batched
    encoder call), WRITEs are one batched decoder step through the engine's `run_step`."""
    b, n = src.shape
    enc_kv = None
    cfg = model.cfg
    pool = KVPool(PoolShape(2 * cfg.dec_layers, cfg.n_heads, cfg.head_dim, model.dtype), slots=b)
    sources = [SourceState() for _ in range(b)]
    beams = [BeamState.start() for _ in range(b)]
    out: list[list[int]] = [[] for _ in range(b)]
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(1, n + 1):  # target token i needs min(n, K + i - 1) source tokens
            while len(sources[0].ids) < min(n, K + i - 1):  # READ one token in every stream
                j = len(sources[0].ids)
                mem, enc_kv = model.encode(src[:, j : j + 1], past=enc_kv, start=j)  # (B, 1, D)
                new = stack_kv(model.cross_kv(mem))  # (2L, B, H, 1, dh)
                for s, source in enumerate(sources):  # cross caches live in one pool of
                    source.append_cross(new[:, s : s + 1], pool)  # slots, as in Engine
                    source.ids.append(int(src[s, j]))
                    source.ends.append(j + 1)
            results = run_step(
                model, [StepRequest(sources[s], beams[s], len(sources[s].ids)) for s in range(b)]
            )
            lp = torch.cat([res.log_probs for res in results])  # (B, V), one pick for all
            lp[:, NEVER + [EOS_ID]] = float("-inf")
            picks = lp.argmax(dim=-1).tolist()
            for s, beam in enumerate(beams):
                tok = picks[s]
                out[s].append(tok)
                beam.cache.extend([0])  # as the engine's beams
                beam.tokens = torch.cat([beam.tokens, torch.tensor([[tok]])], dim=1)
                beam.token_lp = torch.zeros(1, beam.tokens.shape[1] - 1)
    return out, time.perf_counter() - t0


def recompute(model: SimulTransformer, src: torch.Tensor) -> tuple[list[list[int]], float]:
    """At every WRITE: the whole source prefix and target prefix through the model again."""
    b, n = src.shape
    out = torch.full((b, 1), BOS_ID, dtype=torch.long)  # (B, 1+i)
    vis: list[int] = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(1, n + 1):
            read = min(n, K + i - 1)
            vis.append(read)
            logits = model(src[:, :read], out, torch.tensor([vis]).expand(b, -1))  # (B, i, V)
            lp = torch.log_softmax(logits[:, -1], dim=-1)  # (B, V)
            lp[:, NEVER + [EOS_ID]] = float("-inf")
            out = torch.cat([out, lp.argmax(dim=-1, keepdim=True)], dim=1)
    return out[:, 1:].tolist(), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model", type=Path, help="model folder (default: random weights, default architecture)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--streams", type=int, nargs="+", default=[1, 16, 64], help="streams decoded together"
    )
    args = ap.parse_args()
    from machine import describe  # bench/machine.py: where this ran

    print(describe(), flush=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model:
        from simulmt.engine import Engine

        model = Engine.load(args.model).model
    else:
        model = SimulTransformer(
            ModelConfig(d_model=256, enc_layers=3, dec_layers=3, d_ff=1024)
        ).eval()
    print(
        f"model: {model.num_parameters() / 1e6:.1f}M parameters, wait-{K}, greedy, "
        f"{args.threads} thread(s)"
    )
    print("| streams | source tokens | incremental (s) | recompute (s) | speed-up |")
    print("|---:|---:|---:|---:|---:|")
    for b in args.streams:
        for n in (10, 30, 60):
            g = torch.Generator().manual_seed(n)
            src = torch.randint(4, model.cfg.vocab_size, (b, n), generator=g)  # (B, n)
            t_inc, t_rec = [], []
            for _ in range(args.repeats):  # interleaved, best of N: both see the same machine load
                a, ta = incremental(model, src)
                r, tr = recompute(model, src)
                assert a == r, f"outputs differ at streams={b} n={n}"
                t_inc.append(ta)
                t_rec.append(tr)
            ti, tr = min(t_inc), min(t_rec)
            print(f"| {b} | {n} | {ti:.3f} | {tr:.3f} | {tr / ti:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
