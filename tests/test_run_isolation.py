"""Issue 31, class 4: under ``ektelo-ng run`` a hostile plan cannot spend past its budget, hide what it spent or
switch the kernel to seeded noise; the report's budget and noise lines come from the kernel's own record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
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


# ---- issue 46: the plan's process against the table, the kernel's memory and the report -------------------------
_FIND_RUN = r'''
import os

from ektelo_ng.operators.matrix import Identity


def runs():
    """Every process this one can see that was started with --table (the kernel's, under ektelo-ng run): its
    pid, arguments and working directory (None where it cannot be read)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = [a.decode() for a in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")]
        except OSError:
            continue
        if "--table" in argv:
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                cwd = None
            yield int(pid), argv, cwd


def option(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def measured(source, budget):
    x = source.vectorize()
    return x.laplace(Identity(x.size), budget.epsilon).values
'''

READ_TABLE = _FIND_RUN + r'''

def plan(source, workload, budget):
    """Find the table's path in the kernel's command line and working directory, and read its rows."""
    for pid, argv, cwd in runs():
        table = option(argv, "--table")
        for path in {table, os.path.join(cwd or f"/proc/{pid}/cwd", table)}:
            try:
                rows = open(path).read().splitlines()[1:]
                print(f"LEAKED {len(rows)} rows from {path}: {','.join(rows)}")
            except OSError as error:
                print(f"refused {path}: {error.strerror}")
    print("attack done")
    return measured(source, budget)
'''

READ_HEAP = _FIND_RUN + r'''

def plan(source, workload, budget):
    """Read the kernel process's heap through /proc/PID/mem, and open it for writing (the same check)."""
    for pid, _, _ in runs():
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            start, end = (int(v, 16) for v in next(m for m in maps if m.endswith("[heap]")).split()[0].split("-"))
        except (OSError, StopIteration) as error:
            print(f"refused maps of {pid}: {error!r}")
            start = None
        for mode in ("rb", "r+b"):
            try:
                with open(f"/proc/{pid}/mem", mode, buffering=0) as memory:
                    if mode == "r+b":
                        print(f"WRITABLE memory of {pid}")
                    elif start is not None:
                        memory.seek(start)
                        print(f"HEAP {len(memory.read(min(end - start, 1 << 16)))} bytes of {pid}")
            except OSError as error:
                print(f"refused memory of {pid} ({mode}): {error.strerror}")
    print("attack done")
    return measured(source, budget)
'''

FORGE_REPORT = _FIND_RUN + r'''
import json
import sys
import time

FORGER = """
import json, os, sys, time
stdout, out = int(sys.argv[1]), sys.argv[2]
for _ in range(600):  # until the run has written its report (bounded: 30 s at most)
    try:
        report = json.loads(open(out).read())
    except (OSError, ValueError):
        report = {}
    if "budget_spent" in report:
        report["budget_spent"] = "0"
        open(out, "w").write(json.dumps(report))
        os.write(stdout, b"-- from the kernel, not the plan --\\nbudget: spent epsilon = 0 of 1 (1 left)\\n")
        break
    time.sleep(0.05)
"""


def plan(source, workload, budget):
    """Leave a grandchild in its own session that rewrites --out and prints a forged report after the real one."""
    answers = measured(source, budget)
    for pid, argv, cwd in runs():
        out = option(argv, "--out")
        if out is None or cwd is None:
            print(f"no --out or working directory to forge in {pid}")
            continue
        try:
            stdout = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)  # the run's own output, not the pipe it reads
        except OSError as error:
            print(f"refused the run's output: {error.strerror}")
            stdout = 1
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", FORGER, str(stdout), os.path.join(cwd, out)])
            os._exit(0)
        os.wait()
    print("attack done")
    return answers
'''

OUTLIVE = _FIND_RUN + r'''
import sys


def plan(source, workload, budget):
    """Leave a grandchild in its own session, double-forked, that would live on for a minute."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "MARKER"])
        os._exit(0)
    os.wait()
    print("attack done")
    return measured(source, budget)
'''


def attack(folder: Path, code: str, *extra: str) -> subprocess.CompletedProcess:
    """``ektelo-ng run attack.py --table t.csv --domain d.json`` from ``folder``, as the red team ran it."""
    write(folder)
    (folder / "attack.py").write_text(code)
    done = subprocess.run([sys.executable, "-m", "ektelo_ng.cli", "run", "attack.py", "--table", "t.csv", "--domain",
                           "d.json", "--budget", "epsilon=1", *extra], capture_output=True, text=True, timeout=300,
                          cwd=folder)
    assert done.returncode == 0 and "attack done" in done.stdout, done.stdout + done.stderr
    return done


def test_a_plan_cannot_read_the_table_through_the_kernels_command_line_and_directory(tmp_path):
    done = attack(tmp_path, READ_TABLE)
    assert "LEAKED" not in done.stdout, done.stdout


def test_a_plan_can_neither_read_nor_open_for_writing_the_kernels_memory(tmp_path):
    done = attack(tmp_path, READ_HEAP)
    assert "HEAP" not in done.stdout and "WRITABLE" not in done.stdout, done.stdout


def test_a_grandchild_cannot_rewrite_the_out_file_or_print_after_the_report(tmp_path):
    done = attack(tmp_path, FORGE_REPORT, "--out", "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["budget_spent"] == "1"
    assert done.stdout.count("from the kernel, not the plan") == 1, done.stdout
    report = kernel_report(done.stdout)
    assert report[1].startswith("budget: spent epsilon = 1 of 1") and report[-1] == "saved out.json", report


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_no_process_the_plan_started_outlives_the_run(tmp_path):
    marker = f"ektelo-test-{uuid.uuid4()}"
    attack(tmp_path, OUTLIVE.replace("MARKER", marker))
    survivors = _processes_with(marker)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert survivors == []
