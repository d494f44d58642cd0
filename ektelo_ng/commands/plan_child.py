"""The process an analyst's plan runs in under ``ektelo-ng run``, inside its sandbox: it reaches the kernel only
through the socket its parent passed it (``run_command.run_child``), holds handles and noisy answers, never the
table, the kernel's options or its record of the budget, and sends its answers back as one JSON message on a
second socket; the parent validates them and writes every output itself, to paths this process is never told.

    python -m ektelo_ng.commands.plan_child REQUESTS_FD ANSWERS_FD OPTIONS_JSON
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from ektelo_ng.cli import guarded
from ektelo_ng.commands.run_command import ANSWERS_BYTES, answer_plan, load_plan
from ektelo_ng.grammar import parse_budget
from ektelo_ng.operators.client import Session, framed_transport


def main(argv: list[str]) -> int:
    requests, answers, options = int(argv[0]), int(argv[1]), json.loads(argv[2])
    args = argparse.Namespace(**options)
    args.plan, args.level, args.seed = Path(args.plan), float(args.level), None if args.seed is None else int(args.seed)
    session = Session(framed_transport(socket.socket(fileno=requests), "the kernel (this run's parent process)"))
    message = json.dumps(answer_plan(args, load_plan(args.plan), parse_budget(args.budget), session).model_dump())
    if len(message) > ANSWERS_BYTES:
        raise ValueError(f"the plan's answers take {len(message):,} bytes, over the {ANSWERS_BYTES:,} that run reads "
                         "from a plan's process: ask for fewer answers or synthetic records, or run a plan you trust "
                         "with --in-process")
    with socket.socket(fileno=answers) as channel:
        channel.sendall(message.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("run", lambda: main(sys.argv[1:])))
