"""Out-of-process mode: a real kernel process, isolation of the data, and crash safety of the ledger."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from kernel.matrix import Identity
from kernel.service import Kernel
from kernel.table import TableBackend


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    rows = ["age,zone"] + [f"{a},{z}" for a, z in zip(rng.integers(0, 6, 300), rng.integers(0, 4, 300))]
    (tmp_path / "data.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "domain.json").write_text(json.dumps({"age": 6, "zone": 4}))
    return tmp_path


def serve(files, *extra):
    command = [sys.executable, "-m", "ektelo_ng.cli", "kernel", "serve", "--table", str(files / "data.csv"),
               "--domain", str(files / "domain.json"), "--budget", "epsilon=1", "--listen", "127.0.0.1:0", *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise AssertionError(f"kernel did not start: {line!r} {process.stderr.read()}")
    return process, line.rsplit(" ", 1)[1].strip()


def stop(process):
    process.kill()
    process.wait(timeout=10)


def test_remote_session_answers_and_the_client_holds_no_data(files):
    process, address = serve(files)
    try:
        s = ek.connect(address, timeout=30)
        x = s.source.vectorize()
        answer = x.laplace(Identity(x.size), Fraction(1, 2))
        assert answer.values.shape == (24,) and s.budget.spent == ek.PureDP("1/2")
        gc.collect()
        assert not any(isinstance(o, (Kernel, TableBackend)) for o in gc.get_objects())
    finally:
        stop(process)


def test_a_killed_kernel_restarts_with_its_spent_budget(files):
    ledger = files / "ledger.sqlite"
    process, address = serve(files, "--ledger", str(ledger))
    try:
        x = ek.connect(address, timeout=30).source.vectorize()
        x.laplace(Identity(x.size), Fraction(3, 10))
    finally:
        os.kill(process.pid, signal.SIGKILL)  # crash right after the answer
        process.wait(timeout=10)
    process, address = serve(files, "--ledger", str(ledger))
    try:
        s = ek.connect(address, timeout=30)
        assert s.budget.spent == ek.PureDP("3/10")
        x = s.source.vectorize()
        with pytest.raises(ek.BudgetExceededError):
            x.laplace(Identity(x.size), Fraction(8, 10))
        x.laplace(Identity(x.size), Fraction(7, 10))
        assert s.budget.remaining == ek.PureDP.zero()
    finally:
        stop(process)


def test_a_ledger_cannot_be_reopened_with_another_budget(files):
    ledger = files / "ledger.sqlite"
    ek.protect({"age": [1], "zone": [2]}, ek.Domain.from_dict({"age": 6, "zone": 4}), ek.PureDP(1), ledger=ledger)
    with pytest.raises(ValueError, match="was created for"):
        ek.protect({"age": [1], "zone": [2]}, ek.Domain.from_dict({"age": 6, "zone": 4}), ek.PureDP(2), ledger=ledger)


def test_bad_addresses_are_explained():
    with pytest.raises(ValueError, match="HOST:PORT or unix:PATH"):
        ek.connect("localhost")
