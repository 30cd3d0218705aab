"""Command-line entry point: `simulmt <command> …`. Subcommands live in their own modules."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from simulmt.model.runtime import tune_allocator, tune_allocator_for_training

# command name -> module with `add_arguments(parser)` and `run(args) -> int`
COMMANDS: dict[str, str] = {
    "data": "simulmt.data.cli",
    "train": "simulmt.train.cli",
    "translate": "simulmt.cli.translate",
    "export": "simulmt.train.export",
    "calibrate": "simulmt.cli.calibrate",
    "soup": "simulmt.train.soup",
    "policies": "simulmt.policies.cli",
    "eval": "simulmt.eval.cli",
    "plot": "simulmt.eval.plot_cli",
    "serve": "simulmt.server.cli",
    "client": "simulmt.client.cli",
    "train-policy": "simulmt.policies.train_policy",
    "train-segmenter": "simulmt.segment.cli",
    "train-restorer": "simulmt.restore.cli",
}
# Incremental decoding reuses mid-sized blocks: keeping them in the heap is faster (runtime.py).
# Training allocates big tensors of ever-changing shapes (the logits of each batch): kept in the
# heap they fragment it. With glibc's dynamic mmap threshold (up to 32 MB) the 22M-parameter run
# grew from 6.2 to 7.6 GB RSS in 40 minutes (past 11 GB with the inference thresholds); a fixed
# 1 MB threshold held 2.5 GB but made every step 1.5x slower; training uses 64 MB (runtime.py).
# (Most of the growth turned out to be oneDNN's primitive cache, which the Trainer switches off.)
TUNED_ALLOCATOR = frozenset({"translate", "eval", "serve", "client"})
TRAINING = frozenset({"train", "train-policy", "train-segmenter", "train-restorer"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="simulmt", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.add_arguments(p)
        p.set_defaults(_module=module)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command in TUNED_ALLOCATOR:
        tune_allocator()
    elif args.command in TRAINING:
        tune_allocator_for_training()
    return int(args._module.run(args))


if __name__ == "__main__":
    sys.exit(main())
