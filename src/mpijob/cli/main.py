"""The `mpijob` command: one sub-command module per area, each exposing `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import version

from mpijob.cli import reference_flags
from mpijob.cli.errors import EXIT_USAGE, OneLineParser, run_program

# Each module registers its sub-commands and sets `func` (args -> exit code) on its parsers.
# The development testbed and the demo are a separate command (`mpijob-testbed`, package mpijob_testbed).
_COMMAND_MODULES = ("mpijob.cli.operator", "mpijob.cli.elastic")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="mpijob", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _operator_argv(argv: list[str], *, reference: bool = False) -> tuple[list[str], list[str]] | int:
    """`mpijob operator ...` with the reference's flags translated, and the notes to log; or an exit code.
    Flags without a sub-command, or any arguments with `reference`, are the reference binary's command line
    (cli/reference_flags.py)."""
    bare = reference or (bool(argv) and argv[0].startswith("-") and argv[0] not in ("-h", "--help"))
    if not bare and (not argv or argv[0] != "operator"):
        return argv, []
    try:
        flags = reference_flags.translate(argv if bare else argv[1:])
    except reference_flags.FlagError as err:
        print(f"mpijob: {err}", file=sys.stderr)
        return EXIT_USAGE  # Go's flag package exits 2 on a bad flag
    if flags.version:
        print(f"mpijob {version('mpijob-operator')}")
        return 0
    defaults = reference_flags.reference_defaults(flags.given) if bare else []
    return ["operator", *defaults, *flags.args], flags.notes


def main(argv: Sequence[str] | None = None, *, reference: bool = False) -> int:
    translated = _operator_argv(list(sys.argv[1:] if argv is None else argv), reference=reference)
    if isinstance(translated, int):
        return translated
    args = build_parser().parse_args(translated[0])
    args.startup_notes = translated[1]
    return run_program(lambda: int(args.func(args)), prog="mpijob", kubeconfig=getattr(args, "kubeconfig", None))


def reference_main(argv: Sequence[str] | None = None) -> int:
    """`mpi-operator`, the reference binary's name (`/opt/mpi-operator` in the image): its command line, even
    empty (the reference then runs with its defaults)."""
    return main(argv, reference=True)


if __name__ == "__main__":
    sys.exit(main())
