"""``ektelo-ng run`` against a hostile plan, as real plan scripts run by the command.

Issue 31, class 4: the plan cannot spend past its budget, hide what it spent or switch the kernel to seeded noise;
the report's budget and noise lines come from the kernel's own record. Issue 46: in its sandbox the plan cannot read
the table (found through the kernel's command line and directory), read or open the kernel's memory, reach the
network unless asked, or leave a process that rewrites --out or prints after the report; what it answers is checked
before anything is written. Where no sandbox can be made, run refuses unless --unsandboxed, and what that mode still
protects (the kernel's memory: non-dumpable) and does not (the files you can read) is measured here too. Issue 45:
an output path that cannot be written is refused before anything is spent; "saved" is printed only for what was."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from fractions import Fraction
from pathlib import Path

import pytest

import ektelo_ng as ek
from ektelo_ng import sandbox
from ektelo_ng.gateway.owner import init_service
from ektelo_ng.kernel.ledger import SqliteLedger
from tests.served import start_server, write_table

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
def test_a_plan_that_rewrites_ledgers_and_fakes_its_report_spends_its_budget_and_no_more(tmp_path, sandboxed, seed):
    plan, table, domain = write(tmp_path)
    extra = ["--seed", seed] if seed else []
    with tempfile.TemporaryDirectory(prefix="ek-", dir="/tmp") as name:  # a served kernel's ledger in the plan's path
        bystander = SqliteLedger(Path(name) / "ledger.sqlite", ek.PureDP(1))
        bystander.add("ann", Fraction(1, 2))
        bystander.commit("ann", Fraction(1, 4), "noisy_count")
        done = run(str(plan), "--table", str(table), "--domain", str(domain), "--budget", "epsilon=1", *extra)
        assert bystander.shares()[0].spent == Fraction(1, 4)  # out of the plan's reach: nothing is refunded
        bystander.close()
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
    """Find the table's path in the kernel's command line and working directory, and read its rows; and read it at
    the path a plan could guess (here, the test's own)."""
    paths = {"TABLE_PATH"}
    for pid, argv, cwd in runs():
        table = option(argv, "--table")
        paths |= {table, os.path.join(cwd or f"/proc/{pid}/cwd", table)}
    for path in sorted(paths):
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
    print("my own arguments:", sys.argv)  # the --out path is not among them
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


def leave(marker, own_session):
    """A grandchild, double-forked (in a session of its own if asked), that would live on for a minute."""
    if os.fork() == 0:
        if own_session:
            os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", marker])
        os._exit(0)
    os.wait()


def plan(source, workload, budget):
    leave("MARKER-own-session", True)
    leave("MARKER-same-session", False)
    print("attack done")
    return measured(source, budget)
'''


REACH = _FIND_RUN + r'''
import socket


def plan(source, workload, budget):
    """Reach a port on the host's loopback."""
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=10).close()
        print("CONNECTED")
    except OSError as error:
        print(f"no network: {error}")
    print("attack done")
    return measured(source, budget)
'''

JUNK_ANSWERS = _FIND_RUN + r'''
import sys


def plan(source, workload, budget):
    """Write half a message on the answers' socket (its descriptor is in the child's arguments) before the real one."""
    answers = measured(source, budget)
    os.write(int(sys.argv[2]), b'{"note": "forged", ')
    print("attack done")
    return answers
'''

FOREIGN_CODES = _FIND_RUN + r'''
import numpy as np

from ektelo_ng.operators.estimate import VectorEstimate


class Forged(VectorEstimate):
    def synthetic(self, seed=None, labels=False):
        return {"a": np.array([0, 1, 99])}


def plan(source, workload, budget):
    """Synthetic records with a code the domain does not have."""
    print("attack done")
    return Forged(np.asarray(measured(source, budget), dtype=float), note="forged")
'''

FAILING = _FIND_RUN + r'''

def plan(source, workload, budget):
    measured(source, budget)
    raise ValueError("the plan failed after measuring")
'''


def attack(folder: Path, code: str, *extra: str, prefix: tuple[str, ...] = (), env: dict | None = None,
           ran: bool = True) -> subprocess.CompletedProcess:
    """``ektelo-ng run attack.py --table t.csv --domain d.json`` from ``folder``, as the red team ran it (after
    ``prefix``, in ``env``); checked to have run the plan to its end, if ``ran``."""
    write(folder)
    (folder / "attack.py").write_text(code.replace("TABLE_PATH", str(folder / "t.csv")))
    done = subprocess.run([*prefix, sys.executable, "-m", "ektelo_ng.cli", "run", "attack.py", "--table", "t.csv",
                           "--domain", "d.json", "--budget", "epsilon=1", *extra], capture_output=True, text=True,
                          timeout=300, cwd=folder, env=env)
    if ran:
        assert done.returncode == 0 and "attack done" in done.stdout, done.stdout + done.stderr
    return done


def test_a_plan_cannot_read_the_table_through_the_kernels_command_line_and_directory(tmp_path, sandboxed):
    done = attack(tmp_path, READ_TABLE)
    assert "LEAKED" not in done.stdout and f"refused {tmp_path / 't.csv'}" in done.stdout, done.stdout


def test_a_plan_can_neither_read_nor_open_for_writing_the_kernels_memory(tmp_path, sandboxed):
    done = attack(tmp_path, READ_HEAP)
    assert "HEAP" not in done.stdout and "WRITABLE" not in done.stdout, done.stdout


def test_a_grandchild_cannot_rewrite_the_out_file_or_print_after_the_report(tmp_path, sandboxed):
    done = attack(tmp_path, FORGE_REPORT, "--out", "out.json")
    assert "out.json" not in next(line for line in done.stdout.splitlines() if line.startswith("my own arguments"))
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


def _survivors(marker: str) -> dict[str, int]:
    """How many of the OUTLIVE plan's grandchildren are alive, by session; killed once counted."""
    found = {where: _processes_with(f"{marker}-{where}") for where in ("own-session", "same-session")}
    for pid in (pid for pids in found.values() for pid in pids):
        os.kill(pid, signal.SIGKILL)
    return {where: len(pids) for where, pids in found.items()}


def test_no_process_the_plan_started_outlives_the_run(tmp_path, sandboxed):
    marker = f"ektelo-test-{uuid.uuid4()}"
    attack(tmp_path, OUTLIVE.replace("MARKER", marker))
    assert _survivors(marker) == {"own-session": 0, "same-session": 0}


def test_a_plan_has_no_network_unless_asked(tmp_path, sandboxed):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        code = REACH.replace("PORT", str(listener.getsockname()[1]))
        assert "CONNECTED" not in attack(tmp_path, code).stdout
        assert "CONNECTED" in attack(tmp_path, code, "--network").stdout


def test_the_answers_a_plan_sends_are_checked_before_anything_is_written(tmp_path, sandboxed):
    junk = attack(tmp_path, JUNK_ANSWERS, "--out", "out.json", ran=False)
    assert junk.returncode == 2 and "sent answers run cannot read" in junk.stderr, junk.stderr
    assert "attack done" in junk.stdout and kernel_report(junk.stdout)[1].startswith("budget: spent epsilon = 1 of 1")
    assert not (tmp_path / "out.json").exists() and "saved" not in junk.stdout
    forged = attack(tmp_path, FOREIGN_CODES, "--synthetic", "s.csv", ran=False)
    assert forged.returncode == 2 and "outside 0..3" in forged.stderr, forged.stderr
    assert not (tmp_path / "s.csv").exists() and "saved" not in forged.stdout


# ---- where no sandbox can be made: refused, or --unsandboxed (and what that still protects) ---------------------
def test_without_a_sandbox_run_refuses_before_the_table_is_read_and_says_how_to_get_one(tmp_path):
    done = attack(tmp_path, READ_TABLE, env={**os.environ, "PATH": str(tmp_path / "empty")}, ran=False)
    assert done.returncode == 2 and "attack done" not in done.stdout and "budget:" not in done.stdout
    assert "bwrap is not installed" in done.stderr and "apt-get install bubblewrap" in done.stderr, done.stderr
    assert "--unsandboxed" in done.stderr
    attack(tmp_path, READ_TABLE, "--unsandboxed", env={**os.environ, "PATH": str(tmp_path / "empty")})


def _without_ptrace() -> tuple[str, ...]:
    """A prefix running a command as this user without CAP_SYS_PTRACE: root keeps every other power, so only
    non-dumpability can keep it out of another root process's memory."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to run as root without CAP_SYS_PTRACE")
    return (shutil.which("setpriv"), "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace", "--")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
def test_unsandboxed_the_kernels_memory_is_still_refused_to_the_plan(tmp_path):
    done = attack(tmp_path, READ_HEAP, "--unsandboxed", prefix=_without_ptrace())
    assert "refused memory of" in done.stdout and "HEAP" not in done.stdout and "WRITABLE" not in done.stdout, done.stdout


def test_unsandboxed_the_plan_reads_every_file_you_can_and_a_process_in_its_own_session_lives_on(tmp_path):
    """What --unsandboxed does not protect against (README, docs/service.md): measured, so the docs stay true."""
    assert "LEAKED 200 rows" in attack(tmp_path, READ_TABLE, "--unsandboxed").stdout
    marker = f"ektelo-test-{uuid.uuid4()}"
    attack(tmp_path, OUTLIVE.replace("MARKER", marker), "--unsandboxed")
    assert _survivors(marker) == {"own-session": 1, "same-session": 0}


def _memory_readable(pid: int) -> bool:
    """Whether a process of this user without CAP_SYS_PTRACE can open ``pid``'s memory (``pid`` too must run
    without it: Linux refuses a process the capabilities of one it reads)."""
    probe = [*_without_ptrace(), sys.executable, "-c", f"open('/proc/{pid}/mem', 'rb')"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
def test_a_served_kernel_and_protect_are_not_dumpable(tmp_path):
    with tempfile.TemporaryDirectory(prefix="ek-", dir="/tmp") as name:  # a unix socket's path is short
        folder = Path(name)
        write_table(folder)
        init_service(folder / "svc", ek.PureDP(1), tls=False)
        server = subprocess.Popen([*_without_ptrace(), sys.executable, "-m", "ektelo_ng.cli", "kernel", "serve", "--dir",
                                   str(folder / "svc"), "--table", str(folder / "data.csv"), "--domain",
                                   str(folder / "domain.json")], stdout=subprocess.PIPE, text=True)
        control = subprocess.Popen([*_without_ptrace(), sys.executable, "-c", "import sys; sys.stdin.read()"],
                                   stdin=subprocess.PIPE)
        try:
            assert "listening on" in server.stdout.readline()
            assert _memory_readable(control.pid)  # the probe can succeed: on a process that is dumpable
            assert not _memory_readable(server.pid)
        finally:
            for process in (server, control):
                process.kill()
                process.wait()
    dumpable = ("import ctypes, ektelo_ng as ek; prctl = ctypes.CDLL(None).prctl; before = prctl(3, 0, 0, 0, 0); "
                "ek.protect({'a': [0, 1]}, {'a': 2}, ek.PureDP(1)); print(before, prctl(3, 0, 0, 0, 0))")
    assert subprocess.run([sys.executable, "-c", dumpable], capture_output=True, text=True).stdout.split() == ["1", "0"]


def test_a_private_path_inside_what_the_sandbox_shows_is_refused():
    with pytest.raises(ValueError, match="the table .* is inside .*which the plan's sandbox shows it"):
        sandbox.check_hidden({"the table": Path(sys.prefix) / "people.csv"})
    sandbox.check_hidden({"the table": Path(tempfile.gettempdir()) / "people.csv"})


# ---- issue 45: an output path is checked before anything is spent; "saved" only when saved ---------------------
@pytest.mark.parametrize("option, path, says", [
    ("--out", "nosuchdir/x.csv", "folder nosuchdir does not exist"), ("--out", "x.xlsx", "a .csv or .json file"),
    ("--out", ".", "the folder holds files already"), ("--plot", "nosuchdir/fit.png", "folder nosuchdir does not exist"),
    ("--synthetic", "nosuchdir/s.csv", "does not exist")])
def test_an_output_that_cannot_be_written_is_refused_before_the_plan_runs(tmp_path, option, path, says):
    done = attack(tmp_path, READ_TABLE, option, path, ran=False)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "attack done" not in done.stdout and "budget:" not in done.stdout


def test_against_a_served_kernel_a_bad_out_path_spends_nothing_and_a_good_one_is_saved(sandboxed):
    with tempfile.TemporaryDirectory(prefix="ek-", dir="/tmp") as name:
        folder = Path(name)
        write_table(folder)
        service = init_service(folder / "svc", ek.PureDP(1), tls=False)
        alice = service.add_analyst("alice", Fraction(1), f"unix:{folder / 'svc' / 'kernel.sock'}")
        (folder / "plan.py").write_text(_FIND_RUN + "\n\ndef plan(source, workload, budget):\n"
                                        "    return measured(source, budget)\n")
        server, _ = start_server(folder, folder / "svc")
        try:
            command = [sys.executable, "-m", "ektelo_ng.cli", "run", "plan.py", "--credential",
                       str(folder / "svc" / "credentials" / "alice.json"), "--budget", "epsilon=1/2", "--out"]
            refused = subprocess.run([*command, "nosuchdir/x.csv"], capture_output=True, text=True, cwd=folder)
            assert refused.returncode == 2 and "folder nosuchdir does not exist" in refused.stderr
            assert ek.connect(credential=alice).budget.spent.value == 0
            done = subprocess.run([*command, "x.csv"], capture_output=True, text=True, cwd=folder)
            assert done.returncode == 0 and kernel_report(done.stdout)[-1] == "saved x.csv", done.stderr
            assert (folder / "x.csv").read_text().startswith("query,answer,variance")
            assert ek.connect(credential=alice).budget.spent.value == Fraction(1, 2)
        finally:
            server.kill()
            server.wait()


def test_saved_is_printed_only_for_what_was_saved(tmp_path, sandboxed):
    done = attack(tmp_path, FAILING, "--out", "out.csv", ran=False)
    assert done.returncode == 2 and "the plan failed after measuring" in done.stderr, done.stderr
    assert kernel_report(done.stdout)[1].startswith("budget: spent epsilon = 1 of 1")
    assert "saved" not in done.stdout and not (tmp_path / "out.csv").exists()
