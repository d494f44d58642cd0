"""CLI subcommands; each module exposes ``register(subparsers)``."""

from ektelo_ng.commands import error_command, kernel_command, select_command

REGISTRY = [error_command.register, kernel_command.register, select_command.register]
