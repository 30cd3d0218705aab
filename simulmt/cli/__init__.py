"""The `simulmt` command line: the entry point (`main`) and the options every command shares
(`simulmt.cli.options`)."""

from simulmt.cli.commands import main

__all__ = ["main"]
