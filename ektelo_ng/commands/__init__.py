"""CLI subcommands; each module exposes ``register(subparsers)``."""

from ektelo_ng.commands import (
    advise_command, census_command, demo_command, dpbench_command, error_command, kernel_command, query_command,
    run_command, select_command,
)

REGISTRY = [
    demo_command.register, dpbench_command.register, error_command.register, select_command.register,
    advise_command.register, census_command.register, query_command.register, run_command.register,
    kernel_command.register,
]
