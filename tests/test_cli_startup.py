"""The command line's start-up loads what the command it runs needs, and not the others (issue 45: every subprocess
a test or a user starts paid 0.8 s for every command's imports). Counted in modules imported, never in seconds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ektelo_ng import commands

PROBE = """
import json, sys
from ektelo_ng import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("command", ["example-data", "census", "kernel"])
def test_a_command_loads_only_its_own_module(command):
    loaded = _loaded(command, "--help")
    own = f"ektelo_ng.commands.{commands.MODULES[command]}"
    others = {f"ektelo_ng.commands.{m}" for name, m in commands.MODULES.items() if name != command}
    assert own in loaded and not loaded & others, sorted(loaded & others)


def test_a_light_command_loads_no_numerical_or_protocol_stack():
    loaded = _loaded("example-data", "--help")
    assert not {"scipy", "networkx", "pydantic", "ektelo_ng.operators.client"} & loaded


def test_the_registry_names_each_command_as_its_module_registers_it():
    from ektelo_ng.cli import build_parser

    parser = build_parser()
    names = set(parser._subparsers._group_actions[0].choices)
    assert names == set(commands.MODULES)
