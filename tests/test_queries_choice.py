"""strategy="auto" without wall-clock luck: marginal batches chosen without the advisor, a structured fallback when
the advisor ranks nothing in time, and error bars for a few measured rows over many cells without an iterative
solve per answer."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from ektelo_ng.operators import advice, covariance
from ektelo_ng.operators.covariance import LeastSquaresCovariance
from ektelo_ng.operators.matrix import Dense, Kronecker, VStack
from ektelo_ng.operators.measurement import Measurement

import ektelo_ng as ek

pd = pytest.importorskip("pandas")

SCHEMA = ek.Schema(sex=["F", "M"], region=["N", "S", "E", "W"], age=ek.Integer(0, 99),
                   income=ek.Numeric(0, 100_000, bins=20))
HUGE_ZCDP, HUGE_PURE = ek.ZCDP(10**12), ek.PureDP(10**7)
MARGINALS = [ek.query().count(), ek.query().groupby("sex").count(), ek.query().groupby("region").count(),
             ek.query().groupby("sex", "region").count(), ek.query().groupby("age", "region").count()]
MIXED = [ek.query().groupby("sex").count(), ek.query().groupby("region").mean("age"),
         ek.query().where(ek.attr("age") >= 30).groupby("sex").sum("income")]


def people(rows: int = 2000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"sex": rng.choice(["F", "M"], rows), "region": rng.choice(["N", "S", "E", "W"], rows),
                         "age": rng.integers(0, 100, rows), "income": rng.uniform(0, 100_000, rows)})


@pytest.fixture
def no_advisor(monkeypatch):
    """The advisor must not be asked (a call fails the test)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the advisor was asked")
    monkeypatch.setattr(advice, "advise", refuse)


@pytest.fixture
def advisor_out_of_time(monkeypatch):
    """The advisor ranks nothing (its deadline passed); counts its calls."""
    calls = []

    def nothing(*args, **kwargs):
        calls.append(kwargs.get("time_limit"))
        return SimpleNamespace(pick=None)
    monkeypatch.setattr(advice, "advise", nothing)
    return calls


def exact_counts(frame: pd.DataFrame) -> dict:
    return {"count": [len(frame)], "count by sex": frame.groupby("sex").size().reindex(["F", "M"]).tolist(),
            "count by region": frame.groupby("region").size().reindex(list("NSEW")).tolist(),
            "count by sex, region": [int(((frame.sex == s) & (frame.region == r)).sum()) for s in "FM" for r in "NSEW"],
            "count by age, region": [int(((frame.age == a) & (frame.region == r)).sum()) for a in range(100)
                                     for r in "NSEW"]}


@pytest.mark.parametrize("budget, strategy", [(HUGE_ZCDP, "ResidualPlanner (sum loss), gaussian"),
                                              (HUGE_PURE, "HDMM OPT_M, laplace")])
def test_a_batch_of_marginals_is_chosen_without_the_advisor_and_answered_exactly(no_advisor, budget, strategy):
    frame = people()
    results = ek.answer(frame, MARGINALS, budget, schema=SCHEMA, seed=1)
    assert results.strategy == strategy
    assert "every query is a count by groups (a marginal)" in results.note
    for name, truth in exact_counts(frame).items():
        assert results[name].answer.tolist() == pytest.approx(truth, rel=1e-6, abs=1e-2), name


def test_marginals_on_a_domain_no_larger_than_the_queries_measure_the_cells_under_pure_dp(no_advisor):
    batch = [ek.query().groupby("sex").count(), ek.query().groupby("sex", "region").count(), ek.query().count()]
    results = ek.answer(people(200), batch, ek.PureDP(1), schema=SCHEMA, seed=0)  # 8 cells, 11 queries
    assert results.strategy == "Identity, laplace" and "8 cells, no more than the 11 queries" in results.note


@pytest.mark.parametrize("budget, strategy", [(HUGE_ZCDP, "QuerySmasher (exact), gaussian"),
                                              (HUGE_PURE, "HDMM OPT_kron, laplace")])
def test_when_the_advisor_ranks_nothing_a_big_domain_gets_a_structured_strategy(advisor_out_of_time, budget,
                                                                                strategy):
    frame = people()
    results = ek.answer(frame, MIXED, budget, schema=SCHEMA, seed=2, time_limit=3)
    assert advisor_out_of_time == [3]
    assert results.strategy == strategy and not results.strategy.startswith("Identity")
    assert "the advisor ranked no strategy within 3 s" in results.note
    assert results["count by sex"].answer.tolist() == pytest.approx(
        frame.groupby("sex").size().reindex(["F", "M"]).tolist(), rel=1e-6, abs=1e-2)
    means = [frame[frame.region == r].age.mean() for r in "NSEW"]
    assert results["mean(age) by region"].answer.tolist() == pytest.approx(means, rel=1e-6)


@pytest.mark.parametrize("budget", [ek.ZCDP("1/10"), ek.PureDP(1)])
def test_auto_totals_equal_the_sums_of_their_parts(no_advisor, budget):
    results = ek.answer(people(), MARGINALS, budget, schema=SCHEMA, seed=3)
    total = results["count"].answer[0]
    both = results["count by sex, region"].answer.to_numpy().reshape(2, 4)
    assert results["count by sex"].answer.sum() == pytest.approx(total, rel=1e-9)
    assert both.sum(axis=0) == pytest.approx(results["count by region"].answer.to_numpy(), rel=1e-9)
    assert results["count by age, region"].answer.to_numpy().reshape(100, 4).sum(axis=0) == pytest.approx(
        results["count by region"].answer.to_numpy(), rel=1e-9)
    assert abs(total - 2000) < 10 * results["count"]["std"][0]


def test_error_bars_for_few_rows_over_many_cells_take_no_iterative_solve(monkeypatch):
    """A stack of two Kronecker products (a union strategy, OPT_+'s form) of 50 rows over 4,900 cells: beyond the
    dense path, where each answer took one LSMR; now every coefficient from the rows' Gram, as dense least
    squares gives it, with no LSMR call."""
    rng = np.random.default_rng(0)
    A = VStack([Kronecker([Dense(rng.random((5, 70))), Dense(rng.random((6, 70)))]),
                Kronecker([Dense(rng.random((4, 70))), Dense(rng.random((5, 70)))])])
    weights = np.concatenate([np.full(30, 2.0), np.full(20, 0.5)])
    measured = Measurement(A, np.zeros(50), 1 / weights, "laplace")
    solves = []
    monkeypatch.setattr(covariance, "lsmr", lambda *a, **k: solves.append(1) or pytest.fail("an LSMR solve"))
    found = LeastSquaresCovariance([measured], 4900)
    assert found.method == "iterative"  # the path that used to solve per answer
    B = weights[:, None] * A.dense()
    inside = rng.standard_normal((3, 50)) @ B  # in the measured row space
    W = np.vstack([inside, rng.standard_normal((2, 4900))])
    coefficients = np.vstack(list(found.coefficients(Dense(W))))
    expected = np.linalg.lstsq(B.T, W.T, rcond=None)[0].T
    assert coefficients == pytest.approx(expected, rel=1e-6, abs=1e-9 * np.abs(expected).max())
    assert found.noise_variances(Dense(W)) == pytest.approx(np.sum(expected**2, axis=1), rel=1e-6)
    assert found.undetermined(Dense(W)).tolist() == [False, False, False, True, True]
    assert solves == []


def test_a_union_strategy_over_many_cells_reconstructs_without_lsmr(monkeypatch):
    """OPT_+'s strategy of 50 rows over 4,900 cells: the minimum-norm least squares (dense lstsq's), without an
    LSMR call (which ran up to 20 max(m, n) iterations at 1e-12)."""
    from ektelo_ng.operators import inference
    from ektelo_ng.operators.selection.hdmm.strategies import UnionStrategy

    rng = np.random.default_rng(1)
    blocks = [(2.0, Kronecker([Dense(rng.random((5, 70))), Dense(rng.random((6, 70)))])),
              (0.5, Kronecker([Dense(rng.random((4, 70))), Dense(rng.random((5, 70)))]))]
    strategy = UnionStrategy(blocks[0][1], blocks, "laplace", 1.0)
    from ektelo_ng.operators.selection.hdmm import strategies

    for module in (inference, strategies):  # strategies solved by its own LSMR before
        monkeypatch.setattr(module, "lsmr", lambda *a, **k: pytest.fail("an LSMR solve"), raising=False)
    y = rng.standard_normal(50)
    found = strategy.reconstruct([Measurement(strategy.matrix, y, 1.0, "laplace")]).x
    expected = np.linalg.lstsq(strategy.matrix.dense(), y, rcond=None)[0]
    assert found == pytest.approx(expected, rel=1e-6, abs=1e-9 * np.abs(expected).max())
