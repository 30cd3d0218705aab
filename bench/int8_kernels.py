"""int8 linear kernels side by side at the bundled model's shapes (issue #55).

float32 `F.linear`, bfloat16, simulmt's `Int8Linear` (per-row 8-bit activations,
`torch._int_mm`), `FbgemmInt8Linear` (per-row 7-bit activations on fbgemm's kernel),
`StaticInt8Linear` (fbgemm on a fixed input range, here the batch's largest value, as
calibration would have measured it) and torch.ao's
dynamic int8 (fbgemm, one activation scale per tensor), one thread, best of 5
timing windows each. Also per kernel: whether a row's output is the same alone and in the
batch, and the largest error against float32 relative to the output's largest value. Then the
representative turn that `--dtype auto` times at load, per precision, on the bundled model,
int8 on each kernel: `_int_mm` and fbgemm with per-row scales, fbgemm with the model folder's
calibrated ranges (int8_ranges.json), best of 3 rounds of `time_turns`, for turns of each
width in --streams (serve times 8, translate 1, eval its batch up to 128).

    .venv/bin/python bench/int8_kernels.py [--model DIR] [--rows 1 8 32 100] [--streams 1 8 64]
"""

from __future__ import annotations

import argparse
import functools
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from simulmt.engine import Engine, default_model_dir, for_inference
from simulmt.model.calibration import RANGES_FILE, load_ranges
from simulmt.model.int8 import (
    FbgemmInt8Linear,
    Int8Kernel,
    Int8Linear,
    StaticInt8Linear,
    quantize_linears,
)
from simulmt.model.precision import native_precisions, time_turns
from simulmt.model.transformer import SimulTransformer

# (in, out) of the bundled model's linear layers: attention (384x384), FFN up and down, the
# vocabulary projection
SHAPES = ((384, 384), (384, 1536), (1536, 384), (384, 16000))


def best_ms(fn: Callable[[], object]) -> float:
    """Best mean time of a call over 5 windows of >= 50 ms (after two warm-up calls)."""
    fn()
    fn()
    best = float("inf")
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < 0.05:
            fn()
            n += 1
        best = min(best, elapsed / n)
    return best * 1000


def torch_dynamic(linear: nn.Linear) -> nn.Module:
    """What `--dtype int8` ran before per-row scales (and what fbgemm does by default)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(
            nn.Sequential(linear), {nn.Linear}, dtype=torch.qint8
        )


def kernels(
    linear: nn.Linear, absmax: float = 1.0
) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    w, b = linear.weight.detach(), linear.bias.detach()
    wb, bb = w.bfloat16(), b.bfloat16()
    return {
        "float32": lambda x: F.linear(x, w, b),
        "bfloat16": lambda x: F.linear(x.bfloat16(), wb, bb).float(),
        "int8 _int_mm (per row, 8 bit)": Int8Linear.from_float(linear),
        "int8 fbgemm (per row, 7 bit)": FbgemmInt8Linear(linear),
        "int8 fbgemm (calibrated range, 7 bit)": StaticInt8Linear(linear, absmax),
        "int8 torch.ao dynamic (per tensor)": torch_dynamic(linear),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="model folder (default: the bundled model)")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32, 64],
                        help="widths of the timed turn (`--dtype auto`)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 100])
    args = parser.parse_args()
    from machine import describe  # bench/machine.py: where this ran

    print(describe(), flush=True)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print("\n| rows × in × out | " + " | ".join(kernels(nn.Linear(2, 2))) + " |")
    print("|---|" + "---:|" * 6)
    checks: dict[str, tuple[bool, float]] = {}
    with torch.no_grad():
        for d_in, d_out in SHAPES:
            linear = nn.Linear(d_in, d_out)
            for m in args.rows:
                # rows of different sizes, as streams at different points of their sentences
                x = torch.randn(m, d_in) * torch.logspace(-1, 1, m).unsqueeze(1)  # (M, in)
                ks = kernels(linear, float(x.abs().max()))
                times = [best_ms(functools.partial(k, x)) for k in ks.values()]
                cells = " | ".join(f"{t:.3f} ms" for t in times)
                print(f"| {m} × {d_in} × {d_out} | {cells} |", flush=True)
                ref = ks["float32"](x)
                for name, k in ks.items():
                    out = k(x)
                    same, err = checks.get(name, (True, 0.0))
                    alone = torch.equal(k(x[-1:])[0], out[-1])  # the largest row alone
                    rel = float((out - ref).abs().max() / ref.abs().max())
                    checks[name] = (same and (m == 1 or alone), max(err, rel))
    print("\n| kernel | a row alone = in its batch (every shape) | max error / max output |")
    print("|---|---|---:|")
    for name, (same, err) in checks.items():
        print(f"| {name} | {'yes' if same else 'no'} | {err:.4f} |")
    model = Engine.load(args.model).model
    built = {name: for_inference(model, name) for name in native_precisions() if name != "int8"}
    for kernel in Int8Kernel:  # the turn on each int8 kernel, not only on default_kernel()'s
        built[f"int8 {kernel.value} (per row)"] = quantize_linears(
            model, kernel, prepare=SimulTransformer.fuse_projections)
    folder = args.model or default_model_dir()
    if (folder / RANGES_FILE).is_file():
        ranges = load_ranges(folder / RANGES_FILE)
        built["int8 fbgemm (calibrated ranges)"] = quantize_linears(
            model, Int8Kernel.FBGEMM, prepare=SimulTransformer.fuse_projections, ranges=ranges)
    print("\n`--dtype auto`'s timed turn on the model, per width (best of 3 rounds, ms):\n")
    print("| streams | " + " | ".join(built) + " |")
    print("|---:|" + "---:|" * len(built))
    for streams in args.streams:
        rounds = [time_turns(built, streams=streams) for _ in range(3)]
        cells = " | ".join(f"{min(r[k] for r in rounds):.1f}" for k in built)
        print(f"| {streams} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
