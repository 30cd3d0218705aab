"""List the registered read/write policies with their arguments, types and defaults."""

from __future__ import annotations

import argparse
import json
import sys

from simulmt.policies.base import PolicyError
from simulmt.policies.files import load_policy_files
from simulmt.policies.registry import available, describe, info

from simulmt.cli.options import add_policy_file_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="show only this policy")
    add_policy_file_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {name, description, class, needs, mode, "
                             "arguments: [{name, type, required, default, help}]}")


def run(args: argparse.Namespace) -> int:
    try:
        load_policy_files(args.policy_file)
    except PolicyError as exc:
        print(f"simulmt policies: {exc}", file=sys.stderr)
        return 2
    names = list(available())
    if args.name is not None:
        try:
            describe(args.name)  # raises PolicyError listing the available names
        except PolicyError as exc:
            print(f"simulmt policies: {exc}", file=sys.stderr)
            return 2
        names = [args.name]
    if args.json:
        print(json.dumps([info(name) for name in names], indent=2, ensure_ascii=False))
        return 0
    print("\n\n".join(describe(name) for name in names))
    if args.name is None:
        print("\nSelect one with a spec string: name:key=value,… (lists in brackets, "
              "e.g. schedule:g=[1,2,4]); e.g. --policy wait-k:k=3")
    return 0
