"""The ``ektelo-ng`` command line: one subcommand per job, each with its own ``--help``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from ektelo_ng import commands


def _version() -> str:
    try:
        return version("ektelo-ng")
    except PackageNotFoundError:
        return "unknown"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with ``argv``, only the command it names is registered (and its module imported),
    unless it names none the registry knows (then every command, for the help or the error)."""
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
    chosen = next((word for word in argv or () if not word.startswith("-")), None)
    commands.register(subcommands, [chosen] if chosen in commands.MODULES else None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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
    except Exception as error:  # a refusal is one line: what, why, what to do
        from ektelo_ng.operators.client import KernelError  # here: a command that never meets one never loads it

        if not isinstance(error, (KernelError, ValueError, OSError, KeyError, ImportError)):
            raise
        print(f"ektelo-ng {command}: error: {error.args[0] if isinstance(error, KeyError) else error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
