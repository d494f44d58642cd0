"""Data-independent plans: each spends exactly its budget, and its empirical error matches the analytic one.

The error of a least-squares plan with strategy A is e = W A^+ z for the noise z, so the total
squared error is the quadratic form T = z^T K z, K = (W A^+)^T (W A^+). With independent
noise of variance v and fourth moment m4 (Laplace: v = 2b^2, m4 = 24 b^4),
E T = v tr K and Var T = (m4 - 3 v^2) sum_i K_ii^2 + 2 v^2 ||K||_F^2 (exact). The mean of R
runs must lie within 5 standard errors of E T (false-failure rate below 1e-6 by the CLT); the
same band must exclude 0.7 E T and 1.3 E T, which shows the test has power.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.error import expected_error
from ektelo_ng.operators.selection import hdmm
from ektelo_ng.operators.selection import classic
from ektelo_ng.plans import grids, static
from ektelo_ng.plans import catalog, info
from ektelo_ng.plans.hdmm import hdmm as hdmm_plan
from tests.helpers import spiky_table, true_vector

RUNS = 1000


STATIC_1D = ["Identity", "Uniform", "Privelet", "H2", "HB", "GreedyH", "HDMM"]
STATIC_2D = ["Identity", "Privelet", "H2", "HB", "QuadTree", "HB-Striped_kron", "HDMM"]


@pytest.mark.parametrize("name, shape", [(n, (32,)) for n in STATIC_1D] + [(n, (8, 8)) for n in STATIC_2D])
def test_plans_spend_exactly_their_budget_and_return_an_estimate(name, shape):
    columns, domain = spiky_table(shape)
    session = ek.protect(columns, domain, ek.PureDP("1/2"), seed=1)
    W = wl.RandomRange(shape, 20, seed=0)
    estimate = catalog[name](session.source, W, ek.PureDP(Fraction(1, 2)), **info[name].defaults).x
    assert estimate.shape == (domain.size,) and np.all(np.isfinite(estimate))
    assert session.budget.spent == ek.PureDP("1/2")


def _band(A, W, scale, x=None):
    """Exact mean and standard deviation of the total squared error for Laplace noise of scale b.

    With a rank-deficient A, least squares also has the bias c = W (A^+ A - I) x, and the error is
    ||c + W A^+ z||^2: its mean adds ||c||^2 and its variance 4 v ||(W A^+)^T c||^2 (odd moments of z
    vanish, so the linear and quadratic terms are uncorrelated).
    """
    pinv = np.linalg.pinv(A.dense())
    WA = W.dense() @ pinv
    K = WA.T @ WA
    v, m4 = 2 * scale**2, 24 * scale**4
    bias = np.zeros(W.shape[0]) if x is None else W.dense() @ (pinv @ (A.dense() @ x) - x)
    mean = v * np.trace(K) + bias @ bias
    variance = (m4 - 3 * v**2) * np.sum(np.diag(K) ** 2) + 2 * v**2 * np.sum(K * K) + 4 * v * np.sum((WA.T @ bias) ** 2)
    return mean, np.sqrt(variance)


@pytest.mark.parametrize("name", ["Identity", "Privelet", "H2", "HB", "GreedyH", "HB-Striped_kron", "QuadTree"])
@pytest.mark.parametrize("workload", ["prefix", "random"])
def test_empirical_error_matches_expected_error(name, workload):
    shape = (4, 8) if name in ("HB-Striped_kron", "QuadTree") else (32,)
    if workload == "prefix" and len(shape) == 2:
        W = wl.Kronecker([Prefix(4), Prefix(8)])
    else:
        W = wl.Prefix(32) if workload == "prefix" else wl.RandomRange(shape, 40, seed=3)
    columns, domain = spiky_table(shape)
    epsilon = Fraction(1, 2)
    session = ek.protect(columns, domain, ek.PureDP(epsilon * RUNS), seed=5)
    vector = session.source.vectorize()
    truth = W @ true_vector(columns, domain)
    plan = catalog[name]
    errors = [np.sum((W @ plan(vector, W, ek.PureDP(epsilon), shape=shape, **info[name].defaults).x - truth) ** 2)
              for _ in range(RUNS)]
    A = info[name].strategy(shape, W).matrix
    mean, sd = _band(A, W, A.sensitivity("l1") / float(epsilon))
    assert mean == pytest.approx(expected_error(W, A) / float(epsilon) ** 2, rel=1e-9)
    half_width = 5 * sd / np.sqrt(RUNS)
    assert abs(np.mean(errors) - mean) < half_width
    assert abs(0.7 * mean - mean) > half_width and abs(1.3 * mean - mean) > half_width  # the band has power


@pytest.mark.parametrize("workload", ["prefix", "random"])
def test_uniform_grid_empirical_error_matches_expected_error(workload):
    """UniformGrid with the record count public is a fixed strategy (its grid depends on N and eps only)."""
    shape, epsilon = (8, 8), Fraction(1, 2)
    W = wl.Kronecker([Prefix(8), Prefix(8)]) if workload == "prefix" else wl.RandomRange(shape, 40, seed=3)
    columns, domain = spiky_table(shape)
    session = ek.protect(columns, domain, ek.PureDP(epsilon * RUNS), seed=6)
    vector = session.source.vectorize()
    truth = W @ true_vector(columns, domain)
    errors = [np.sum((W @ grids.uniform_grid(vector, W, ek.PureDP(epsilon), shape=shape, records=200).x - truth) ** 2)
              for _ in range(RUNS)]
    A = classic.uniform_grid(shape, 200, float(epsilon)).matrix  # about N eps / 10 = 10 cells
    assert 1 < A.shape[0] < 64  # a real grid, neither one cell nor the identity
    mean, sd = _band(A, W, A.sensitivity("l1") / float(epsilon), true_vector(columns, domain))
    half_width = 5 * sd / np.sqrt(RUNS)
    assert abs(np.mean(errors) - mean) < half_width
    assert abs(0.7 * mean - mean) > half_width and abs(1.3 * mean - mean) > half_width


def test_hdmm_plan_matches_its_strategy_error():
    W = wl.AllRange(16)
    columns, domain = spiky_table((16,))
    runs = 200  # each run re-selects the strategy; no power claim here, only agreement
    session = ek.protect(columns, domain, ek.PureDP(runs), seed=6)
    vector = session.source.vectorize()
    truth = W @ true_vector(columns, domain)
    strategy = hdmm(W, restarts=1, seed=0)
    errors = [np.sum((W @ hdmm_plan(vector, W, ek.PureDP(1), restarts=1, seed=0).x - truth) ** 2) for _ in range(runs)]
    mean, sd = _band(strategy.matrix, W, strategy.matrix.sensitivity("l1"))
    assert mean == pytest.approx(strategy.expected_error(), rel=1e-6)
    assert abs(np.mean(errors) - mean) < 5 * sd / np.sqrt(runs)


def test_hdmm_plan_uses_gaussian_noise_under_zcdp():
    columns, domain = spiky_table((8, 8))
    session = ek.protect(columns, domain, ek.ZCDP("1/2"), seed=2)
    estimate = hdmm_plan(session.source, wl.AllKway(domain, 1), ek.ZCDP("1/2"), restarts=1).x
    assert estimate.shape == (64,) and session.budget.spent == ek.ZCDP("1/2")


def test_plans_refuse_a_workload_of_the_wrong_size():
    columns, domain = spiky_table((8,))
    session = ek.protect(columns, domain, ek.PureDP(1))
    with pytest.raises(ValueError, match="columns"):
        hdmm_plan(session.source, wl.Prefix(9), ek.PureDP(1))
    with pytest.raises(ValueError, match="cells"):
        static.identity(session.source, wl.Prefix(8), 1, shape=(3, 3))
    assert session.budget.spent == ek.PureDP.zero()
