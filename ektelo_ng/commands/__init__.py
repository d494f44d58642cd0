"""CLI subcommands; each module exposes ``register(subparsers)``.

``MODULES`` names each command's module, so that the command line imports only the one it runs (``cli``): a
command's imports are its own, and ``ektelo-ng census ...`` never pays for ``run``'s.
"""

from __future__ import annotations

import importlib

MODULES = {
    "demo": "demo_command", "dpbench": "dpbench_command", "error": "error_command", "select": "select_command",
    "advise": "advise_command", "census": "census_command", "query": "query_command",
    "example-data": "example_command",
    "run": "run_command", "kernel": "kernel_command",
}
"""Every command by name, in the order ``--help`` lists them, with its module in ``ektelo_ng.commands``."""


def register(subcommands, names=None) -> None:
    """Register the commands ``names`` (default: all) on the parser's ``subcommands``, importing only theirs."""
    for name, module in MODULES.items():
        if names is None or name in names:
            importlib.import_module(f"ektelo_ng.commands.{module}").register(subcommands)
