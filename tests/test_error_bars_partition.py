"""Error bars that never lie: undetermined answers withheld, data-dependent plans' intervals bound the bias of what
they chose, and variances right at any size (the groups path against dense algebra, and Monte Carlo beyond)."""

from __future__ import annotations

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.operators import covariance
from ektelo_ng.operators.estimate import VectorEstimate
from ektelo_ng.operators.inference import least_squares
from ektelo_ng.operators.matrix import Identity, Sparse, Total
from ektelo_ng.operators.measurement import Measurement
from ektelo_ng.operators import workload as wl
from ektelo_ng.plans import catalog


def skewed(n: int, records: int = 20_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.pareto(1.0, n) * (rng.random(n) < 0.3) + 1e-3
    return rng.choice(n, size=records, p=p / p.sum())


def partition_matrix(groups: np.ndarray) -> Sparse:
    """One row per group: its total."""
    count = int(groups.max()) + 1
    import scipy.sparse

    return Sparse(scipy.sparse.csr_array((np.ones(groups.size), (groups, np.arange(groups.size))),
                                         shape=(count, groups.size)))


def test_uniform_withholds_every_answer_the_total_does_not_determine():
    values = skewed(64)
    session = ek.protect({"a": values}, {"a": 64}, ek.PureDP(1), seed=0)
    estimate = catalog["Uniform"](session.source, wl.Prefix(64), ek.PureDP(1))
    found = estimate.intervals(wl.Prefix(64), 0.95)
    assert np.isnan(found.lower[:-1]).all() and np.isfinite(found.lower[-1])  # the last prefix is the total
    assert "63 of 64 withheld: not determined by the measurements" in found.method
    assert np.isinf(estimate.variances(wl.Prefix(64))[:-1]).all()
    noise = estimate.intervals(wl.Prefix(64), 0.95, method="noise")
    assert np.isfinite(noise.lower).all() and noise.method.startswith("noise only:")


@pytest.mark.parametrize("name", ["DAWA", "PHP", "AHP", "DPCube"])
def test_the_groups_path_equals_dense_algebra(name, monkeypatch):
    values = skewed(256)
    session = ek.protect({"a": values}, {"a": 256}, ek.PureDP(1), seed=1)
    estimate = catalog[name](session.source, wl.Prefix(256), ek.PureDP(1))
    W = wl.RandomRange((256,), 50, seed=0)
    grouped = covariance.LeastSquaresCovariance(estimate.measurements, 256)
    monkeypatch.setattr(covariance, "DENSE_LIMIT", 0)  # no groups path: the same measurements by dense algebra
    monkeypatch.setattr(covariance, "FACTOR_LIMIT", 0)
    dense = covariance.LeastSquaresCovariance(estimate.measurements, 256)
    assert dense.method == "dense" or (dense.size > 0 and dense.method == "iterative")
    monkeypatch.setattr(covariance, "DENSE_LIMIT", 4096)
    assert dense.method == "dense"
    assert grouped.method == "groups" and grouped.rank == dense.rank
    np.testing.assert_allclose(grouped.noise_variances(W), dense.noise_variances(W), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(grouped.undetermined(W), dense.undetermined(W))
    for a, b in zip(grouped.coefficients(W), dense.coefficients(W)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8)


def test_variances_beyond_the_dense_limit_match_monte_carlo():
    """8,192 cells in 40 groups measured twice (Laplace on the totals, Gaussian on pairs of groups): the groups
    path's variances of range queries against 2,000 simulated least-squares estimates."""
    n, rng = 8192, np.random.default_rng(3)
    groups = np.sort(rng.integers(0, 40, n))
    totals = partition_matrix(groups)
    pairs = partition_matrix(groups // 2)
    x = rng.poisson(3.0, n).astype(float)
    W = wl.RandomRange((n,), 30, seed=1)
    runs = []
    for _ in range(2000):
        measured = [Measurement(totals, totals @ x + rng.laplace(0, 2.0, totals.shape[0]), np.sqrt(8.0), "laplace"),
                    Measurement(pairs, pairs @ x + rng.normal(0, 3.0, pairs.shape[0]), 3.0, "gaussian")]
        runs.append(W @ least_squares(measured, size=n))
    estimate = VectorEstimate(least_squares(measured, size=n), measured)
    assert estimate._covariance.method == "groups"
    predicted = estimate._covariance.noise_variances(W)
    empirical = np.var(np.array(runs), axis=0, ddof=1)
    # a variance estimate from 2,000 runs has relative sd about sqrt(2 / 2000) (more for Laplace's tails): 4.5%
    np.testing.assert_allclose(empirical, predicted, rtol=0.2)
    assert abs(np.mean(empirical / predicted) - 1) < 0.05


def test_a_solve_that_stops_short_withholds_rather_than_understates():
    """Beyond the dense limit with no groups (every cell measured) and a nearly exact total, the iterative path's
    residual shows it did not converge to the true variance; the answer is withheld, never reported too small."""
    n = 5000
    rng = np.random.default_rng(0)
    x = rng.poisson(5.0, n).astype(float)
    measured = [Measurement(Identity(n), x + rng.normal(0, 1000.0, n), 1000.0, "gaussian"),
                Measurement(Total(n), np.array([x.sum()]) + rng.normal(0, 1e-3, 1), 1e-3, "gaussian")]
    estimate = VectorEstimate(least_squares(measured, size=n), measured)
    W = Identity(n)[:3] if hasattr(Identity(n), "__getitem__") else wl.RangeQueries(n, [0, 1, 2], [0, 1, 2])
    variances = estimate.variances(W)
    truth = 1000.0**2 * (1 - 1 / n)  # a cell's variance given the total
    assert np.all((variances >= truth * (1 - 1e-6)) | np.isinf(variances)), variances
    found = estimate.intervals(W, 0.9)
    assert np.all(np.isnan(found.lower) | (found.upper - found.lower >= 2 * 1.64 * np.sqrt(truth) * (1 - 1e-6)))


def test_a_reused_choice_is_withheld_and_noise_only_says_what_it_leaves_out():
    values = skewed(64)
    session = ek.protect({"a": values}, {"a": 64}, ek.PureDP(1), seed=0)
    estimate = catalog["SF"](session.source, wl.Prefix(64), ek.PureDP(1))
    found = estimate.intervals(wl.Prefix(64), 0.95)
    assert np.isnan(found.lower).all() and "noisy counts that chose it are also in the estimate" in found.method
    noise = estimate.intervals(wl.Prefix(64), 0.95, method="noise")
    assert np.isfinite(noise.lower).all() and "excludes the bias of the buckets" in noise.method
