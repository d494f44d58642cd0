"""The advisor under a demanding and a hostile user: scripts without a main guard, huge and malformed workloads,
tampered advice files, bad arguments, and numbers checked against what the strategies deliver."""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.cli import main
from ektelo_ng.commands import run_command
from ektelo_ng.operators.matrix import Identity
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.advice import QueryWorkload
from ektelo_ng.operators.advice import candidates as candidates_module
from ektelo_ng.operators.advice.advise import Row, _ranked
from ektelo_ng.operators.advice.candidates import Cost, candidates
from ektelo_ng.operators.advice.deadline import Worker
from ektelo_ng.operators.privacy import epsilon_within_zcdp
from ektelo_ng.plans import catalog

ROOT = Path(__file__).resolve().parents[1]


def run_script(folder: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` saved as a script and run as a user would (``python script.py``), with this checkout."""
    script = folder / "script.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)


# ---- the worker process ------------------------------------------------------------------------------------
def test_a_script_without_a_main_guard_is_not_run_again_by_the_worker(tmp_path):
    """Spawn re-runs an unguarded script in each worker: its releases would repeat, unaccounted, and the advice
    would find no selector."""
    done = run_script(tmp_path, (
        "import ektelo_ng as ek\n"
        "with open('runs.txt', 'a') as runs:\n"
        "    runs.write('x')\n"
        "advice = ek.advise([8], ek.workload.Prefix(8), ek.PureDP(1.0), time_limit=20)\n"
        "print(advice.pick.name)\n"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "runs.txt").read_text() == "x"
    assert "Traceback" not in done.stderr


def test_a_worker_starts_under_an_address_space_limit_lower_than_its_own(tmp_path):
    """A hard ``ulimit -v`` below three quarters of the machine: the worker keeps the lower limit instead of
    failing to start (every selector was then 'no time left for it')."""
    done = run_script(tmp_path, (
        "import resource\n"
        "from ektelo_ng.operators.advice.deadline import Worker\n"
        "resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))\n"
        "with Worker(memory_limit=64 * 2**30) as worker:\n"
        "    print(worker.run(sum, ([1, 2],), 60))\n"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "status='ok', value=3" in done.stdout


def test_a_worker_that_cannot_start_says_so_and_none_starts_without_time():
    with Worker(preload=("no_such_module_anywhere",)) as worker:
        outcome = worker.run(sum, ([1],), 60)
        assert outcome.status == "error" and "could not start" in outcome.reason
        assert not worker.start(0) and worker._process is None
        assert worker.run(sum, ([1],), 0).reason == "no time left for it"


# ---- saved advice through the kernel --------------------------------------------------------------------------
def test_a_data_dependent_pick_under_zcdp_runs_at_the_advised_epsilon(tmp_path):
    """Evidence rows are priced at epsilon = sqrt(2 rho) (Laplace); the plan got the ZCDP budget and failed."""
    budget = ek.ZCDP("0.005")
    advice = ek.advise([32, 32], wl.RandomRange((32, 32), 50, seed=0), budget, records=1000, time_limit=5)
    assert advice.pick.status == "evidence"
    path = tmp_path / "advice.json"
    advice.save(path)
    rng = np.random.default_rng(0)
    columns = {"a0": rng.integers(0, 8, 1000), "a1": rng.integers(0, 32, 1000)}
    session = ek.protect(columns, {"a0": 32, "a1": 32}, budget, seed=0)
    estimate = catalog["Advised"](session.source, None, budget, advice=path)
    assert estimate.answer(advice.workload.answers).shape == (50,)
    assert 0 < session.budget.spent.value <= epsilon_within_zcdp(Fraction(1, 200)) ** 2 / 2  # its stages' eps^2/2


TAMPERED = {
    "no pick": lambda d: d.pop("pick"),
    "pick not an object": lambda d: d.__setitem__("pick", [1]),
    "no family": lambda d: d["pick"].pop("family"),
    "unknown family": lambda d: d["pick"].__setitem__("family", "magic"),
    "unknown HDMM template": lambda d: d["pick"].__setitem__("option", "opt_magic"),
    "unknown classic strategy": lambda d: d["pick"].update(family="classic", option="Foo"),
    "unknown noise": lambda d: d["pick"].__setitem__("noise", "cauchy"),
    "restarts a string": lambda d: d["pick"].__setitem__("restarts", "3"),
    "restarts zero": lambda d: d["pick"].__setitem__("restarts", 0),
    "seed a string": lambda d: d["pick"].__setitem__("seed", "x"),
    "error a string": lambda d: d["pick"].__setitem__("unit_error", "x"),
    "plan not in the catalog": lambda d: d.__setitem__("pick", {"name": "X", "noise": "laplace", "rmse": 1.0,
                                                               "plan": "NoSuchPlan", "records": 1000}),
    "plan Advised (itself)": lambda d: d.__setitem__("pick", {"name": "X", "noise": "laplace", "rmse": 1.0,
                                                             "plan": "Advised", "records": 1000}),
    "plan data-independent": lambda d: d.__setitem__("pick", {"name": "X", "noise": "laplace", "rmse": 1.0,
                                                             "plan": "Identity", "records": 1000}),
    "negative scale": lambda d: d.__setitem__("pick", {"name": "X", "noise": "laplace", "rmse": 1.0,
                                                      "plan": "DAWA", "records": -5}),
    "no scale": lambda d: d.__setitem__("pick", {"name": "X", "noise": "laplace", "rmse": 1.0, "plan": "DAWA"}),
    "bad budget": lambda d: d.__setitem__("budget", {"kind": "zcdp", "value": "abc"}),
    "zero budget": lambda d: d.__setitem__("budget", {"kind": "zcdp", "rho": "0"}),
    "budget of another kind's field": lambda d: d.__setitem__("budget", {"kind": "pure", "rho": "1"}),
    "no budget": lambda d: d.pop("budget"),
    "no workload": lambda d: d.pop("workload"),
    "unknown matrix kind": lambda d: d["workload"].__setitem__("matrix", {"kind": "nope"}),
    "attribute out of range": lambda d: d.__setitem__("workload", {"domain": {"age": 16}, "items": [
        {"attributes": [5], "matrix": {"kind": "identity", "n": 16}, "weight": 1}]}),
    "negative weight": lambda d: d.__setitem__("workload", {"domain": {"age": 16}, "items": [
        {"attributes": [0], "matrix": {"kind": "identity", "n": 16}, "weight": -1}]}),
    "another domain, huge": lambda d: d.__setitem__("workload", {"domain": {"age": 10**12},
                                                                 "matrix": {"kind": "identity", "n": 10**12}}),
    "another domain": lambda d: d.__setitem__("workload", {"domain": {"age": 32},
                                                           "matrix": {"kind": "identity", "n": 32}}),
}


@pytest.fixture(scope="module")
def saved_advice(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("advice") / "advice.json"
    assert main(["advise", "--workload", "prefix:16", "--domain", "age=16", "--budget", "epsilon=0.5", "--out",
                 str(path), "--no-progress", "--time-limit", "20"]) == 0
    return json.loads(path.read_text())


@pytest.mark.parametrize("change", TAMPERED, ids=list(TAMPERED))
def test_a_tampered_advice_is_refused_in_one_line_before_the_table_is_read(tmp_path, capsys, saved_advice, change):
    document = copy.deepcopy(saved_advice)
    TAMPERED[change](document)
    path = tmp_path / "advice.json"
    path.write_text(json.dumps(document))
    capsys.readouterr()
    code = main(["run", str(path), "--table", str(tmp_path / "no_table.csv"), "--domain", "age=16", "--budget",
                 "epsilon=0.5", "--in-process"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ektelo-ng run: error: ") and err.count("\n") == 1, err
    assert "advice.json" in err and "no_table" not in err, err


# ---- workload files -------------------------------------------------------------------------------------------
BAD_FILES = {
    "size a fraction": ("json", {"domain": {"a": 4.5}, "workload": [{"marginals": "kway:1"}]}, "size of 'a'"),
    "size a word": ("json", {"domain": {"a": "ten"}, "workload": [{"marginals": "kway:1"}]}, "size of 'a'"),
    "size negative": ("json", {"domain": {"a": -3}, "workload": [{"marginals": "kway:1"}]}, "positive"),
    "no attributes": ("json", {"domain": {}, "workload": [{"marginals": "kway:1"}]}, "at least one attribute"),
    "weight a list": ("json", {"domain": {"a": 4}, "workload": [{"marginals": "kway:1", "weight": [1]}]},
                      "item 1: weight"),
    "weight a word": ("json", {"domain": {"a": 4}, "workload": [{"marginals": "kway:1", "weight": "heavy"}]},
                      "item 1: weight"),
    "empty item": ("json", {"domain": {"a": 4}, "workload": [{}]}, "{marginals: ...}"),
    "attributes alone": ("json", {"domain": {"a": 4}, "workload": [{"attributes": ["a"]}]}, "queries: ...}"),
    "argument to prefix": ("json", {"domain": {"a": 4}, "workload": [{"attributes": ["a"],
                                                                        "queries": {"a": "prefix:3"}}]},
                           "prefix takes no argument"),
    "not UTF-8": ("json", b"\xff\xfe\x00", "utf-8"),
    "broken YAML": ("yaml", "domain: {a: 4}\nworkload: [\n", "is not YAML"),
    "YAML with a Python tag": ("yaml", "domain: !!python/object:os.system {}\nworkload: []\n", "is not YAML"),
}


@pytest.mark.parametrize("case", BAD_FILES, ids=list(BAD_FILES))
def test_a_bad_workload_file_is_refused_in_one_line_naming_it(tmp_path, capsys, case):
    suffix, content, reason = BAD_FILES[case]
    if suffix == "yaml":
        pytest.importorskip("yaml")
    path = tmp_path / f"workload.{suffix}"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    assert main(["advise", "--workload", str(path), "--budget", "rho=0.5", "--time-limit", "10", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ektelo-ng advise: error: ") and err.count("\n") == 1, err
    assert "workload." in err and reason in err, err


def test_a_domain_of_more_cells_than_a_float_holds_is_advised(tmp_path, capsys):
    """200 attributes of 100 values: 10^400 cells; the full-vector strategies are skipped, saying how many."""
    path = tmp_path / "wide.json"
    path.write_text(json.dumps({"domain": {f"x{i}": 100 for i in range(200)}, "workload": [{"marginals": "kway:1"}]}))
    assert main(["advise", "--workload", str(path), "--budget", "rho=0.5", "--time-limit", "20", "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    assert advice["pick"].startswith("ResidualPlanner")
    assert any("e+400 cells" in row["reason"] for row in advice["rows"])


@pytest.mark.parametrize("option, value", [("--max-cells", "inf"), ("--max-cells", "nan"), ("--max-cells", "-5"),
                                           ("--seed", "-1")])
def test_bad_numbers_on_the_command_line_are_refused_by_name(capsys, option, value):
    assert main(["advise", "--workload", "prefix:8", f"{option}={value}", "--time-limit", "5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ektelo-ng advise: error: {option[2:].replace('-', '_')} must be") and err.count("\n") == 1


@pytest.mark.parametrize("kwargs", [{"restarts": 0}, {"max_cells": 1.5}, {"max_cells": -1}, {"seed": -1}])
def test_bad_whole_numbers_are_refused_by_the_api(kwargs):
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))} must be a whole number"):
        ek.advise([8], ek.workload.Prefix(8), ek.PureDP(1.0), time_limit=5, **kwargs)


# ---- the time limit -------------------------------------------------------------------------------------------
def test_a_workload_over_more_cells_than_max_cells_is_never_embedded_in_the_full_vector():
    """Embedding 36,051 marginals of 60 attributes over every cell took 4 s of the caller's time (outside the
    worker and its time limit), and the embedding was then sent to the worker with every job."""
    workload = QueryWorkload.of([3] * 60, [((a,), Identity(3)) for a in range(60)])
    plan = candidates(workload, ("laplace", "gaussian"), 10**8)
    assert "matrix" not in vars(workload)
    assert all("max_cells" in reason for c, reason in plan if c.family == "hdmm")


@pytest.mark.parametrize("workload", [
    "prefix:1000000000",
    "randomrange:64:1000000000",
    {"domain": {"a": 10**9}, "workload": [{"attributes": ["a"], "queries": {"a": "prefix"}}]},
    {"domain": {"a": 1000}, "workload": [{"attributes": ["a"], "queries": {"a": "circular"}}]},
    {"domain": {"a": 1000, "b": 1000}, "workload": [{"attributes": ["a", "b"], "queries": "affine"}]},
], ids=["prefix shorthand", "random ranges shorthand", "prefix on 1e9 values", "circular on 1000", "affine"])
def test_a_workload_too_large_to_write_down_is_refused_before_it_is_built(tmp_path, capsys, workload):
    """Built eagerly in the caller's process, these exhausted the memory (the process was killed) before any
    time limit applied."""
    if isinstance(workload, dict):
        path = tmp_path / "huge.json"
        path.write_text(json.dumps(workload))
        workload = str(path)
    assert main(["advise", "--workload", workload, "--budget", "rho=0.5", "--time-limit", "5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ektelo-ng advise: error: ") and "numbers (at most 100,000,000)" in err, err


# ---- the numbers ----------------------------------------------------------------------------------------------
def test_max_variance_is_of_the_queries_as_asked_for_every_family_under_weights():
    """A weight of 9 on one marginal: the full-vector rows reported 9 times its variances, ResidualPlanner and
    QuerySmasher the variances themselves; the max-variance ranking compared the two."""
    items = [((0,), Identity(4)), ((1,), Identity(3)), ((0, 1), Identity(12))]
    advice = ek.advise([4, 3], items, ek.ZCDP("0.5"), weights=[9.0, 1.0, 1.0], time_limit=20, noise="gaussian",
                       restarts=1)
    queries = np.vstack([np.kron(np.eye(4), np.ones((1, 3))), np.kron(np.ones((1, 4)), np.eye(3)), np.eye(12)])
    rows = {r.name: r for r in advice.ranked()}
    for row in rows.values():
        if hasattr(row.strategy, "matrix"):
            A = row.strategy.matrix.dense()
            sensitivity = np.sqrt((A**2).sum(axis=0)).max()
            variances = np.sum((queries @ np.linalg.pinv(A)) ** 2, axis=1) * sensitivity**2 / (2 * 0.5)
            assert row.max_variance == pytest.approx(variances.max(), rel=1e-6), row.name
    same = [rows["ResidualPlanner (sum loss), gaussian"], rows["HDMM OPT_0, gaussian"]]  # both at the SVD bound
    assert same[0].max_variance == pytest.approx(same[1].max_variance, rel=1e-3)


def test_hdmm_opt_plus_is_shown_as_the_upper_bound_it_is():
    """OPT_+'s error is that of answering each product from its own block, 20% above what the least squares over
    all its measurements delivers here: the row says it is a bound, not the error."""
    items = [((0,), Identity(4)), ((1,), Identity(3)), ((0, 1), Identity(12))]
    advice = ek.advise([4, 3], items, ek.ZCDP("0.5"), weights=[9.0, 1.0, 1.0], time_limit=20, noise="gaussian",
                       restarts=1)
    rows = {r.name: r for r in advice.ranked()}
    plus = rows["HDMM OPT_+, gaussian"]
    A, W = plus.strategy.matrix.dense(), advice.workload.matrix.dense()
    exact = np.sum((W @ np.linalg.pinv(A)) ** 2) * (A**2).sum(axis=0).max() / (2 * 0.5)
    assert plus.rmse > 1.1 * np.sqrt(exact / W.shape[0])
    assert plus.upper_bound and not any(r.upper_bound for r in rows.values() if r is not plus)
    assert "<=" + f"{plus.rmse:.4g}" in advice.table()
    assert next(r for r in advice.to_dict()["rows"] if r["name"] == plus.name)["rmse_upper_bound"]


def test_an_epsilon_delta_budget_on_the_command_line_states_its_conversion(capsys):
    assert main(["advise", "--workload", "prefix:8", "--budget", "epsilon=1,delta=1e-6", "--time-limit", "10",
                 "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    said = "(epsilon, delta) = (1, 1e-06) is read as rho = 0.02435"
    assert any(text.startswith(said) for text in advice["conversions"])


def test_on_one_attribute_the_hdmm_templates_not_run_say_why():
    """OPT_M read 'needs at most 26 attributes' and OPT_+ 'needs a union of 2 to 64 products' on a 1-D union."""
    advice = ek.advise([16], [((0,), ek.workload.Prefix(16)), ((0,), Identity(16))], ek.PureDP(1.0), time_limit=10)
    reasons = {r.name: r.reason for r in advice.skipped() if r.family == "hdmm"}
    assert set(reasons) == {"HDMM OPT_kron, laplace", "HDMM OPT_+, laplace", "HDMM OPT_M, laplace"}
    assert all("one attribute" in reason for reason in reasons.values()), reasons


@pytest.mark.parametrize("extra", [["--json", "--plot", "{tmp}/advice.png"], ["--out", "{tmp}/no/such/folder/a.json"],
                                   ["--plot", "{tmp}/no/such/folder/a.png"]], ids=["plot without matplotlib",
                                                                                   "out folder", "plot folder"])
def test_what_would_fail_after_the_advice_fails_before_it(tmp_path, capsys, monkeypatch, extra):
    if "--json" in extra:
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # not installed
    extra = [e.format(tmp=tmp_path) for e in extra]
    assert main(["advise", "--workload", "prefix:8", "--time-limit", "10", "--no-progress", *extra]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("ektelo-ng advise: error: ") and err.count("\n") == 1, err


def test_a_workload_that_does_not_fit_the_advice_is_refused_before_any_budget_is_spent(tmp_path, capsys,
                                                                                     saved_advice):
    path = tmp_path / "advice.json"
    path.write_text(json.dumps(saved_advice))
    session = ek.protect({"age": np.arange(100) % 16}, {"age": 16}, ek.PureDP("0.5"), seed=0)
    with pytest.raises(ValueError, match="32 columns.*16 cells"):
        catalog["Advised"](session.source, ek.workload.Prefix(32), ek.PureDP("0.5"), advice=path)
    assert session.budget.spent.value == 0


# ---- the API --------------------------------------------------------------------------------------------------
def test_array_workloads_are_taken_as_matrices():
    rows = np.tril(np.ones((4, 4)))
    whole = ek.advise([4], rows, ek.PureDP(1.0), time_limit=10)
    items = ek.advise([4], [((0,), rows.tolist())], ek.PureDP(1.0), time_limit=10)
    assert whole.pick.rmse == pytest.approx(items.pick.rmse, rel=1e-6)


@pytest.mark.parametrize("workload, budget, message", [
    ([(0,)], ek.PureDP(1), "each workload item is an \\(attributes, matrix\\) pair"),
    ([((0,), "prefix")], ek.PureDP(1), "need 4 columns"),
    (None, (1, 1e-6, 3), "is not a budget: .*ek.ApproxDP\\(epsilon, delta\\)"),
    (None, (1, 1e-6), "a bare pair: write ek.ApproxDP\\(1, 1e-06\\)"),
], ids=["item not a pair", "item matrix a word", "budget triple", "budget pair"])
def test_bad_api_arguments_are_refused_by_what_they_should_be(workload, budget, message):
    with pytest.raises(ValueError, match=message):
        ek.advise([4], workload if workload is not None else ek.workload.Prefix(4), budget, time_limit=5)


def test_rows_tied_in_error_and_cost_rank_in_a_fixed_order_not_by_the_clock():
    """ResidualPlanner and QuerySmasher tie at the SVD bound with the same cost; the selection seconds (0.8 ms
    against 3 ms, noise on a loaded machine) decided the pick, so one call could pick either."""
    cost = Cost(cells=12, requests=2, answers=20, memory_bytes=1040, full_vector=False)
    first = Row("ResidualPlanner (sum loss), gaussian", "residual-planner", "gaussian", "ok", rmse=1.79,
                max_variance=1.0, seconds=0.5, cost=cost)
    second = Row("QuerySmasher (exact), gaussian", "query-smasher", "gaussian", "ok", rmse=1.79 * (1 + 1e-9),
                 max_variance=1.0, seconds=0.001, cost=cost)
    assert _ranked([first, second], "rmse") == [first, second]


def test_without_a_domain_run_leaves_the_rebuild_to_the_plan_which_knows_the_tables(tmp_path, saved_advice,
                                                                                     monkeypatch):
    """With --connect the table's domain is known only from the connection: a huge advice was rebuilt before it
    (7 TiB for 10^12 cells), where the Advised plan refuses it for the table's domain before rebuilding."""
    document = copy.deepcopy(saved_advice)
    TAMPERED["another domain, huge"](document)
    path = tmp_path / "advice.json"
    path.write_text(json.dumps(document))
    rebuilt = []
    monkeypatch.setattr("ektelo_ng.operators.advice.load", lambda *a: rebuilt.append(a))
    run_command.load_plan(path, None)
    assert rebuilt == []


@pytest.mark.parametrize("workload", [np.zeros((0, 4)), [((0,), np.zeros((0, 4)))]], ids=["matrix", "item"])
def test_a_workload_of_no_rows_is_refused_by_name(workload):
    with pytest.raises(ValueError, match="no queries"):
        ek.advise([4], workload, ek.PureDP(1.0), time_limit=5)


def test_a_shape_without_a_record_count_is_refused_rather_than_ignored(capsys):
    assert main(["advise", "--workload", "prefix:64", "--shape", "skewed", "--time-limit", "5", "--no-progress"]) == 2
    assert "with records (the public number of records)" in capsys.readouterr().err


def test_a_shape_the_replay_has_no_dataset_of_gives_advice_without_evidence():
    """No 2-D dataset of the replay is smooth: the whole advice failed, after running every selector."""
    advice = ek.advise([16, 16], ek.workload.RandomRange((16, 16), 20, seed=0), ek.PureDP(1.0), records=1000, shape="smooth",
                       time_limit=5)
    assert advice.pick is not None and not [r for r in advice.rows if r.status == "evidence"]
    assert any("no 2-D dataset of shape 'smooth'" in note for note in advice.notes)


def test_an_unknown_shape_is_refused_before_any_selector_runs(monkeypatch):
    advise_module = importlib.import_module("ektelo_ng.operators.advice.advise")
    monkeypatch.setattr(advise_module, "Worker", None)  # no selector may run
    with pytest.raises(ValueError, match="unknown shape label 'weird'"):
        ek.advise([64], ek.workload.Prefix(64), ek.PureDP(1.0), records=100, shape="weird", time_limit=5)


def test_hdmm_s_templates_are_looked_up_once_per_advice(monkeypatch):
    """default_optimizers unfolds the whole workload: called per template and noise, 8 times, it took 5.6 s of
    the caller's time on 100,000 items."""
    calls = []
    original = candidates_module.default_optimizers
    monkeypatch.setattr(candidates_module, "default_optimizers", lambda W: calls.append(W) or original(W))
    workload = QueryWorkload.of([4, 4], ek.workload.AllKway([4, 4], 1))
    candidates_module.candidates(workload, ("laplace", "gaussian"), 10**8)
    assert len(calls) == 1
