"""Training throughput of a config on this machine: tokens/s and model FLOPs utilisation (MFU).

The step is the training loop's own (`Trainer._update`: forward, backward, clipping, AdamW) on
the config's real batches in the order of the first epoch. Tokens are the real (unpadded) source
plus target tokens; model FLOPs are counted as `simulmt.train.flops` says. MFU = model FLOPs/s
over the peak given with --peak-tflops or, by default, the device's: for a CPU, cores x clock x
fp32 FLOPs per cycle of its vector unit (32 with AVX2's two 256-bit FMA units, 64 with AVX-512);
for a GPU, the H100/H200 datasheet's dense bf16 rate.

    python bench/train_throughput.py [--config configs/de-en-base.toml] [--pack DIR]
        [--steps 8] [--warmup 2] [--threads 2] [--set key=value ...] [--peak-tflops X]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from simulmt.data.vocab import PAD_ID
from simulmt.model.config import ModelConfig
from simulmt.model.runtime import tune_allocator_for_training
from simulmt.train.batches import Batch
from simulmt.train.config import TrainConfig
from simulmt.train.flops import H100_BF16_TFLOPS, step_flops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model  # noqa: E402  (bench/ is not a package)


def batch_flops(batch: Batch, m: ModelConfig) -> tuple[float, int]:
    """(model FLOPs of one training step on `batch`, its real source + target tokens)."""
    s_len = (batch.src != PAD_ID).sum(dim=1).tolist()  # (B,)
    t_len = (batch.tgt_out != PAD_ID).sum(dim=1).tolist()  # (B,) target + EOS
    return step_flops(m, zip(s_len, t_len, strict=True)), int(sum(s_len) + sum(t_len))


def cpu_peak(threads: int) -> tuple[float, str]:
    """(peak fp32 FLOP/s of `threads` cores, how it was computed)."""
    capability = torch.backends.cpu.get_cpu_capability()
    per_cycle = 64 if "AVX512" in capability else 32 if "AVX2" in capability else 8
    mhz = 0.0
    try:
        mhz = max(float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text()
                  .splitlines() if line.startswith("cpu MHz"))
    except (OSError, ValueError):
        pass
    ghz = mhz / 1000 if mhz else 2.0
    return threads * ghz * 1e9 * per_cycle, (f"{threads} cores x {ghz:.2f} GHz x {per_cycle} "
                                              f"fp32 FLOP/cycle ({capability})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=Path("configs/de-en-base.toml"))
    ap.add_argument("--pack", type=Path, help="a corpus pack to unpack and train on")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the peak MFU is taken of")
    args = ap.parse_args()
    tune_allocator_for_training()
    from simulmt.train.loop import Trainer, epoch_order

    with tempfile.TemporaryDirectory() as tmp:
        extra = [f"out={tmp}/run", f"threads={args.threads}"]
        if args.pack:
            from simulmt.data.pack import unpack_corpus

            unpack_corpus(args.pack, Path(tmp) / "corpus")
            extra.append(f"data={tmp}/corpus")
        cfg = TrainConfig.from_toml(args.config).override(extra + args.overrides)
        trainer = Trainer(cfg)
    order = epoch_order(len(trainer.batches), cfg.seed, 0)
    batches = [trainer._batch(trainer.batches[i], step)
               for step, i in enumerate(order[: args.warmup + args.steps])]
    cuda = trainer.device.type == "cuda"
    for batch in batches[: args.warmup]:
        trainer._update(batch)
    if cuda:
        torch.cuda.synchronize()
    flops, tokens = 0.0, 0
    started = time.perf_counter()
    for batch in batches[args.warmup :]:
        trainer._update(batch)
        f, t = batch_flops(batch, cfg.model)
        flops, tokens = flops + f, tokens + t
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    if args.peak_tflops:
        peak, how = args.peak_tflops * 1e12, "given on the command line"
    elif cuda:
        peak, how = H100_BF16_TFLOPS * 1e12, "H100/H200 dense bf16 datasheet"
    else:
        peak, how = cpu_peak(args.threads)
    print(json.dumps({
        "config": str(args.config), "overrides": args.overrides, "device": str(trainer.device),
        "device_name": torch.cuda.get_device_name() if cuda else cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "bf16": trainer.bf16, "bf16_asked": cfg.bf16,
        "compile": cfg.compile,
        "cpus_online": os.cpu_count(), "parameters": trainer.model.num_parameters(),
        "steps": args.steps, "seconds": round(seconds, 2), "tokens": tokens,
        "tokens_per_s": round(tokens / seconds),
        "model_tflops_per_s": round(flops / seconds / 1e12, 4),
        "peak_tflops": round(peak / 1e12, 4), "peak_from": how,
        "mfu": round(flops / seconds / peak, 4),
    }))


if __name__ == "__main__":
    main()
