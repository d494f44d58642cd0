"""``advise`` at an (epsilon, delta) budget predicts what the picked plan delivers through the kernel at that budget:
one conversion rule for the advice, the plan and the kernel."""

from __future__ import annotations

import numpy as np

import ektelo_ng as ek
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.privacy import zcdp_for_approx_dp

SIZES = {"a": 6, "b": 5, "c": 4, "d": 3, "e": 3}  # 1,080 cells: above OPT_0's 1,024, so the advice is quick
RUNS = 200


def test_the_advised_rmse_at_approx_dp_is_what_the_advised_plan_delivers(tmp_path):
    budget = ek.ApproxDP(1.0, 1e-6)
    W = wl.AllKway(list(SIZES.values()), 2)
    advice = ek.advise(list(SIZES.values()), W, budget, time_limit=60, restarts=1)
    assert advice.pick.noise == "gaussian"
    path = tmp_path / "advice.json"
    advice.save(path)
    rng = np.random.default_rng(0)
    columns = {name: rng.integers(0, size, 2000) for name, size in SIZES.items()}
    cells = np.ravel_multi_index([columns[name] for name in SIZES], list(SIZES.values()))
    truth = W @ np.bincount(cells, minlength=W.shape[1]).astype(float)
    errors = []
    for seed in range(RUNS):
        session = ek.protect(columns, SIZES, budget, seed=seed)
        estimate = ek.catalog["Advised"](session.source, None, budget, advice=path)
        errors.append(np.mean((estimate.answer(W) - truth) ** 2))
        assert session.budget.spent == session.budget.total == budget.zcdp()
    mean, standard_error = np.mean(errors), np.std(errors, ddof=1) / np.sqrt(RUNS)
    predicted = advice.pick.rmse**2
    assert abs(mean - predicted) < 4 * standard_error, (mean, predicted, standard_error)
    # power: the other dialect (the exact-Gaussian pcost, 0.0560 at (1, 1e-6) against 0.0487) is rejected
    other = predicted * 2 * float(zcdp_for_approx_dp(1.0, 1e-6).rho) / 0.05603
    assert abs(mean - other) > 4 * standard_error, (mean, other, standard_error)
