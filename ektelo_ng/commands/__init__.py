"""CLI subcommands; each module exposes ``register(subparsers)``."""

from ektelo_ng.commands import error_command

REGISTRY = [error_command.register]
