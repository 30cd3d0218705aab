"""`python -m simulmt.train ...`: `simulmt train` without the rest of the command line, for
machines that have only what training needs (torch, sentencepiece, sacrebleu, numpy) and for
`torchrun -m simulmt.train` on several GPUs."""

from __future__ import annotations

import argparse
import logging
import sys

from simulmt.model.runtime import tune_allocator_for_training
from simulmt.train import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulmt.train", description=cli.__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    cli.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    tune_allocator_for_training()
    return cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
