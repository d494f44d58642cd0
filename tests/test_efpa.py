"""EFPA: the kernel's private choice of k (dropped norms and their sensitivity by brute force, exact privacy
loss over neighbours, selection frequencies, charge, refusals), the public noise-error bound, and the plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats
from scipy.special import softmax

import ektelo_ng as ek
from ektelo_ng.operators.matrix import Fourier
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.kernel.limits import Work
from ektelo_ng.kernel.mechanisms.efpa import tails

FOURIER_SENSITIVITY = 1.0  # ||(I - P_k) d||_2 <= ||d||_2 <= ||d||_1 for the exact basis


def fourier_tail_norms(x):
    return tails(np.asarray(x, dtype=float), Work())
from ektelo_ng.operators.client import InvalidRequestError
from ektelo_ng.plans.efpa import efpa, noise_error
from tests.helpers import neighbours

vectors = st.integers(1, 24).flatmap(lambda n: st.lists(st.integers(0, 9), min_size=n, max_size=n))


@settings(max_examples=80, deadline=None)
@given(vectors)
def test_dropped_norms_and_their_sensitivity_by_brute_force(values):
    x = np.array(values, dtype=float)
    B = Fourier(x.size).dense()
    dropped = [np.linalg.norm(x - B[:k].T @ (B[:k] @ x)) for k in range(1, x.size + 1)]
    np.testing.assert_allclose(fourier_tail_norms(x), dropped, atol=1e-9)
    worst = max(np.abs(fourier_tail_norms(y) - fourier_tail_norms(x)).max() for y in neighbours(x))
    assert worst <= FOURIER_SENSITIVITY + 1e-9


@settings(max_examples=40, deadline=None)
@given(vectors, st.sampled_from([0.1, 1.0, 3.0]))
def test_the_exact_privacy_loss_over_all_neighbours_is_at_most_epsilon(values, epsilon):
    x = np.array(values, dtype=float)
    offsets = noise_error(x.size, 1.0)

    def law(v):
        return softmax(-epsilon * (fourier_tail_norms(v) + offsets) / (2 * FOURIER_SENSITIVITY))

    assert max(np.abs(np.log(law(x)) - np.log(law(y))).max() for y in neighbours(x)) <= epsilon + 1e-9


def test_the_sensitivity_bound_is_nearly_attained():
    n = 64
    change = np.abs(fourier_tail_norms(np.eye(n)[0]) - fourier_tail_norms(np.zeros(n)))[0]
    assert change == pytest.approx(np.sqrt(1 - 1 / n))


@pytest.mark.parametrize("n", [7, 64, 100])
def test_the_noise_error_bound_holds_for_the_exact_sensitivity(n):
    for k in range(1, n + 1, 3):
        exact = Fourier(n, k).sensitivity("l1")
        assert noise_error(n, 1.0)[k - 1] >= exact * np.sqrt(2 * k) - 1e-9


def _session(x, budget, seed=0):
    return ek.protect({"a": np.repeat(np.arange(x.size), x)}, ek.Domain.from_dict({"a": x.size}), budget, seed=seed)


def test_the_kernel_selects_with_the_stated_law_and_charges_epsilon():
    x = np.array([3, 5, 8, 9, 8, 5, 3, 1])
    offsets = np.linspace(0, 3, x.size)
    s = _session(x, ek.PureDP(10_000), seed=6)
    v = s.source.vectorize()
    runs = 4000
    picks = np.array([v.fourier_select(offsets, 1) for _ in range(runs)])
    assert s.budget.spent == ek.PureDP(runs)
    scores = -(fourier_tail_norms(x.astype(float)) + offsets)
    counts = np.bincount(picks - 1, minlength=x.size)
    assert stats.chisquare(counts, runs * softmax(scores / (2 * FOURIER_SENSITIVITY))).pvalue > 1e-6
    assert stats.chisquare(counts, runs * softmax(scores)).pvalue < 1e-6  # without the factor 2
    z = _session(x, ek.ZCDP(1))
    z.source.vectorize().fourier_select(offsets, 1)
    assert z.budget.spent == ek.ZCDP("1/8")


@pytest.mark.parametrize("offsets", [np.zeros(3), np.full(8, np.inf)])
def test_bad_offsets_are_refused_and_nothing_is_spent(offsets):
    s = _session(np.ones(8, int), ek.PureDP(1))
    with pytest.raises(InvalidRequestError, match="offsets must be 8 finite numbers"):
        s.source.vectorize().fourier_select(offsets, 1)
    assert s.budget.spent == ek.PureDP.zero()


def test_efpa_spends_its_budget_and_recovers_smooth_data():
    n = 128
    x = np.rint(50 + 40 * np.cos(2 * np.pi * np.arange(n) / n)).astype(int)
    s = _session(x, ek.PureDP(1000))
    estimate = efpa(s.source, Prefix(n), ek.PureDP(1000))
    assert s.budget.spent == ek.PureDP(1000)
    assert np.abs(estimate - x).max() < 2.0
    low = _session(x, ek.PureDP("0.1"), seed=1)
    assert np.all(np.isfinite(efpa(low.source, Prefix(n), ek.PureDP("0.1")))) and low.budget.spent == ek.PureDP("0.1")
