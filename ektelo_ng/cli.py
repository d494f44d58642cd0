"""The ``ektelo-ng`` command line: one subcommand per job, each with its own ``--help``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from ektelo_ng import commands
from ektelo_ng.operators.client import KernelError


def _version() -> str:
    try:
        return version("ektelo-ng")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ektelo-ng",
        description=(
            "Differentially private query answering: plans over a protected kernel, "
            "with HDMM, ResidualPlanner, QuerySmasher and the classic strategy selectors."
        ),
        epilog="Run 'ektelo-ng COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"ektelo-ng {_version()}")
    subcommands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in commands.REGISTRY:
        register(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return guarded(args.command, lambda: args.run(args))


def guarded(command: str, run) -> int:
    """``run()``'s exit code; a user's interruption or a refusal becomes one line on stderr, not a traceback."""
    try:
        return int(run() or 0)
    except KeyboardInterrupt:  # the user stopped it: say so, no traceback (130 = 128 + SIGINT, as shells do)
        print(f"ektelo-ng {command}: interrupted", file=sys.stderr)
        return 130
    except (KernelError, ValueError, OSError, KeyError, ImportError) as error:  # one line: what, why, what to do
        print(f"ektelo-ng {command}: error: {error.args[0] if isinstance(error, KeyError) else error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
