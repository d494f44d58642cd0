"""Gaussian OPT_0 through its dual (operators/selection/hdmm/gaussian.py): bounds, gradient, optimality, work."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from scipy.optimize import minimize

from ektelo_ng.operators.matrix import AllRange, Identity, Intervals
from ektelo_ng.operators.matrices import Prefix, WidthRange
from ektelo_ng.operators.selection.hdmm.gram import Gram
from ektelo_ng.operators.selection.hdmm.opt0 import factor_error

gaussian = importlib.import_module("ektelo_ng.operators.selection.hdmm.gaussian")  # the package name is also a function

GRAMS = {
    "allrange": Gram.of(AllRange(6)),
    "prefix": Gram.of(Prefix(6)),
    "width3": Gram.of(WidthRange(6, 3)),
    "mixed": Gram([(2.0, Prefix(6)), (0.5, Identity(6)), (np.arange(1.0, 5.0), Intervals(6, [0, 1, 2, 5], [3, 4, 2, 5]))]),
}


def dense(gram):
    return gram.dense()


def brute_optimum(gram, starts=4):
    """min tr[X^{-1} V] over unit-diagonal X = A^T A, A upper triangular: L-BFGS from several starts, tight."""
    n, V = gram.n, gram.dense()
    rows, cols = np.triu_indices(n)

    def loss(v):
        B = np.zeros((n, n))
        B[rows, cols] = v
        A = B / np.linalg.norm(B, axis=0)
        return np.trace(np.linalg.solve(A.T @ A, V))

    rng = np.random.default_rng(0)
    best = np.inf
    for _ in range(starts):
        start = (np.eye(n) + 0.3 * np.triu(rng.uniform(size=(n, n))))[rows, cols]
        best = min(best, minimize(loss, start, method="BFGS", options={"gtol": 1e-10, "maxiter": 5000}).fun)
    return best


@pytest.mark.parametrize("name", ["allrange", "prefix", "mixed"])
def test_every_lambda_brackets_the_optimum_with_a_feasible_strategy(name):
    gram = GRAMS[name]
    optimum = brute_optimum(gram)
    rng = np.random.default_rng(1)
    for _ in range(5):
        point = gaussian.DualPoint(dense(gram), gram, rng.normal(scale=2.0, size=gram.n))
        A = point.factor
        assert np.allclose(np.linalg.norm(A, axis=0), 1.0, atol=1e-12)  # feasible: unit columns
        assert point.error == pytest.approx(np.trace(np.linalg.solve(A.T @ A, gram.dense())), rel=1e-9)
        assert point.dual <= optimum * (1 + 1e-9) and optimum <= point.error * (1 + 1e-9)


@pytest.mark.parametrize("name", ["allrange", "prefix", "mixed"])
def test_dual_gradient_matches_finite_differences(name):
    """d g / d log(lambda_i) = lambda_i (X_ii - 1), and the step is 2 log X_ii (full-rank V: width3's has rank 4,
    and goes to the primal descent)."""
    gram = GRAMS[name]
    V = dense(gram)
    u = np.random.default_rng(2).normal(size=gram.n)
    point = gaussian.DualPoint(V, gram, u)
    gradient = np.exp(u) * (np.exp(point.step / 2) - 1)
    h = 1e-6
    for i in range(gram.n):
        e = np.zeros(gram.n)
        e[i] = h
        numeric = (gaussian.DualPoint(V, gram, u + e).dual - gaussian.DualPoint(V, gram, u - e).dual) / (2 * h)
        assert numeric == pytest.approx(gradient[i], rel=1e-5, abs=1e-7 * np.abs(gradient).max())


@pytest.mark.parametrize("name", GRAMS)
def test_factor_reaches_the_brute_force_optimum(name):
    gram = GRAMS[name]
    A = gaussian.gaussian_factor(gram, 100)
    optimum = brute_optimum(gram)
    error = factor_error(A, gram, "gaussian")
    # Full rank: the dual, at most the gap above. Singular (width3, rank 4): the primal descent, whose optimum is
    # approached only as X turns singular; it ends 0.1% above brute force from several starts.
    slack = 2 * gaussian.GAP if name != "width3" else 2e-3
    assert optimum * (1 - 1e-5) <= error <= optimum * (1 + slack)


@pytest.mark.parametrize("gram", [Gram.of(AllRange(48)), Gram.of(Prefix(48)), Gram([(1.0, WidthRange(48, 8)), (0.1, Identity(48))])],
                         ids=["allrange", "prefix", "width8+identity"])
def test_result_meets_the_optimality_conditions(gram):
    """At the optimum X^{-1} V X^{-1} is diagonal (the multipliers of diag(X) = 1). Full-rank V only: with a
    singular V the optimum is approached as X turns singular, where no such point exists."""
    A = gaussian.gaussian_factor(gram, 100).dense()
    X_inv = np.linalg.inv(A.T @ A)
    G = X_inv @ gram.dense() @ X_inv
    off = G - np.diag(np.diag(G))
    assert np.abs(off).max() <= 1e-3 * np.abs(np.diag(G)).max()
    # A wrong stationarity condition (multipliers on a non-optimal X) is far from diagonal: the test has power.
    start = gaussian.DualPoint(dense(gram), gram, np.zeros(gram.n)).factor
    X_inv = np.linalg.inv(start.T @ start)
    G = X_inv @ gram.dense() @ X_inv
    assert np.abs(G - np.diag(np.diag(G))).max() > 1e-2 * np.abs(np.diag(G)).max()


@pytest.mark.parametrize("workload, most", [(AllRange(256), 4), (Prefix(256), 14)], ids=["allrange", "prefix"])
def test_search_takes_few_eigendecompositions(workload, most, monkeypatch):
    """The work is counted, not timed: each dual point is one n x n eigendecomposition."""
    calls = []
    original = np.linalg.eigh
    monkeypatch.setattr(gaussian.np.linalg, "eigh", lambda M: calls.append(M.shape) or original(M))
    gaussian.gaussian_factor(Gram.of(workload), 100)
    assert 2 <= len(calls) <= most


def identity_error(gram):
    return factor_error(Identity(gram.n), gram, "gaussian")


@pytest.mark.parametrize("gram", [
    Gram.of(Intervals(8, [0, 1, 2], [3, 3, 5])),  # cells 6 and 7 are never asked
    Gram.of(Intervals(32, [4, 10, 3], [11, 21, 6])),
    Gram.of(Intervals(64, [50, 26, 35], [54, 40, 51])),
    Gram.of(Intervals(128, [59, 82, 39], [97, 123, 73])),
    Gram.of(WidthRange(128, 32)),  # rank 97
    Gram([(np.geomspace(1e-6, 1e6, 20), Intervals(64, list(range(0, 60, 3)), [min(63, i + 10) for i in range(0, 60, 3)])),
          (1e-3, Identity(64))]),  # full rank, but weights spanning 1e12
], ids=["untouched-8", "sparse-32", "sparse-64", "sparse-128", "width32-128", "row-weights"])
def test_singular_or_ill_conditioned_grams_take_the_primal_descent(gram, monkeypatch):
    """Found by review: the dual search crashed, returned infinite errors or stalled on these. They go to the primal
    descent: a full-rank strategy, a finite error, no worse than the identity; and no dual point is computed."""
    monkeypatch.setattr(gaussian, "DualPoint", lambda *args: pytest.fail("the dual ran on an ill-conditioned V"))
    A = gaussian.gaussian_factor(gram, 100)
    assert np.linalg.matrix_rank(A.dense()) == gram.n
    assert np.allclose(A.column_norms("l2"), 1.0)
    assert np.isfinite(factor_error(A, gram, "gaussian"))
    assert factor_error(A, gram, "gaussian") <= identity_error(gram)


def test_width_ranges_reach_the_primal_optimum_of_old():
    """WidthRange(128, 32) at the primal descent's 506.97 (the dual, stalled at its cap, had ended 0.05% above)."""
    gram = Gram.of(WidthRange(128, 32))
    assert factor_error(gaussian.gaussian_factor(gram, 100), gram, "gaussian") == pytest.approx(506.97, rel=1e-4)


def test_a_non_finite_dual_point_restarts_from_the_best(monkeypatch):
    """An Anderson step that leaves the finite numbers is replaced by the plain step from the best point."""
    gram = Gram.of(Prefix(64))
    calls = []
    original = gaussian.DualPoint

    def flaky(V, g, log_lambda):
        calls.append(1)
        point = original(V, g, log_lambda)
        if len(calls) == 3:  # the first mixed step
            point.finite, point.error = False, np.inf
        return point

    monkeypatch.setattr(gaussian, "DualPoint", flaky)
    A = gaussian.gaussian_factor(gram, 100)
    monkeypatch.setattr(gaussian, "DualPoint", original)
    assert factor_error(A, gram, "gaussian") == pytest.approx(factor_error(gaussian.gaussian_factor(gram, 100), gram,
                                                                           "gaussian"), rel=2 * gaussian.GAP)


def test_the_cap_stops_at_the_svd_bound_start():
    gram = Gram.of(Prefix(64))
    capped = factor_error(gaussian.gaussian_factor(gram, 1), gram, "gaussian")
    full = factor_error(gaussian.gaussian_factor(gram, 100), gram, "gaussian")
    start = gaussian.DualPoint(dense(gram), gram, np.zeros(64)).error
    assert capped == pytest.approx(start, rel=1e-9)
    assert full < capped * (1 - 1e-4)


@pytest.mark.parametrize("name", GRAMS)
def test_primal_loss_matches_dense_and_finite_differences(name):
    gram = GRAMS[name]
    rng = np.random.default_rng(5)
    B = np.triu(rng.normal(size=(6, 6))) + 3 * np.eye(6)
    loss, grad = gaussian.gaussian_loss(B, gram)
    A = B / np.linalg.norm(B, axis=0)
    assert loss == pytest.approx(np.trace(np.linalg.inv(A.T @ A) @ gram.dense()), rel=1e-10)
    h, numeric = 1e-6, np.zeros_like(B)
    for i, j in zip(*np.triu_indices(6)):
        e = np.zeros_like(B)
        e[i, j] = h
        numeric[i, j] = (gaussian.gaussian_loss(B + e, gram)[0] - gaussian.gaussian_loss(B - e, gram)[0]) / (2 * h)
    assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-6 * np.abs(grad).max())
