"""Command-line entry point: `simulmt <command> …`. Subcommands live in their own modules.
Users see DESCRIPTION and EPILOG, not this."""

from __future__ import annotations

import argparse
import importlib
import logging
import platform
import sys
from dataclasses import dataclass
from importlib import metadata

from simulmt import __version__
from simulmt.model.runtime import tune_allocator, tune_allocator_for_training

DESCRIPTION = """\
simulmt translates text while it is still arriving (the bundled model: German to English):
live captions over websockets, evaluation of read/write policies, and the tools to train
models on your own data."""
EPILOG = """\
start with:
  simulmt serve                 live captions at http://127.0.0.1:8765/ (bundled model)
  simulmt translate             type or pipe German text, see the captions as they grow
  simulmt eval --policy wait-k:k=3 --source test.de --reference test.en
                                BLEU and latency of a policy on a test set
  simulmt policies              the read/write policies and their arguments

`simulmt COMMAND --help` lists a command's options; the project's docs/cli.md has them all."""


@dataclass(frozen=True)
class Command:
    """A subcommand: the module with `add_arguments(parser)` and `run(args) -> int`, and its
    one-line help (its docstring's first line; tests/test_cli.py checks that they agree). Only
    the command that runs is imported: `simulmt client` then starts without torch and `simulmt
    --help` in a tenth of a second (importing every command took 1.5 s)."""

    module: str
    help: str


COMMANDS: dict[str, Command] = {
    # using the engine
    "translate": Command(
        "simulmt.cli.translate",
        "Translate text as it streams in (`simulmt translate`): live terminal captions or JSON "
        "lines.",
    ),
    "serve": Command(
        "simulmt.server.cli",
        "Serve live captions over websockets (`simulmt.v1`), the captions page and /healthz.",
    ),
    "client": Command(
        "simulmt.client.cli",
        "Stream text to a captioning server and show live captions; write WebVTT/SRT from "
        "finals.",
    ),
    "eval": Command(
        "simulmt.eval.cli",
        "Evaluate policies on a test set: BLEU, chrF, latency (AL, LAAL, YAAL, DAL, AP) and "
        "flicker.",
    ),
    "plot": Command(
        "simulmt.eval.plot_cli",
        "Plot quality–latency curves (BLEU vs AL) from `simulmt eval --output` directories.",
    ),
    "policies": Command(
        "simulmt.policies.cli",
        "List the registered read/write policies with their arguments, types and defaults.",
    ),
    # building a model
    "data": Command(
        "simulmt.data.cli",
        "Build the German–English corpus (`data build`) and its sentencepiece model (`data "
        "tokenizer`).",
    ),
    "train": Command(
        "simulmt.train.cli", "Train a prefix-to-prefix translation model (`simulmt train`)."
    ),
    "export": Command(
        "simulmt.train.export",
        "Export a training run as a model folder (`simulmt export`): averaged, fp16, "
        "self-contained.",
    ),
    "calibrate": Command(
        "simulmt.cli.calibrate",
        "Measure a model's int8 input ranges on real text and store them beside it (faster "
        "int8).",
    ),
    "soup": Command(
        "simulmt.train.soup",
        "Average the weights of model folders fine-tuned from one model (`simulmt soup`).",
    ),
    "train-policy": Command(
        "simulmt.policies.train_policy",
        "Train the learned read/write policy on oracle actions of a model (`simulmt "
        "train-policy`).",
    ),
    "train-segmenter": Command(
        "simulmt.segment.cli", "Train the sentence-boundary detector (`simulmt train-segmenter`)."
    ),
    "train-restorer": Command(
        "simulmt.restore.cli", "Train the case and comma restorer (`simulmt train-restorer`)."
    ),
}
# Incremental decoding reuses mid-sized blocks: keeping them in the heap is faster (runtime.py).
# Training allocates big tensors of ever-changing shapes (the logits of each batch): kept in the
# heap they fragment it. With glibc's dynamic mmap threshold (up to 32 MB) the 22M-parameter run
# grew from 6.2 to 7.6 GB RSS in 40 minutes (past 11 GB with the inference thresholds); a fixed
# 1 MB threshold held 2.5 GB but made every step 1.5x slower; training uses 64 MB (runtime.py).
# (Most of the growth turned out to be oneDNN's primitive cache, which the Trainer switches off.)
TUNED_ALLOCATOR = frozenset({"translate", "eval", "serve", "client"})
TRAINING = frozenset({"train", "train-policy", "train-segmenter", "train-restorer"})


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand `argv` names: its first word that is not an option (the top level's
    options, -v and -h, take no value), or None when that is no command (argparse then says
    which are)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def version_line() -> str:
    """simulmt's version and the torch it runs on (a model's outputs are bit-exact only within
    one torch), read without importing torch."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"simulmt {__version__} (torch {torch_version}, Python {platform.python_version()})"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="simulmt", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = chosen_command(argv)
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        if name == chosen:  # the others stay unimported: only their names and help are listed
            module = importlib.import_module(command.module)
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
