"""One budget currency over the whole catalog: every plan takes every budget kind its noise can serve, refuses
the others (and a bare number) by saying what to write, and spends nothing when it refuses."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.operators import workload as wl
from ektelo_ng.plans import catalog, info

#: Plans that measure only with Gaussian noise: no pure-DP budget can serve them.
GAUSSIAN_ONLY = {"ResidualPlanner", "QuerySmasher", "ResidualPlanner+PGM", "MST", "AIM"}
BUDGETS = {"pure": ek.PureDP("1/2"), "zcdp": ek.ZCDP("1/8"), "approx": ek.ApproxDP(1.0, 1e-6)}


@pytest.fixture(scope="module")
def advice_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("advice") / "advice.json"
    ek.advise([32], wl.Prefix(32), ek.PureDP(1), time_limit=30).save(path)  # a Laplace pick
    return path


def setting(name: str, advice_file) -> tuple[dict, dict, object, dict]:
    """(columns, domain, workload, params) a small table each plan can run on."""
    rng = np.random.default_rng(0)
    dimensions = info[name].dimensions if name in info else (1,)
    if name in GAUSSIAN_ONLY or name.startswith("PrivBayes"):
        sizes = {"a": 4, "b": 3, "c": 2}
        workload = {"QuerySmasher": [((0, 1), np.eye(12))]}.get(name, [(0, 1), (1, 2)])
        workload = None if name.startswith("PrivBayes") else workload
    elif 1 in dimensions or name == "Advised":
        sizes, workload = {"a": 32}, wl.Prefix(32)
    else:
        sizes, workload = {"a": 8, "b": 8}, wl.RandomRange((8, 8), 10, seed=0)
    columns = {n: rng.integers(0, k, 300) for n, k in sizes.items()}
    params = {"advice": advice_file} if name == "Advised" else {}
    if name in ("ResidualPlanner+PGM", "MST", "AIM"):
        params["iterations"] = 50
    if name == "AIM":
        params["rounds_per_attribute"] = 2
    return columns, sizes, workload, params


@pytest.mark.parametrize("name", sorted(catalog))
def test_every_plan_refuses_a_bare_number_before_spending(name, advice_file):
    columns, sizes, workload, params = setting(name, advice_file)
    session = ek.protect(columns, sizes, ek.ZCDP(1), seed=0)
    for bare in (1, 0.5, Fraction(1, 2), (1.0, 1e-6)):
        with pytest.raises(ValueError, match="not a budget|bare pair"):
            catalog[name](session.source, workload, bare, **params)
    assert session.budget.spent.value == 0


@pytest.mark.parametrize("kind", sorted(BUDGETS))
@pytest.mark.parametrize("name", sorted(catalog))
def test_every_plan_takes_every_budget_kind_its_noise_serves(name, kind, advice_file):
    columns, sizes, workload, params = setting(name, advice_file)
    budget = BUDGETS[kind]
    session = ek.protect(columns, sizes, budget, seed=0)
    total = session.budget.total.value
    if kind == "pure" and name in GAUSSIAN_ONLY:
        with pytest.raises(ValueError, match="cannot satisfy pure epsilon-DP: give ek.ZCDP"):
            catalog[name](session.source, workload, budget, **params)
        assert session.budget.spent.value == 0
        return
    estimate = catalog[name](session.source, workload, budget, **params)
    assert np.all(np.isfinite(estimate.answer()))
    assert 0 < session.budget.spent.value <= total
