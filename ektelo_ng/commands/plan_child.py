"""The process an analyst's plan runs in under ``ektelo-ng run``: it reaches the kernel only through the socket
its parent passed it (``run_command.run_child``), and holds handles and noisy answers, never the table, the
kernel's options or its record of the budget.

    python -m ektelo_ng.commands.plan_child FD OPTIONS_JSON
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from ektelo_ng.cli import guarded
from ektelo_ng.commands.run_command import load_plan, run_plan
from ektelo_ng.grammar import parse_budget
from ektelo_ng.operators.client import Session, framed_transport


def main(argv: list[str]) -> int:
    descriptor, options = int(argv[0]), json.loads(argv[1])
    paths = {"plan", "out", "synthetic", "plot"}
    args = argparse.Namespace(**{k: Path(v) if k in paths and v is not None else v for k, v in options.items()})
    args.level, args.seed = float(args.level), None if args.seed is None else int(args.seed)
    session = Session(framed_transport(socket.socket(fileno=descriptor), "the kernel (this run's parent process)"))
    return run_plan(args, load_plan(args.plan, args.domain), parse_budget(args.budget), session)


if __name__ == "__main__":
    sys.exit(guarded("run", lambda: main(sys.argv[1:])))
