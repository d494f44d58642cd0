"""The ektelo CDF example run through ``ektelo-ng run``: spends its budget, and at large epsilon finds the true CDF."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from ektelo_ng.cli import main

ROWS = 3000


@pytest.fixture()
def people(tmp_path):
    rng = np.random.default_rng(0)
    sex = np.where(rng.random(ROWS) < 0.5, "F", "M")
    age = rng.integers(18, 80, ROWS)
    salary = np.minimum(rng.geometric(0.08, ROWS) - 1, 63)
    lines = ["sex,age,salary"] + [f"{s},{a},{v}" for s, a, v in zip(sex, age, salary)]
    (tmp_path / "people.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "people.json").write_text(json.dumps({"sex": ["F", "M"], "age": 100, "salary": 64}))
    chosen = (sex == "M") & (age >= 30) & (age <= 39)
    return tmp_path, np.cumsum(np.bincount(salary[chosen], minlength=64))


def run(folder, epsilon, out):
    return main(["run", "examples/cdf.py", "--table", str(folder / "people.csv"), "--domain",
                 str(folder / "people.json"), "--budget", f"epsilon={epsilon}", "--workload", "prefix:64",
                 "--seed", "3", "--out", str(out)])


@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_cdf_example_spends_its_budget(people, tmp_path):
    folder, _ = people
    assert run(folder, 1, tmp_path / "out.json") == 0
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["budget_spent"] == "1" and len(report["answers"]) == 64
    assert [d["op"] for d in report["lineage"]["derivations"]] == ["where", "project", "vectorize", "reduce_by_partition"]


@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_cdf_example_is_accurate_when_noise_is_small(people, tmp_path):
    folder, true_cdf = people
    assert run(folder, 1000, tmp_path / "out.csv") == 0
    with (tmp_path / "out.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    answers = np.array([float(row["answer"]) for row in rows])
    assert np.abs(answers - true_cdf).max() < 2.0
    assert {row["method"] for row in rows} == {"unavailable: non-negative least squares over an AHP partition: no error bars"}


def test_run_explains_missing_inputs(tmp_path, capsys):
    assert main(["run", "examples/cdf.py", "--budget", "epsilon=1"]) == 2
    assert "--table and --domain" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.py"), "--budget", "epsilon=1"]) == 2
