"""Traced graphs against eager mode: the decoder step and the packed encoder pass (issue #55).

At a server's batch sizes a model call costs mostly per-op overhead (Python, argument
parsing, module calls), which `simulmt.model.graphs` removes by running each call as one
TorchScript graph. This times both calls of the bundled model in both modes, one thread, on
probe inputs of a server's shapes: a step of N rows with 20 cached target positions over 30
source tokens, and an encoder pass of N streams with 20 cached source tokens bringing 1-2 new
ones each. Best of 5 timing windows. It also says whether the two modes gave the same bits.

    .venv/bin/python bench/graphs.py [--model DIR] [--dtype int8] [--rows 1 4 16 64]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8_kernels import best_ms  # noqa: E402  (bench/ is not a package)
from machine import describe  # noqa: E402

from simulmt.engine import Engine  # noqa: E402
from simulmt.model import graphs  # noqa: E402
from simulmt.model.layers import Packing  # noqa: E402
from simulmt.model.transformer import SimulTransformer  # noqa: E402


def step_inputs(model: SimulTransformer, rows: int) -> tuple[torch.Tensor, ...]:
    last, _, past, _, cross, _, _ = graphs._step_inputs(model, (rows, 21, 30), seed=0)
    write_at = torch.full((rows,), 20)  # every row has 20 positions cached
    past_valid = torch.arange(21).unsqueeze(0) <= write_at.unsqueeze(1)
    cross_valid = torch.ones(rows, 30, dtype=torch.bool)
    return last, write_at.clone(), past, past_valid, cross, cross_valid, write_at


def encode_inputs(model: SimulTransformer, streams: int) -> tuple[torch.Tensor, ...]:
    cfg, g = model.cfg, torch.Generator().manual_seed(0)
    counts = [1 + i % 2 for i in range(streams)]
    packing = Packing.of(counts, [20] * streams, dtype=model.dtype)
    past = torch.zeros(2 * cfg.enc_layers, streams, cfg.n_heads, packing.keys, cfg.head_dim)
    past[:, :, :, :20] = torch.randn(2 * cfg.enc_layers, streams, cfg.n_heads, 20, cfg.head_dim,
                                     generator=g)  # fmt: skip
    ids = torch.randint(4, cfg.vocab_size, (sum(counts),), generator=g)
    return ids, past.to(model.dtype), *packing.tensors()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, help="model folder (default: the bundled model)")
    p.add_argument("--dtype", default="int8", help="float32, bfloat16 or int8 (default: int8)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64])
    args = p.parse_args()
    print(describe(), flush=True)
    torch.set_num_threads(1)
    engine = Engine.load(args.model, dtype=args.dtype)
    model = engine.model
    built = graphs.graphs_of(model)
    if built is None:
        print("this model could not be traced here (see the warning above)")
        return 1
    calls = (
        ("decoder step", graphs._Step(model), built.step, step_inputs),
        ("encoder pass", graphs._Encode(model), built.encode, encode_inputs),
    )
    print(f"\n{engine.info.name}, {engine.precision}, one thread\n")
    print("| call | rows / streams | eager | traced graph | eager / traced | same bits |")
    print("|---|---:|---:|---:|---:|---|")
    with torch.no_grad():
        for name, eager, graph, inputs in calls:
            for n in args.rows:
                probe = inputs(model, n)
                same = graphs._same(
                    graph(*[t.clone() for t in probe]), eager(*[t.clone() for t in probe])
                )
                e_ms = best_ms(functools.partial(eager, *probe))
                g_ms = best_ms(functools.partial(graph, *probe))
                print(f"| {name} | {n} | {e_ms:.2f} ms | {g_ms:.2f} ms | {e_ms / g_ms:.2f}x "
                      f"| {'yes' if same else 'NO'} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
