"""Train a prefix-to-prefix translation model (`simulmt train`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from simulmt.train.config import TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="TOML file with TrainConfig fields ([model] table)"
    )
    parser.add_argument("--data", type=Path, help="corpus folder (train/dev splits and spm.model)")
    parser.add_argument("--out", type=Path, help="run folder for checkpoints and logs")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config field, e.g. --set lr=5e-4 --set model.d_model=512 "
        "--set wait_k=1,3,0",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from OUT/last.pt if present"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the effective config and exit"
    )
    parser.add_argument(
        "--device", help="auto (default: cuda if there is a GPU), cpu, cuda or cuda:N; under "
        "torchrun each process takes the GPU of its LOCAL_RANK"
    )
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile the model (pays on GPUs)"
    )


def build_config(args: argparse.Namespace) -> TrainConfig:
    cfg = TrainConfig.from_toml(args.config) if args.config else TrainConfig()
    extra = [f"data={args.data}"] if args.data else []
    extra += [f"out={args.out}"] if args.out else []
    extra += [f"device={args.device}"] if args.device else []
    extra += ["compile=true"] if args.compile else []
    return cfg.override(extra + list(args.overrides))


def run(args: argparse.Namespace) -> int:
    code = _train(args)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a rank of a torchrun launch
        from simulmt.train.device import end_rank

        end_rank(code)  # (gloo's threads outlive the interpreter's teardown)
    return code


def _train(args: argparse.Namespace) -> int:
    import json

    try:
        cfg = build_config(args)
    except (ValueError, OSError) as e:
        print(f"simulmt train: bad training config: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    from simulmt.train.device import DeviceError
    from simulmt.train.loop import Trainer

    rank = int(os.environ.get("RANK", "0"))  # torchrun: only rank 0 reports
    if rank != 0:
        logging.getLogger().setLevel(logging.WARNING)
    try:
        progress = Trainer(cfg, resume=args.resume).run()
    except DeviceError as e:
        print(f"simulmt train: {e}", file=sys.stderr)
        return 2
    if rank != 0:
        return 0
    print(
        f"stopped at step {progress.step}, best dev BLEU {progress.best_bleu:.2f}; "
        f"checkpoints in {cfg.out}"
    )
    return 0
