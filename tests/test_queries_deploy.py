"""The query layer through every door (issue 47): a served kernel (``ek.connect``, here a kernel process on a
private socket), ``ektelo-ng run`` with a plan script returning query Results or several estimates, and
``budget.split``."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.session import kernel_process
from tests.served import cli

pd = pytest.importorskip("pandas")

SCHEMA = ek.Schema(sex=["F", "M"], region=ek.Categorical(["N", "S"], other="elsewhere"), age=ek.Integer(0, 99))


def write_raw(folder) -> tuple:
    """A CSV of raw values (labels, ages outside the bounds) and the schema as a domain file."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"sex": rng.choice(["F", "M"], 400), "region": rng.choice(["N", "S", "E"], 400),
                          "age": rng.integers(-3, 105, 400)})
    frame.to_csv(folder / "people.csv", index=False)
    (folder / "schema.json").write_text(json.dumps(SCHEMA.to_dict()))
    return frame, folder / "people.csv", folder / "schema.json"


def test_a_served_kernel_answers_queries_in_labels(tmp_path):
    """The analyst's process holds no data: the served kernel loads the raw CSV by the schema, the analyst's
    session reads the schema back from the kernel's domain and answers in labels."""
    frame, table, schema_file = write_raw(tmp_path)
    with kernel_process(table, schema_file, ek.ZCDP(10**9), "--seed", "0") as session:
        assert ek.Schema.from_domain(session.source.domain).domain() == SCHEMA.domain()
        results = session.answer([ek.query().groupby("region").count(), ek.query().groupby("sex").median("age")],
                                 ek.ZCDP(10**9), strategy="query-smasher")
        spent = session.budget.spent
    counts = results["count by region"]
    assert counts.region.tolist() == ["N", "S", "elsewhere"]
    assert counts.answer.round().tolist() == [(frame.region == "N").sum(), (frame.region == "S").sum(),
                                              (frame.region == "E").sum()]
    assert spent == ek.ZCDP(10**9)
    medians = results["quantile(age) by sex"]
    for sex, answer in zip(medians.sex, medians.answer):
        ages = frame[frame.sex == sex].age.clip(0, 99)
        assert answer == np.quantile(ages, 0.5, method="inverted_cdf")


PLAN = '''
import ektelo_ng as ek

def plan(source, workload, budget):
    return ek.answer(source, [ek.query().groupby("sex").count(), ek.query().groupby("region").mean("age")],
                     budget, strategy="identity")
'''

STAGES = '''
import ektelo_ng as ek

def plan(source, workload, budget):
    first, second = budget.split(["1/2", "1/2"])
    cells = ek.workload.Identity(source.domain.size)
    return {"first": ek.catalog["Identity"](source, cells, first), "second": ek.catalog["HB"](source, cells, second)}
'''


def test_run_writes_a_table_per_query_from_a_plan_script(tmp_path):
    """In the plan's own process (the default): it holds handles only, and returns query Results."""
    _, table, schema_file = write_raw(tmp_path)
    (tmp_path / "plan.py").write_text(PLAN)
    done = cli("run", str(tmp_path / "plan.py"), "--table", str(table), "--domain", str(schema_file), "--budget",
               "rho=1", "--seed", "1", "--out", str(tmp_path / "out"))
    assert "count by sex:" in done.stdout and "mean(age) by region:" in done.stdout
    assert "budget: spent rho = 1 of 1" in done.stdout
    back = pd.read_csv(tmp_path / "out" / "mean_age__by_region.csv")
    assert back.region.tolist() == ["N", "S", "elsewhere"] and back.level.tolist() == [0.95] * 3


def test_run_reports_every_estimate_of_a_plan_in_stages(tmp_path):
    _, table, schema_file = write_raw(tmp_path)
    (tmp_path / "stages.py").write_text(STAGES)
    done = cli("run", str(tmp_path / "stages.py"), "--table", str(table), "--domain", str(schema_file), "--budget",
               "epsilon=1", "--seed", "1", "--out", str(tmp_path / "out.json"))
    assert "first: 600 answers" in done.stdout and "second: 600 answers" in done.stdout
    assert "budget: spent epsilon = 1 of 1" in done.stdout
    saved = json.loads((tmp_path / "out.json").read_text())
    assert sorted(saved["estimates"]) == ["first", "second"]


def test_a_budget_splits_exactly_and_never_beyond_itself():
    assert ek.PureDP(1).split(["1/3", "2/3"]) == [ek.PureDP("1/3"), ek.PureDP("2/3")]
    parts = ek.ZCDP("0.7").split([0.1] * 7)
    assert sum((p.value for p in parts), Fraction(0)) <= Fraction(7, 10)
    assert all(isinstance(p, ek.ZCDP) for p in ek.ApproxDP(1, 1e-6).split([0.5, 0.5]))
    for bad in ([0.5, 0.6], [], [0, 1], [-0.1, 0.5]):
        with pytest.raises(ValueError, match="shares must be positive and sum to at most 1|positive"):
            ek.PureDP(1).split(bad)
