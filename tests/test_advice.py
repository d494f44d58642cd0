"""The advisor: budgets made comparable, workload forms, the worker's deadline, the ranking and pick against
closed forms and dense algebra, saved advice, and predicted against measured error through the kernel."""

import json
import math
import time
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ektelo_ng as ek
from ektelo_ng.operators.matrix import AllRange, Identity
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.advice import QueryWorkload, advise, load
from ektelo_ng.operators.advice.deadline import Worker
from ektelo_ng.operators.budget import for_noise
from ektelo_ng.operators.privacy import epsilon_within_zcdp
from ektelo_ng.operators.selection.query_smasher import query_class_workload
from ektelo_ng.plans import catalog


# ---- budgets ---------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.fractions(min_value=Fraction(1, 10**20), max_value=Fraction(10**20)))
def test_epsilon_within_zcdp_is_the_largest_fitting_epsilon(rho):
    eps = epsilon_within_zcdp(ek.ZCDP(rho).rho)
    rho = ek.ZCDP(rho).rho
    assert eps * eps / 2 <= rho
    assert (eps + Fraction(1, 10**15)) ** 2 / 2 > rho  # 15 decimals
    assert (eps * (1 + Fraction(1, 10**14))) ** 2 / 2 > rho  # and 15 significant digits, for the smallest budgets


def test_a_laplace_strategy_spends_exactly_within_a_zcdp_session():
    session = ek.protect({"a": np.array([0, 1, 1, 2])}, {"a": 3}, ek.ZCDP("0.3"), seed=1)
    spent = for_noise(ek.ZCDP("0.3"), "laplace")
    ek.measure.laplace(session.source.vectorize(), Identity(3), spent.epsilon)
    left = session.budget.total.value - session.budget.spent.value
    assert 0 <= left < Fraction(1, 10**14)


def test_gaussian_noise_under_pure_dp_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="cannot satisfy pure epsilon-DP"):
        for_noise(ek.PureDP(1), "gaussian")
    with pytest.raises(ValueError, match="cannot satisfy pure epsilon-DP"):
        advise([8], wl.Prefix(8), ek.PureDP(1), noise="gaussian", time_limit=5)


# ---- the workload in each selector's form ---------------------------------------------------------------
def test_items_and_the_full_matrix_are_the_same_queries():
    sizes = [4, 3, 2]
    W = wl.marginal_queries(sizes, [(0, 1), (2,)], {0: "prefix"})
    q = QueryWorkload.of(sizes, W)
    assert [i.attributes for i in q.items] == [(0, 1), (2,)]
    np.testing.assert_allclose(q.matrix.dense(), W.dense())
    again = QueryWorkload.from_dict(json.loads(json.dumps(q.to_dict())))
    np.testing.assert_allclose(again.matrix.dense(), W.dense())
    assert q.marginals is None and QueryWorkload.of(sizes, wl.AllKway(sizes, 2)).marginals is not None


def test_an_item_over_attributes_out_of_order_is_permuted_to_domain_order():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(3, 12))  # columns over (b, a): b of size 3 major, a of size 4
    q = QueryWorkload.of({"a": 4, "b": 3}, [(("b", "a"), rows)])
    x = rng.normal(size=(4, 3))  # the data over (a, b)
    np.testing.assert_allclose(q.items[0].matrix @ x.ravel(), rows @ x.T.ravel())


def test_weights_weigh_the_objective_but_not_the_answers():
    q = QueryWorkload.of([5], [((0,), wl.Prefix(5))], weights=[4.0])
    np.testing.assert_allclose(q.matrix.dense(), 2 * wl.Prefix(5).dense())
    np.testing.assert_allclose(q.answers.dense(), wl.Prefix(5).dense())


@pytest.mark.parametrize("items, message", [
    ([(("a", "a"), np.ones((1, 16)))], "attributes repeated"),
    ([(("a",), np.ones((1, 5)))], "need 4 columns"),
    ([], "no queries"),
])
def test_bad_items_are_refused_by_name(items, message):
    with pytest.raises(ValueError, match=message):
        QueryWorkload.of({"a": 4, "b": 3}, items)


# ---- the worker's deadline --------------------------------------------------------------------------------
def test_the_worker_stops_a_job_at_its_deadline_and_serves_the_next():
    with Worker() as worker:
        assert worker.start(60)  # the job's time counts from a ready worker
        start = time.perf_counter()
        stopped = worker.run(time.sleep, (30,), 1.0)
        assert stopped.status == "timeout" and "time limit" in stopped.reason
        assert time.perf_counter() - start < 3
        assert worker.run(sum, ([1, 2, 3],), 20).value == 6
        failed = worker.run(math.sqrt, (-1,), 20)
        assert failed.status == "error" and "math domain error" in failed.reason


def test_a_job_over_the_memory_limit_fails_alone():
    with Worker(memory_limit=2**31) as worker:
        outcome = worker.run(np.ones, ((2**30,),), 20)
        assert outcome.status == "error" and "memory limit of 2 GiB" in outcome.reason
        assert worker.run(sum, ([1],), 20).value == 1


# ---- ranking against closed forms and dense algebra ---------------------------------------------------
def test_every_row_is_its_strategys_exact_error_at_the_budget():
    W = AllRange(32)
    advice = advise([32], W, ek.ZCDP("0.125"), time_limit=60)
    eps = float(epsilon_within_zcdp(Fraction(1, 8)))
    ok = [r for r in advice.rows if r.status == "ok"]
    assert len(ok) >= 10
    for row in ok:
        if row.family == "query-smasher":  # not one matrix: its own error at pcost 1 (its tests check that)
            assert row.rmse == pytest.approx(row.strategy.rmse() / math.sqrt(2 * 0.125), rel=1e-9)
            continue
        A = row.strategy.matrix.dense()
        pinv = np.linalg.pinv(A)
        total = np.sum((W.dense() @ pinv) ** 2)
        if row.noise == "laplace":
            expected = 2 * np.abs(A).sum(axis=0).max() ** 2 * total / eps**2
        else:
            expected = np.sqrt((A**2).sum(axis=0)).max() ** 2 * total / (2 * 0.125)
        assert row.rmse == pytest.approx(math.sqrt(expected / W.shape[0]), rel=1e-6), row.name
        assert row.max_variance <= expected * 1.000001


def test_all_range_picks_hdmm_at_the_papers_error():
    """HDMM J Table 4, all-range 64 at epsilon 1: OPT_0 5.55 (HB 6.63, Identity 6.63), SVD bound 3.22."""
    advice = advise([64], AllRange(64), ek.PureDP(1), time_limit=60)
    assert advice.pick.family == "hdmm" and advice.pick.rmse <= 5.55 * 1.01
    by_name = {r.name: r for r in advice.rows}
    assert by_name["Identity, laplace"].rmse == pytest.approx(6.63, abs=0.01)
    assert by_name["HB, laplace"].rmse == pytest.approx(6.63, abs=0.01)
    assert advice.svd_bounds["laplace"] == pytest.approx(3.22, abs=0.01)
    assert {r.name for r in advice.skipped()} >= {"ResidualPlanner (sum loss), gaussian", "QuadTree, laplace"}
    assert "cannot give pure epsilon-DP" in by_name["QuerySmasher (exact), gaussian"].reason


def test_marginals_under_zcdp_pick_residual_planner_at_the_svd_bound():
    """Among strategies tied at the SVD bound, the one that needs no full data vector goes first."""
    sizes = [4, 3, 3, 2]
    advice = advise(sizes, wl.AllKway(sizes, 2), ek.ZCDP("0.5"), time_limit=60)
    assert advice.pick.name == "ResidualPlanner (sum loss), gaussian"
    assert advice.pick.rmse == pytest.approx(advice.svd_bounds["gaussian"], rel=1e-6)
    assert not advice.pick.cost.full_vector
    ranked = advice.ranked()
    assert all(a.rmse <= b.rmse * (1 + 1e-6) for a, b in zip(ranked, ranked[1:]) if b.status == "ok")


def test_max_variance_objective_picks_the_max_loss_plan():
    sizes = [2, 8, 8]
    W = wl.Marginals(sizes, [(0,), (1, 2)])
    advice = advise(sizes, W, ek.ZCDP("0.5"), objective="max_variance", time_limit=60, noise="gaussian")
    assert advice.pick.name == "ResidualPlanner (max loss), gaussian"
    by_name = {r.name: r for r in advice.rows}
    assert advice.pick.max_variance < by_name["ResidualPlanner (sum loss), gaussian"].max_variance


def test_queries_on_marginals_pick_query_smasher_and_hdmm_says_why_not():
    sizes = [5, 5, 5]
    queries = query_class_workload(sizes, "range", ways=(1,)) + query_class_workload(sizes, "affine", ways=(2,))
    advice = advise(sizes, queries, ek.ZCDP("0.5"), time_limit=60)
    assert advice.pick.name == "QuerySmasher (exact), gaussian"
    assert {r.name: r for r in advice.rows}["QuerySmasher (wff), gaussian"].rmse >= advice.pick.rmse * (1 - 1e-6)
    assert "products of per-attribute queries" in {r.name: r for r in advice.rows}["HDMM OPT_kron, laplace"].reason


def test_the_time_limit_holds_and_the_stopped_selectors_are_named():
    start = time.perf_counter()
    advice = advise([1024], wl.Prefix(1024), ek.ZCDP("0.5"), time_limit=6)  # HDMM's Gaussian OPT_0 takes ~50 s
    assert time.perf_counter() - start < 6 + 4  # the worker's start-up, and one restart after a kill
    stopped = [r.name for r in advice.skipped() if "time limit" in r.reason or "no time left" in r.reason]
    assert "HDMM OPT_0, gaussian" in stopped and advice.pick is not None


def test_max_cells_keeps_full_vector_strategies_out_and_says_so():
    sizes = [10, 10, 10]
    advice = advise(sizes, wl.AllKway(sizes, 1), ek.ZCDP("0.5"), max_cells=100, time_limit=30)
    assert all(not r.cost.full_vector for r in advice.ranked())
    assert any("max_cells = 100" in r.reason for r in advice.skipped())


@pytest.mark.parametrize("kwargs, message", [
    ({"time_limit": 0}, "time_limit"), ({"objective": "mae"}, "objective"), ({"records": -5}, "records"),
    ({"noise": "cauchy"}, "noise"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        advise([8], wl.Prefix(8), ek.PureDP(1), **kwargs)


def test_evidence_rows_price_data_dependent_plans_against_identity():
    advice = advise([64], wl.Prefix(64), ek.PureDP("0.1"), records=1000, time_limit=60)
    identity = next(r for r in advice.rows if r.name == "Identity, laplace")
    evidence = [r for r in advice.rows if r.status == "evidence"]
    assert evidence and any("DPBench replay" in note for note in advice.notes)
    for row in evidence:
        assert row.rmse == pytest.approx(identity.rmse * row.evidence.typical)
    best = next(r for r in advice.ranked() if r.status == "ok")
    beats = [r for r in evidence if identity.rmse * r.evidence.high < best.rmse]
    assert advice.pick is (beats[0] if beats else best)


# ---- saved advice ---------------------------------------------------------------------------------------------
def test_saved_advice_rebuilds_the_same_strategy(tmp_path):
    advice = advise([32], wl.Prefix(32), ek.PureDP(1), time_limit=60)
    path = tmp_path / "advice.json"
    advice.save(path)
    saved = load(path)
    assert saved.name == advice.pick.name and saved.rmse == advice.pick.rmse
    assert saved.strategy.expected_error() == pytest.approx(advice.strategy.expected_error(), rel=1e-9)


def test_a_saved_advice_that_no_longer_rebuilds_is_refused(tmp_path):
    advice = advise([32], wl.Prefix(32), ek.PureDP(1), time_limit=60)
    path = tmp_path / "advice.json"
    advice.save(path)
    document = json.loads(path.read_text())
    document["pick"]["unit_error"] *= 1.01
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="advise again"):
        load(path)
    path.write_text('{"rows": []}')
    with pytest.raises(ValueError, match="not a saved advice"):
        load(path)


# ---- predicted error = measured error, through the kernel ----------------------------------------------
def _measured_mse(advice, tmp_path, columns, domain, budget, trials):
    path = tmp_path / "advice.json"
    advice.save(path)
    x = np.zeros(advice.workload.domain.sizes)
    np.add.at(x, tuple(columns[name] for name in domain), 1)
    truth = advice.workload.answers @ x.ravel()
    errors = []
    for trial in range(trials):
        session = ek.protect(columns, domain, budget, seed=trial)
        estimate = catalog["Advised"](session.source, None, budget, advice=path)
        answers = estimate.answer(advice.workload.answers) if hasattr(estimate, "workload") else estimate.answer()
        errors.append(np.mean((np.asarray(answers) - truth) ** 2))
    return np.mean(errors), np.std(errors, ddof=1) / np.sqrt(trials)


@pytest.mark.parametrize("sizes, workload, budget", [
    ([32], AllRange(32), ek.PureDP(1)),
    ([6, 5, 4], wl.AllKway([6, 5, 4], 2), ek.ZCDP("0.5")),
])
def test_predicted_rmse_is_what_the_kernel_delivers(tmp_path, sizes, workload, budget):
    """Empirical MSE over 100 runs within 4 standard errors of the prediction, and not of 1.5x it."""
    rng = np.random.default_rng(7)
    domain = {f"a{i}": n for i, n in enumerate(sizes)}
    columns = {name: rng.integers(0, n, 400) for name, n in domain.items()}
    advice = advise(sizes, workload, budget, time_limit=60)
    empirical, se = _measured_mse(advice, tmp_path, columns, domain, budget, 100)
    predicted = advice.pick.rmse**2
    assert abs(empirical - predicted) < 4 * se
    assert abs(empirical - 1.5 * predicted) > 4 * se


def test_a_data_dependent_pick_runs_its_plan_through_the_kernel(tmp_path):
    """2-D ranges at N x epsilon = 100: AGrid+ beats every data-independent strategy on every replayed dataset."""
    W = wl.RandomRange((32, 32), 50, seed=0)
    advice = advise([32, 32], W, ek.PureDP("0.1"), records=1000, time_limit=5)
    assert advice.pick.status == "evidence" and advice.strategy is None
    path = tmp_path / "advice.json"
    advice.save(path)
    rng = np.random.default_rng(0)
    columns = {"a0": rng.integers(0, 8, 1000), "a1": rng.integers(0, 32, 1000)}
    session = ek.protect(columns, {"a0": 32, "a1": 32}, ek.PureDP("0.1"), seed=0)
    estimate = catalog["Advised"](session.source, None, ek.PureDP("0.1"), advice=path)
    assert estimate.answer(advice.workload.answers).shape == (50,)
    assert session.budget.spent.value == Fraction(1, 10)
