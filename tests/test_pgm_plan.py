"""ResidualPlanner+PGM end to end: measured through the kernel, fitted, answered and sampled."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.cli import main
from ektelo_ng.operators import pgm
from ektelo_ng.operators.selection.residual_planner import residual_planner

DOMAIN = {"a": 6, "b": 4, "c": 3}
WORKLOAD = [("a", "b"), ("b", "c")]


def skewed_table(seed: int, rows: int = 2000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.choice(6, rows, p=[0.55, 0.3, 0.1, 0.03, 0.01, 0.01])
    b = np.minimum(a // 2 + rng.integers(0, 2, rows), 3)
    c = (b + rng.integers(0, 2, rows)) % 3
    return {"a": a, "b": b, "c": c}


def true_marginal(columns, names):
    sizes = [DOMAIN[n] for n in names]
    out = np.zeros(sizes)
    np.add.at(out, tuple(columns[n] for n in names), 1)
    return out


def test_the_fitted_model_is_consistent_spends_the_budget_and_answers_unmeasured_marginals():
    columns = skewed_table(0)
    session = ek.protect(columns, DOMAIN, ek.ZCDP("0.05"), seed=0)
    model = ek.catalog["ResidualPlanner+PGM"](session.source, WORKLOAD, ek.ZCDP("0.05"))
    assert session.budget.spent.value == session.budget.total.value
    ab, bc, ac = model.marginal(("a", "b")), model.marginal(("b", "c")), model.marginal(("a", "c"))
    assert min(ab.min(), bc.min(), ac.min()) >= 0
    np.testing.assert_allclose(ab.sum(axis=0), bc.sum(axis=1), rtol=1e-6)  # b agrees in both
    np.testing.assert_allclose(ac.sum(axis=1), ab.sum(axis=1), rtol=1e-6)  # a agrees in the unmeasured one
    assert "graphical model" in model.note


def test_the_model_is_at_least_as_accurate_as_least_squares_on_measured_marginals():
    """Same measurements, five seeds: the fit's L1 error on (a, b) and (b, c) is at most least squares'."""
    fitted, least = [], []
    for seed in range(5):
        columns = skewed_table(seed)
        session = ek.protect(columns, DOMAIN, ek.ZCDP("0.02"), seed=seed)
        strategy = residual_planner(session.source.domain, WORKLOAD)
        measurements = strategy.measure(session.source, ek.ZCDP("0.02"))
        model = pgm.fit(DOMAIN, measurements)
        estimate = strategy.reconstruct(measurements)
        for names in WORKLOAD:
            truth = true_marginal(columns, names)
            fitted.append(np.abs(model.marginal(names) - truth).sum())
            least.append(np.abs(estimate.marginal(names) - truth).sum())
    assert np.mean(fitted) <= np.mean(least)


def test_hdmm_marginal_measurements_of_the_data_vector_fit_too():
    """HDMM's marginal strategy (OPT_M) measures the whole data vector with a stack of weighted marginals; the fit
    cuts it into one piece per marginal. Five seeds: its L1 error on the workload is at most least squares'."""
    from ektelo_ng.operators.matrices import MarginalStack
    from ektelo_ng.operators.selection.hdmm.select import opt_marginals

    sizes = list(DOMAIN.values())
    strategy = opt_marginals(MarginalStack(sizes, {(0, 1): 1.0, (1, 2): 1.0}), noise="gaussian")
    fitted, least = [], []
    for seed in range(5):
        columns = skewed_table(seed)
        session = ek.protect(columns, DOMAIN, ek.ZCDP("0.02"), seed=seed)
        measurements = strategy.measure(session.source, ek.ZCDP("0.02"))
        assert measurements[0].attributes is None  # a query of the data vector, not of a marginal
        model = pgm.fit(DOMAIN, measurements)
        vector = strategy.reconstruct(measurements).x.reshape(sizes)
        for names, summed in ((("a", "b"), 2), (("b", "c"), 0)):
            truth = true_marginal(columns, names)
            fitted.append(np.abs(model.marginal(names) - truth).sum())
            least.append(np.abs(vector.sum(axis=summed) - truth).sum())
    assert np.mean(fitted) <= np.mean(least)


def test_run_writes_synthetic_records_from_the_model(tmp_path, capsys):
    columns = skewed_table(1)
    table = tmp_path / "t.csv"
    table.write_text("a,b,c\n" + "\n".join(f"{x},{y},{z}" for x, y, z in zip(*columns.values())) + "\n")
    synthetic = tmp_path / "synthetic.csv"
    assert main(["run", "ResidualPlanner+PGM", "--table", str(table), "--domain", "a=6,b=4,c=3", "--budget",
                 "rho=1", "--workload", "kway:6x4x3:2", "--in-process", "--seed", "2", "--synthetic",
                 str(synthetic)]) == 0
    rows = np.loadtxt(synthetic, delimiter=",", skiprows=1, dtype=int)
    assert abs(len(rows) - 2000) < 100 and synthetic.read_text().startswith("a,b,c\n")
    assert rows[:, 0].max() < 6 and rows[:, 2].max() < 3
    out = capsys.readouterr().out
    assert "synthetic records" in out
    assert "intervals: unavailable: a fitted model has no error bars;" in out and "Gaussian" not in out


def test_a_model_claims_no_intervals():
    """A fit is post-processing with no known variance: its intervals are NaN and say why, not 'exact'."""
    session = ek.protect(skewed_table(0), DOMAIN, ek.ZCDP(1), seed=0)
    model = ek.catalog["ResidualPlanner+PGM"](session.source, WORKLOAD, ek.ZCDP(1))
    intervals = model.intervals([("a", "b")], level=0.9)
    assert intervals.method == "unavailable: a fitted model has no error bars"
    assert np.isnan(intervals.lower).all() and np.isnan(intervals.upper).all()
    np.testing.assert_allclose(intervals.answers, model.marginal(("a", "b")).ravel())


def test_a_plan_without_a_model_says_so(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("a\n1\n2\n")
    assert main(["run", "HB", "--table", str(table), "--domain", "a=4", "--budget", "epsilon=1", "--in-process",
                 "--synthetic", str(tmp_path / "s.csv")]) == 2
    captured = capsys.readouterr()
    assert "fits no model" in captured.err
    assert "budget: spent" not in captured.out  # refused before the plan spends anything


@pytest.mark.parametrize("plan", ["ResidualPlanner+PGM", "PrivBayes+PGM"])
def test_the_readme_model_commands_run_as_written(tmp_path, monkeypatch, capsys, plan):
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).parent.parent / "README.md").read_text()
    line = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if f"run {plan} " in b).strip()
    rng = np.random.default_rng(3)
    rows = zip(rng.integers(0, 100, 3000), rng.integers(0, 2, 3000), rng.integers(0, 5, 3000))
    (tmp_path / "people.csv").write_text("age,sex,region\n" + "\n".join(f"{a},{s},{r}" for a, s, r in rows) + "\n")
    monkeypatch.chdir(tmp_path)
    command = shlex.split(line)
    assert command[:3] == ["ektelo-ng", "run", plan]
    assert main(command[1:] + ["--in-process"]) == 0
    assert (tmp_path / "synthetic.csv").read_text().startswith("age,sex,region\n")
    if "--out" in command:  # the workload's marginals, one row a cell, from the one model
        rows = (tmp_path / command[command.index("--out") + 1]).read_text().splitlines()
        assert rows[0].startswith("query,answer") and rows[1].startswith('"age,sex[0, 0]",')
        assert len(rows) == 1 + 100 * 2 + 100 * 5 + 2 * 5


def test_a_marginal_plan_without_its_marginals_is_refused_before_measuring(tmp_path, capsys):
    columns = skewed_table(2, rows=50)
    table = tmp_path / "t.csv"
    table.write_text("a,b,c\n" + "\n".join(f"{x},{y},{z}" for x, y, z in zip(*columns.values())) + "\n")
    for plan in ("ResidualPlanner+PGM", "ResidualPlanner"):
        assert main(["run", plan, "--table", str(table), "--domain", "a=6,b=4,c=3", "--budget", "rho=1",
                     "--in-process"]) == 2
        assert "needs its marginals" in capsys.readouterr().err
    session = ek.protect(columns, DOMAIN, ek.ZCDP(1))
    with pytest.raises(ValueError, match="needs its marginals"):
        ek.catalog["ResidualPlanner+PGM"](session.source, ek.workload.Identity(72), ek.ZCDP(1))
    assert session.budget.spent.value == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"n_rows": 5.7}, "n_rows must be a whole number"), ({"n_rows": 10**13}, "n_rows must be a whole number"),
    ({"n_rows": -1}, "n_rows must be a whole number"), ({"n_rows": 3, "seed": 1.5}, "seed must be a whole number"),
])
def test_synthetic_refuses_bad_arguments_by_name(kwargs, message):
    columns = skewed_table(4, rows=200)
    session = ek.protect(columns, DOMAIN, ek.ZCDP(1), seed=0)
    model = ek.catalog["ResidualPlanner+PGM"](session.source, WORKLOAD, ek.ZCDP(1), iterations=50)
    with pytest.raises(ValueError, match=message):
        model.synthetic(**kwargs)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs the [plot] extra")
def test_run_plots_the_fit_against_iteration(tmp_path, capsys):
    columns = skewed_table(5, rows=300)
    table = tmp_path / "t.csv"
    table.write_text("a,b,c\n" + "\n".join(f"{x},{y},{z}" for x, y, z in zip(*columns.values())) + "\n")
    figure = tmp_path / "fit.png"
    assert main(["run", "ResidualPlanner+PGM", "--table", str(table), "--domain", "a=6,b=4,c=3", "--budget",
                 "rho=1", "--workload", "kway:6x4x3:2", "--in-process", "--plot", str(figure)]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["run", "HB", "--table", str(table), "--domain", "a=6,b=4,c=3", "--budget", "epsilon=1",
                 "--in-process", "--plot", str(figure)]) == 2
    assert "fits no model" in capsys.readouterr().err


def test_least_squares_is_the_default_loss_for_either_noise_and_l1_is_there_on_request():
    from ektelo_ng.operators.matrix import Identity

    columns = skewed_table(6, rows=300)
    for budget, measure in ((ek.PureDP(2), ek.measure.laplace), (ek.ZCDP(2), ek.measure.gaussian)):
        session = ek.protect(columns, DOMAIN, budget, seed=0)
        measured = [measure(session.source.vectorize(), Identity(72), 1)]  # the full vector of a small domain
        default = pgm.fit(DOMAIN, measured, iterations=30)
        assert default.history == pgm.fit(DOMAIN, measured, iterations=30, loss="l2").history
        assert default.history != pgm.fit(DOMAIN, measured, iterations=30, loss="l1").history


LABELLED = {"a": 6, "b": ["low", "mid", "high", "top"], "c": 3}


def test_synthetic_records_carry_the_domains_labels_and_make_a_data_frame(monkeypatch):
    columns = skewed_table(4)
    session = ek.protect(columns, LABELLED, ek.ZCDP(1), seed=0)
    model = ek.catalog["ResidualPlanner+PGM"](session.source, WORKLOAD, ek.ZCDP(1))
    codes = model.synthetic(500, seed=1)
    named = model.synthetic(500, seed=1, labels=True)
    assert codes["b"].dtype.kind == "i" and set(named["b"]) <= set(LABELLED["b"])
    np.testing.assert_array_equal(named["b"], np.asarray(LABELLED["b"])[codes["b"]])  # the same draw, labelled
    np.testing.assert_array_equal(named["a"], codes["a"])  # no labels: codes
    if importlib.util.find_spec("pandas"):
        frame = model.synthetic_frame(500, seed=1)
        assert list(frame.columns) == ["a", "b", "c"] and len(frame) == 500
        assert list(frame["b"]) == list(named["b"])
    monkeypatch.setitem(__import__("sys").modules, "pandas", None)  # as if pandas were not installed
    with pytest.raises(ImportError, match=r"needs pandas .*\[pandas\]"):
        model.synthetic_frame(10)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_run_writes_labelled_synthetic_records_that_read_back_as_a_table(tmp_path, capsys, suffix):
    """The records come out as the table went in: the same columns, labels where the domain has them; CSV or
    Parquet, and either reads back with the project's own table reader."""
    import json

    from ektelo_ng.session import read_columns

    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    columns = skewed_table(5)
    table = tmp_path / "t.csv"
    table.write_text("a,b,c\n" + "\n".join(f"{x},{LABELLED['b'][y]},{z}" for x, y, z in zip(*columns.values())) + "\n")
    (tmp_path / "domain.json").write_text(json.dumps(LABELLED))
    out = tmp_path / f"synthetic{suffix}"
    assert main(["run", "ResidualPlanner+PGM", "--table", str(table), "--domain", str(tmp_path / "domain.json"),
                 "--budget", "rho=1", "--workload", "kway:6x4x3:2", "--in-process", "--seed", "3", "--synthetic",
                 str(out)]) == 0
    records = read_columns(out, ek.Domain.from_dict(LABELLED))
    assert list(records) == ["a", "b", "c"] and abs(len(records["b"]) - 2000) < 100
    assert {str(v) for v in records["b"]} <= set(LABELLED["b"]) and len({str(v) for v in records["b"]}) > 1
    assert {int(v) for v in records["a"]} <= set(range(6))
    assert f"saved {out}" in capsys.readouterr().out


@pytest.mark.parametrize("name, says", [("s.xlsx", "write a table as .csv or .parquet"),
                                        ("missing/s.csv", "does not exist")])
def test_run_refuses_a_synthetic_path_it_could_not_write_before_spending(tmp_path, capsys, name, says):
    table = tmp_path / "t.csv"
    table.write_text("a,b,c\n1,2,0\n3,1,2\n")
    assert main(["run", "ResidualPlanner+PGM", "--table", str(table), "--domain", "a=6,b=4,c=3", "--budget",
                 "rho=1", "--workload", "kway:6x4x3:2", "--in-process", "--synthetic", str(tmp_path / name)]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and "budget: spent" not in captured.out


def test_parquet_without_pyarrow_is_refused_by_name(tmp_path, monkeypatch):
    from ektelo_ng.session import check_writable

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "pyarrow" else real(name, *rest))
    with pytest.raises(ImportError, match=r"needs pyarrow: pip install -e '\.\[parquet\]', or write \.csv"):
        check_writable(tmp_path / "s.parquet")
    check_writable(tmp_path / "s.csv")  # CSV needs nothing
