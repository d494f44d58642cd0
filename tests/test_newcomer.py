"""A newcomer's first hour, run as a user would: the CLI as a subprocess on their own files. Failures end in one
``error:`` line that says what, why and what to do, never in a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ektelo_ng as ek

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "ektelo_ng.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def folder(tmp_path):
    ages = np.random.default_rng(0).integers(0, 16, 400)
    (tmp_path / "t.csv").write_text("age\n" + "\n".join(map(str, ages)) + "\n")
    (tmp_path / "d.json").write_text(json.dumps({"age": 16}))
    (tmp_path / "hb.py").write_text(textwrap.dedent("""
        import ektelo_ng as ek

        def plan(source, workload, budget):
            return ek.catalog["HB"](source, ek.workload.Prefix(16), budget)
    """))
    (tmp_path / "greedy.py").write_text(textwrap.dedent("""
        import ektelo_ng as ek

        def plan(source, workload, budget):
            vector, _ = ek.measure.data_vector(source)
            return [ek.measure.laplace(vector, ek.matrix.Identity(16), 1) for _ in range(3)]
    """))
    return tmp_path


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("ektelo-ng") and "error:" in lines[0]
    return lines[0]


@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_a_parquet_table_goes_through_run_and_protect(folder):
    duckdb = pytest.importorskip("duckdb")
    duckdb.connect().execute(f"COPY (SELECT * FROM read_csv_auto('{folder / 't.csv'}')) TO '{folder / 't.parquet'}'")
    done = cli("run", "hb.py", "--table", "t.parquet", "--domain", "d.json", "--budget", "epsilon=1", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "16 answers" in done.stdout and "budget: spent epsilon = 1 of 1 (0 left" in done.stdout
    session = ek.protect(folder / "t.parquet", {"age": 16}, ek.PureDP(1))
    assert session.source.vectorize().laplace(ek.matrix.Total(16), 1).values[0] == pytest.approx(400, abs=60)


@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_budget_exhaustion_in_run_is_one_clean_line(folder):
    done = cli("run", "greedy.py", "--table", "t.csv", "--domain", "d.json", "--budget", "epsilon=2", cwd=folder)
    line = one_error_line(done)
    assert "budget" in line and "remains" in line and "nothing was measured" in line


@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_a_refused_connection_names_the_address_and_how_to_start_a_kernel(folder):
    done = cli("run", "hb.py", "--connect", f"unix:{folder / 'nobody.sock'}", "--budget", "epsilon=1", cwd=folder)
    line = one_error_line(done)
    assert "nobody.sock" in line and "kernel serve" in line


def test_a_budget_reads_as_one_line_with_its_epsilon_delta():
    session = ek.protect({"a": np.arange(20) % 4}, {"a": 4}, ek.ZCDP("1/2"), seed=0)
    session.source.vectorize().gaussian(ek.matrix.Identity(4), rho="0.1234567")
    text = str(session.budget)
    assert text.startswith("spent rho = 0.1235 of 0.5 (0.3765 left") and "Fraction" not in text
    assert f"spent epsilon = {session.budget.approx_dp(1e-9):.4g} of" in text and "delta = 1e-09" in text
    pure = ek.protect({"a": np.arange(20) % 4}, {"a": 4}, ek.PureDP(1), seed=0)
    pure.source.vectorize().laplace(ek.matrix.Identity(4), 1 / 3)
    assert str(pure.budget).startswith("spent epsilon = 0.3333 of 1 (0.6667 left")


def test_kernel_status_shows_the_ledger_to_the_data_owner(tmp_path):
    assert cli("kernel", "init", "svc", "--budget", "rho=0.5", "--no-tls", cwd=tmp_path).returncode == 0
    assert cli("kernel", "analysts", "add", "alice", "--budget", "rho=0.2", "--dir", "svc", cwd=tmp_path).returncode == 0
    done = cli("kernel", "status", "--dir", "svc", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rho 0.5 total, 0.2 given to analysts, 0 spent" in done.stdout and "alice" in done.stdout
    assert json.loads(cli("kernel", "status", "--dir", "svc", "--json", cwd=tmp_path).stdout)["table"]["total"] == "1/2"


@pytest.mark.parametrize("budget", ["epsilon=1", "eps=1", "rho=0.5", "epsilon=1,delta=1e-9", "pcost=1"])
@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_every_command_reads_the_same_budget_and_domain_spellings(folder, budget):
    run = cli("run", "HB", "--table", "t.csv", "--domain", "age=16", "--budget", budget, "--seed", "3",
              cwd=folder)  # a kernel process: kernel serve reads the same spellings
    assert run.returncode == 0, run.stderr
    assert "16 answers" in run.stdout and "seeded with --seed 3" in run.stdout
    init = cli("kernel", "init", f"svc-{budget.replace(',', '-')}", "--budget", budget, "--no-tls", cwd=folder)
    assert init.returncode == 0, init.stderr
    kind = "hdmm" if budget.startswith("eps") and "delta" not in budget else "residual-planner"
    extra = ["--workload", "prefix:16"] if kind == "hdmm" else ["--domain", "age=16,sex=2", "--marginals", "age,sex;sex"]
    chosen = cli("select", kind, *extra, "--budget", budget, "--json", cwd=folder)
    assert chosen.returncode == 0, chosen.stderr
    assert json.loads(chosen.stdout)["budget"] == budget


def test_the_same_domain_file_or_sizes_work_in_select_and_a_bad_budget_says_what_is_accepted(folder):
    by_file = cli("select", "residual-planner", "--domain", "d.json", "--marginals", "kway:1", "--json", cwd=folder)
    by_sizes = cli("select", "residual-planner", "--domain", "16", "--marginals", "kway:1", "--json", cwd=folder)
    assert json.loads(by_file.stdout)["rmse"] == json.loads(by_sizes.stdout)["rmse"]
    line = one_error_line(cli("select", "residual-planner", "--budget", "sigma=1", cwd=folder))
    assert "epsilon=E" in line and "rho=R" in line
    line = one_error_line(cli("select", "residual-planner", "--domain", "age=4,sex=2", "--marginals", "age,zone",
                              cwd=folder))
    assert "zone" in line and "age, sex" in line


def test_dpbench_without_matplotlib_fails_before_the_replay_and_its_table_has_a_legend(monkeypatch, tmp_path, capsys):
    from ektelo_ng.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert main(["dpbench", "--plots", "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert "matplotlib" in capsys.readouterr().err and not (tmp_path / "out").exists()
    monkeypatch.undo()
    assert main(["dpbench", "--algorithms", "Identity", "HB", "--datasets", "SYN-STEPS", "--scales", "1e3", "--trials",
                 "1", "--out", str(tmp_path / "ok"), "--no-progress"]) == 0
    assert "ratio: mean error over Identity's" in capsys.readouterr().out


@pytest.mark.parametrize("option, value, words", [
    ("--budget", "pcost=abc", ["pcost=abc"]), ("--budget", "rho=0", ["rho=0"]),
    ("--budget", "epsilon=1e-300,delta=1e-9", ["epsilon=1e-300,delta=1e-9", "below 1e-20"]),
    ("--budget", "epsilon=2,delta=2", ["delta"]), ("--domain", "age=16,age=8", ["own"]),
    ("--domain", "=3", ["=3"]), ("--domain", "bad.json", ["bad.json"]), ("--marginals", ";", ["empty marginal"]),
])
def test_each_bad_spelling_names_what_it_could_not_read(folder, option, value, words):
    (folder / "bad.json").write_text("{not json")
    args = {"--budget": "rho=0.5", "--domain": "age=16,sex=2", "--marginals": "age", option: value}
    line = one_error_line(cli("select", "residual-planner", *[x for kv in args.items() for x in kv], cwd=folder))
    assert all(word in line for word in words), line


def test_parquet_nulls_are_refused_not_counted_as_zero(folder):
    duckdb = pytest.importorskip("duckdb")
    duckdb.connect().execute(f"COPY (SELECT CASE WHEN i % 4 = 0 THEN NULL ELSE i % 16 END AS age FROM range(40) t(i))"
                             f" TO '{folder / 'nulls.parquet'}'")
    if importlib.util.find_spec("pyarrow") is None:
        with pytest.raises(ValueError, match="missing values"):
            ek.protect(folder / "nulls.parquet", {"age": 16}, ek.PureDP(1))
    else:
        with pytest.raises(ValueError):
            ek.protect(folder / "nulls.parquet", {"age": 16}, ek.PureDP(1))
