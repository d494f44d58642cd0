"""operators.nonnegative: projected L-BFGS over x >= 0, against optimality conditions and scipy's L-BFGS-B."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import Bounds, minimize

from ektelo_ng.operators.nonnegative import HALVINGS, minimize_nonnegative


def quadratic(A, b):
    return lambda x: (0.5 * x @ A @ x - b @ x, A @ x - b)


def kkt_violation(x, g):
    """Largest breach of x >= 0, g >= 0 where x = 0 and g = 0 where x > 0 (relative to the gradient's scale)."""
    scale = max(1.0, np.abs(g).max())
    return max(-x.min(initial=0.0), np.abs(g[x > 1e-10]).max(initial=0.0) / scale,
               -g[x <= 1e-10].min(initial=0.0) / scale)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 30), st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
def test_convex_quadratics_reach_their_constrained_minimum(n, seed, shift):
    rng = np.random.default_rng(seed)
    R = rng.normal(size=(n, n))
    A = R @ R.T + 0.1 * np.eye(n)
    b = rng.normal(size=n) + shift  # a mix of active and inactive bounds
    found = minimize_nonnegative(quadratic(A, b), rng.uniform(0, 1, n), maxiter=5000, tolerance=0.0, window=1)
    assert found.x.min() >= 0.0
    assert kkt_violation(found.x, A @ found.x - b) < 1e-6
    reference = minimize(quadratic(A, b), np.zeros(n), jac=True, method="L-BFGS-B", bounds=Bounds(0, np.inf),
                         options={"ftol": 0, "gtol": 1e-12, "maxiter": 10000})
    assert found.loss <= reference.fun + 1e-9 * max(1.0, abs(reference.fun))


def test_kkt_check_has_power():
    """The unconstrained minimizer clipped at zero is not the constrained minimum, and the check says so."""
    A = np.array([[2.0, 1.9], [1.9, 2.0]])
    b = np.array([1.0, -1.0])
    clipped = np.maximum(np.linalg.solve(A, b), 0.0)
    assert kkt_violation(clipped, A @ clipped - b) > 0.1
    found = minimize_nonnegative(quadratic(A, b), np.ones(2), maxiter=1000, tolerance=0.0, window=1)
    assert kkt_violation(found.x, A @ found.x - b) < 1e-9
    assert found.x == pytest.approx([0.5, 0.0], abs=1e-9)


def test_rosenbrock_on_the_nonnegative_orthant():
    def rosenbrock(x):
        a, b = x[:-1], x[1:]
        f = np.sum(100 * (b - a**2) ** 2 + (1 - a) ** 2)
        g = np.zeros_like(x)
        g[:-1] = -400 * a * (b - a**2) - 2 * (1 - a)
        g[1:] += 200 * (b - a**2)
        return f, g

    found = minimize_nonnegative(rosenbrock, np.full(6, 0.1), maxiter=5000, tolerance=0.0, window=1)
    assert found.converged
    assert found.x == pytest.approx(np.ones(6), abs=1e-5)


def test_window_tolerance_stops_early_and_says_so():
    rng = np.random.default_rng(3)
    R = rng.normal(size=(200, 200))
    A = R @ R.T / 200 + 1e-3 * np.eye(200)  # badly conditioned: many small steps near the end
    b = rng.normal(size=200)
    fun = quadratic(A, b)
    full = minimize_nonnegative(fun, np.ones(200), maxiter=3000, tolerance=0.0, window=1)
    early = minimize_nonnegative(fun, np.ones(200), maxiter=3000, tolerance=1e-3, window=10)
    assert early.converged and early.steps < full.steps
    assert full.loss <= early.loss <= full.loss + 1e-2 * abs(full.loss)  # stopped on a relative change of 1e-3 per 10 steps
    capped = minimize_nonnegative(fun, np.ones(200), maxiter=5, tolerance=0.0, window=1)
    assert capped.steps == 5 and not capped.converged


def test_work_is_bounded_by_the_cap():
    """Each step tries at most HALVINGS points: the evaluations are counted, never timed."""
    calls = []

    def flat_then_noisy(x):  # no descent direction ever decreases it: every search gives up
        calls.append(1)
        return 1.0 + 1e-300 * float(np.sum(x)), np.full_like(x, -1.0)

    found = minimize_nonnegative(flat_then_noisy, np.ones(4), maxiter=50, tolerance=0.0, window=1)
    assert found.steps == 0 and found.converged
    assert len(calls) <= 1 + HALVINGS


def test_a_start_without_a_finite_loss_is_not_converged():
    found = minimize_nonnegative(lambda x: (np.inf, np.zeros_like(x)), np.ones(3), maxiter=10, tolerance=0.0, window=1)
    assert found.steps == 0 and not found.converged
    found = minimize_nonnegative(lambda x: (1.0, np.full_like(x, np.nan)), np.ones(3), maxiter=10, tolerance=0.0, window=1)
    assert not found.converged
