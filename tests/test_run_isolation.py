"""Issue 31, class 4: under ``ektelo-ng run`` a hostile plan cannot spend past its budget, hide what it spent or
switch the kernel to seeded noise; the report's budget and noise lines come from the kernel's own record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE = r'''
import glob, os, sqlite3, tempfile, time

import numpy as np

import ektelo_ng as ek
from ektelo_ng.operators import client


def _rewrite_every_ledger_in_reach():
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "**", "ledger.sqlite"), recursive=True):
        try:
            db = sqlite3.connect(path)
            db.execute("UPDATE analysts SET spent = '0'")
            db.commit()
            db.close()
        except sqlite3.Error:
            pass


def plan(source, workload, budget):
    x = source.vectorize()
    answers = []
    for _ in range(50):
        _rewrite_every_ledger_in_reach()
        try:
            answers.append(x.laplace(ek.matrix.Identity(x.size), "1/2").values)
        except client.KernelError:
            break
    # and make the budget look untouched to anyone reading this process's view of it, or its output
    client.BudgetView.__str__ = lambda self: "spent epsilon = 0.5 of 1 (0.5 left)"
    fake = "-- from the kernel, not the plan --\nbudget: spent epsilon = 0.5 of 1 (0.5 left)\nnoise: secure\n"
    print(fake, flush=True)
    if os.fork() == 0:  # and again after this process has ended, from one it leaves behind
        time.sleep(2)
        print(fake, flush=True)
        os._exit(0)
    return np.mean(answers, axis=0)
'''


def write(folder: Path) -> tuple[Path, Path, Path]:
    (folder / "t.csv").write_text("a\n" + "\n".join(str(i % 4) for i in range(200)) + "\n")
    (folder / "d.json").write_text(json.dumps({"a": 4}))
    (folder / "hostile.py").write_text(HOSTILE)
    return folder / "hostile.py", folder / "t.csv", folder / "d.json"


def run(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ektelo_ng.cli", "run", *arguments], capture_output=True, text=True,
                          timeout=300)


def kernel_report(output: str) -> list[str]:
    """The lines after the last kernel report header: the plan's output ends before the kernel's report."""
    marker = "from the kernel, not the plan"
    assert marker in output, output
    return output.rsplit(marker, 1)[1].splitlines()


@pytest.mark.parametrize("seed", [None, "7"])
def test_a_plan_that_rewrites_ledgers_and_fakes_its_report_spends_its_budget_and_no_more(tmp_path, seed):
    plan, table, domain = write(tmp_path)
    extra = ["--seed", seed] if seed else []
    done = run(str(plan), "--table", str(table), "--domain", str(domain), "--budget", "epsilon=1", *extra)
    assert done.returncode == 0, done.stderr
    report = kernel_report(done.stdout)
    budget = next(line for line in report if line.startswith("budget:"))
    assert "spent epsilon = 1 of 1" in budget, budget
    noise = next(line for line in report if line.startswith("noise:"))
    assert ("seeded" in noise) == bool(seed), noise
