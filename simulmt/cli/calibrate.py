"""Measure a model's int8 input ranges on real text and store them beside it (faster int8).

`simulmt calibrate --source dev.de` translates the first `--lines` lines of a source-language
text with the float model under `--policy` and writes, per linear layer, the range its inputs
took (`simulmt.model.calibration`) to the model folder's int8_ranges.json. With that file,
`--dtype int8` (and `auto` where it picks int8) runs fbgemm's kernel on fixed scales instead
of scaling each row: half the cost of a small int8 call. Use text the model was not tested on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulmt.cli.options import add_policy_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from simulmt.model.calibration import DEFAULT_QUANTILE, RANGES_FILE

    parser.add_argument(
        "--model", type=Path, help="model folder (default: the bundled de→en model)"
    )
    parser.add_argument(
        "--source", type=Path, required=True,
        help="source-language sentences, one a line (a dev split, not a test set)",
    )
    parser.add_argument("--lines", type=int, default=300, help="lines to translate (default 300)")
    add_policy_argument(parser, default="wait-k:k=3")
    parser.add_argument(
        "--quantile", type=float, default=DEFAULT_QUANTILE,
        help="a layer's range covers this share of its per-token input maxima (default "
        f"{DEFAULT_QUANTILE}; 1: all of them)",
    )
    parser.add_argument(
        "--out", type=Path, help=f"file to write (default: {RANGES_FILE} in the model folder)"
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from simulmt.engine import Engine, default_model_dir
    from simulmt.eval.runner import RunConfig, simulate
    from simulmt.input.textcheck import read_utf8
    from simulmt.model.calibration import RANGES_FILE, collect_ranges, save_ranges
    from simulmt.model.transformer import SimulTransformer
    from simulmt.policies.base import PolicyError
    from simulmt.policies.registry import load_policy

    torch.set_num_threads(1)
    try:
        if args.lines < 1:
            raise ValueError(f"--lines must be >= 1, got {args.lines}")
        load_policy(args.policy)
        if not args.source.is_file():
            raise ValueError(f"--source {args.source} is not a file: give German text, one "
                             "sentence a line")
        text = read_utf8(args.source, "--source")
        lines = [ln for ln in text.splitlines() if ln.split()]
        lines = lines[: args.lines]
        if not lines:
            raise ValueError(f"{args.source} has no non-empty line to translate")
        engine = Engine.load(args.model, dtype="float32")

        def translate(model: SimulTransformer) -> None:
            twin = Engine(model, engine.tokenizer, engine.info, segmenter=engine.segmenter,
                          restorer=engine.restorer)  # fmt: skip
            simulate(twin, args.policy, lines, lines, config=RunConfig(batch_size=64))

        ranges = collect_ranges(engine.model, translate, quantile=args.quantile)
    except (PolicyError, ValueError, OSError, UnicodeDecodeError) as e:
        print(f"simulmt calibrate: {e}", file=sys.stderr)
        return 2
    folder = args.model if args.model is not None else default_model_dir()
    out = args.out or (folder if folder.is_dir() else folder.parent) / RANGES_FILE
    about = {"source": args.source.name, "lines": len(lines), "policy": args.policy,
             "quantile": args.quantile, "model": engine.info.name}  # fmt: skip
    save_ranges(out, ranges, about=about)
    print(f"wrote the input ranges of {len(ranges)} layers ({len(lines)} lines of "
          f"{args.source.name}) to {out}")
    return 0
