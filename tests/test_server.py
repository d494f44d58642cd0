"""The served kernel as separate processes: the owner's commands, analysts racing from their own processes, a
kill -9 and restart, and ``ektelo-ng run`` keeping the data out of the plan's process (issue 16)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest

import ektelo_ng as ek
from ektelo_ng.cli import main
from ektelo_ng.gateway.owner import ServiceDirectory, init_service
from ektelo_ng.operators.privacy import zcdp_to_approx_dp
from tests.served import Raw, cli, start_server, write_table

ANALYSTS = {"ann": "1/4", "ben": "1/4", "cat": "1/8", "dan": "3/8"}


@pytest.fixture()
def deployment():
    """A table and a service directory (no TLS: these tests use the unix socket) with four analysts."""
    with tempfile.TemporaryDirectory(prefix="ek-", dir="/tmp") as name:
        folder = Path(name)
        write_table(folder)
        service = init_service(folder / "svc", ek.PureDP(1), tls=False)  # as `kernel init`, `analysts add` do
        for analyst, share in ANALYSTS.items():
            service.add_analyst(analyst, Fraction(share), f"unix:{folder / 'svc' / 'kernel.sock'}")
        yield folder


def credential(folder: Path, analyst: str) -> Path:
    return folder / "svc" / "credentials" / f"{analyst}.json"


def spent(folder: Path) -> dict[str, Fraction]:
    return {s.analyst: s.spent for s in ServiceDirectory(folder / "svc").ledger().shares()}


def charged(folder: Path) -> dict[str, Fraction]:
    """The sum of each analyst's committed charges, read from the ledger's own record of them."""
    with contextlib.closing(sqlite3.connect(ServiceDirectory(folder / "svc").ledger_path)) as db:
        rows = db.execute("SELECT analyst, increment FROM charges").fetchall()
    totals = dict.fromkeys(ANALYSTS, Fraction(0))
    for analyst, increment in rows:
        totals[analyst] += Fraction(increment)
    return totals


_RACER = """
import sys, ektelo_ng as ek
s = ek.connect(credential=sys.argv[1], timeout=60)
x = s.source.vectorize()
answers = 0
while True:
    try:
        x.noisy_count("1/64")
        answers += 1
    except ek.BudgetExceededError:
        break
print(answers)
"""


def test_eight_analyst_processes_racing_never_overspend_a_share(deployment):
    server, _ = start_server(deployment, deployment / "svc", "--rate", "100000")
    try:
        racers = [subprocess.Popen([sys.executable, "-c", _RACER, str(credential(deployment, analyst))],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for analyst in ANALYSTS for _ in range(2)]
        outputs = [racer.communicate(timeout=240) for racer in racers]
    finally:
        server.kill()
        server.wait()
    assert all(racer.returncode == 0 for racer in racers), [err for _, err in outputs]
    answers = [int(out) for out, _ in outputs]
    for i, (analyst, share) in enumerate(ANALYSTS.items()):
        assert answers[2 * i] + answers[2 * i + 1] == Fraction(share) * 64  # every charge of 1/64 made, none more
    shares = {analyst: Fraction(share) for analyst, share in ANALYSTS.items()}
    assert charged(deployment) == shares  # each answer's charge committed before it was sent
    assert spent(deployment) == shares, "the charges stand but the spends do not: another process rewrote the ledger"


_KILLED_AT_THIRD_CHARGE = """
import contextlib, os, signal, sys
from ektelo_ng.cli import main
from ektelo_ng.kernel.ledger import SqliteLedger

charges, commit, transaction = 0, SqliteLedger.commit, SqliteLedger._transaction


def killed_after_third(ledger, *arguments):
    global charges
    charges += 1
    spent = commit(ledger, *arguments)
    if charges == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # the ledger said it is committed; its answer is not yet sent
    return spent


@contextlib.contextmanager
def killed_before_third_commits(ledger):
    with transaction(ledger):
        yield
        if charges == 3 and sys.argv[1] == "before":
            os.kill(os.getpid(), signal.SIGKILL)  # the charge written, not committed


SqliteLedger.commit, SqliteLedger._transaction = killed_after_third, killed_before_third_commits
main(sys.argv[2:])
"""


@pytest.mark.parametrize("killed", ["before", "after"])
def test_a_kernel_killed_at_a_commit_has_sent_no_answer_its_ledger_does_not_hold(deployment, killed):
    """Kill -9 inside the third charge's transaction, just before or just after its COMMIT: that charge's answer is
    never sent, and a fresh reader of the ledger (its WAL not checkpointed) sees exactly the charges committed."""
    server, address = start_server(deployment, deployment / "svc", launcher=("-c", _KILLED_AT_THIRD_CHARGE, killed))
    try:
        raw = Raw.signed_in(address, credential(deployment, "ann"))
        x = raw.send({"op": "vectorize", "source": raw.send({"op": "root"})["source"]})["source"]
        replies = [raw.send({"op": "noisy_count", "source": x, "epsilon": "1/16"}) for _ in range(3)]
        assert [reply and reply["kind"] for reply in replies] == ["answer", "answer", None]
        assert server.wait(timeout=60) == -signal.SIGKILL
    finally:
        server.kill()
        server.wait()
    assert (deployment / "svc" / "ledger.sqlite-wal").stat().st_size > 0  # the reader must recover the WAL
    committed = Fraction(3 if killed == "after" else 2, 16)
    assert charged(deployment)["ann"] == spent(deployment)["ann"] == committed


_ADDER = """
import sys
from fractions import Fraction
from ektelo_ng.gateway.owner import ServiceDirectory, init_service
try:
    ServiceDirectory(__import__("pathlib").Path(sys.argv[1])).add_analyst(sys.argv[2], Fraction(1, 3))
    print("added")
except ValueError as error:
    print("refused")
"""


def test_owners_adding_analysts_at_once_never_give_away_more_than_the_total(tmp_path):
    cli("kernel", "init", str(tmp_path / "svc"), "--budget", "epsilon=1", "--no-tls")
    adders = [subprocess.Popen([sys.executable, "-c", _ADDER, str(tmp_path / "svc"), f"a{i}"], stdout=subprocess.PIPE,
                               text=True) for i in range(8)]
    outcomes = [adder.communicate(timeout=120)[0].strip() for adder in adders]
    assert sorted(outcomes) == ["added"] * 3 + ["refused"] * 5
    shares = ServiceDirectory(tmp_path / "svc").ledger().shares()
    assert len(shares) == 3 and sorted(p.name for p in (tmp_path / "svc" / "credentials").iterdir()) == sorted(
        f"{s.analyst}.json" for s in shares)  # a refused analyst leaves no credential behind


def test_a_killed_kernel_restarts_with_every_shares_spend(deployment):
    server, _ = start_server(deployment, deployment / "svc")
    try:
        for analyst, epsilon in [("ann", "1/8"), ("ben", "1/4"), ("dan", "1/16")]:
            x = ek.connect(credential=credential(deployment, analyst), timeout=30).source.vectorize()
            x.noisy_count(epsilon)
    finally:
        os.kill(server.pid, signal.SIGKILL)  # crash right after the answers
        server.wait(timeout=10)
    expected = {"ann": Fraction(1, 8), "ben": Fraction(1, 4), "cat": Fraction(0), "dan": Fraction(1, 16)}
    assert spent(deployment) == expected
    server, _ = start_server(deployment, deployment / "svc")
    try:
        sessions = {a: ek.connect(credential=credential(deployment, a), timeout=30) for a in ANALYSTS}
        assert {a: s.budget.spent.value for a, s in sessions.items()} == expected
        with pytest.raises(ek.BudgetExceededError):
            sessions["ben"].source.vectorize().noisy_count("1/64")
        sessions["ann"].source.vectorize().noisy_count("1/8")
        assert sessions["ann"].budget.remaining == ek.PureDP.zero()
    finally:
        server.kill()
        server.wait()


def test_the_owner_sees_every_share_and_the_audit_trail(deployment):
    server, _ = start_server(deployment, deployment / "svc")
    try:
        ek.connect(credential=credential(deployment, "cat"), timeout=30).source.vectorize().noisy_count("1/16")
        with pytest.raises(ek.AccessDeniedError):
            ek.connect(f"unix:{deployment / 'svc' / 'kernel.sock'}", timeout=30).budget
        cli("kernel", "analysts", "revoke", "dan", "--dir", str(deployment / "svc"))
        with pytest.raises(ek.AccessDeniedError, match="revoked"):
            ek.connect(credential=credential(deployment, "dan"), timeout=30)
    finally:
        server.kill()
        server.wait()
    listing = json.loads(cli("kernel", "analysts", "list", "--json", "--dir", str(deployment / "svc")).stdout)
    rows = {row["analyst"]: row for row in listing["analysts"]}
    assert rows["cat"]["spent"] == "1/16" and rows["dan"]["status"] == "revoked"
    assert listing["table"]["allocated"] == "5/8"  # dan's unspent 3/8 is free again
    audit = cli("kernel", "audit", "--json", "--dir", str(deployment / "svc")).stdout.splitlines()
    outcomes = [(e["analyst"], e["op"], e["outcome"]) for e in map(json.loads, audit)]
    assert ("cat", "noisy_count", "ok") in outcomes and ("dan", "hello", "unauthenticated") in outcomes


def test_zcdp_shares_are_shown_as_epsilon_delta(tmp_path):
    cli("kernel", "init", str(tmp_path / "svc"), "--budget", "rho=1/2", "--no-tls")
    cli("kernel", "analysts", "add", "ann", "--budget", "rho=1/8", "--dir", str(tmp_path / "svc"))
    listing = json.loads(cli("kernel", "analysts", "list", "--json", "--delta", "1e-6", "--dir",
                             str(tmp_path / "svc")).stdout)
    ann = listing["analysts"][0]["epsilon_at_delta"]
    assert listing["table"]["delta"] == 1e-6
    assert ann == pytest.approx(zcdp_to_approx_dp(ek.ZCDP("1/8"), 1e-6))
    assert listing["table"]["epsilon_at_delta"] == pytest.approx(zcdp_to_approx_dp(ek.ZCDP("1/2"), 1e-6))
    refused = cli("kernel", "analysts", "add", "ben", "--budget", "epsilon=1", "--dir", str(tmp_path / "svc"),
                  check=False)
    assert refused.returncode == 2 and "rho=VALUE" in refused.stderr


def test_serving_beyond_loopback_without_tls_is_refused(deployment):
    done = cli("kernel", "serve", "--dir", str(deployment / "svc"), "--table", str(deployment / "data.csv"),
               "--domain", str(deployment / "domain.json"), "--listen", "0.0.0.0:0", check=False)
    assert done.returncode == 2 and "without TLS" in done.stderr


_NOSY_PLAN = """
import gc
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.kernel.table import TableBackend
from ektelo_ng.operators.matrix import Identity


def plan(source, workload, budget):
    gc.collect()
    held = [type(o).__name__ for o in gc.get_objects() if isinstance(o, (Kernel, TableBackend))]
    print("held:", repr(held))
    x = source.vectorize()
    return x.laplace(Identity(x.size), budget.epsilon).values
"""


@pytest.mark.parametrize("in_process", [False, True])
def test_run_keeps_the_data_out_of_the_plans_process_unless_asked(tmp_path, capsys, request, in_process):
    if not in_process:
        request.getfixturevalue("sandboxed")  # ektelo-ng run runs the plan in its sandbox
    write_table(tmp_path)
    (tmp_path / "nosy.py").write_text(_NOSY_PLAN)
    assert main(["run", str(tmp_path / "nosy.py"), "--table", str(tmp_path / "data.csv"), "--domain",
                 str(tmp_path / "domain.json"), "--budget", "epsilon=1", "--out", str(tmp_path / "out.json"),
                 *(["--in-process"] if in_process else [])]) == 0
    held = capsys.readouterr().out.split("held: ", 1)[1].splitlines()[0]
    assert (held == "[]") is not in_process, held
    assert json.loads((tmp_path / "out.json").read_text())["budget_spent"] == "1"


def test_bad_addresses_are_explained():
    with pytest.raises(ValueError, match="HOST:PORT or unix:PATH"):
        ek.connect("localhost")
    with pytest.raises(ValueError, match="credential file"):
        ek.connect()


def test_an_in_process_ledger_cannot_be_reopened_with_another_budget(tmp_path):
    domain = ek.Domain.from_dict({"age": 6, "zone": 4})
    ek.protect({"age": [1], "zone": [2]}, domain, ek.PureDP(1), ledger=tmp_path / "ledger.sqlite")
    with pytest.raises(ValueError, match="was created for"):
        ek.protect({"age": [1], "zone": [2]}, domain, ek.PureDP(2), ledger=tmp_path / "ledger.sqlite")
