"""The `mpijob` command: one sub-command module per area, each exposing `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module registers its sub-commands and sets `func` (args -> exit code) on its parsers.
# The development testbed and the demo are a separate command (`mpijob-testbed`, package mpijob_testbed).
_COMMAND_MODULES = ("mpijob.cli.operator", "mpijob.cli.elastic")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mpijob", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
