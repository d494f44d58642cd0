"""Exact Laplace intervals at scale (operators.laplace_laws): against closed forms, against adaptive quadrature of
the unrounded law (never narrower, at most the stated widening wider), and the Kronecker path against dense
coefficients."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.operators import laplace_laws
from ektelo_ng.operators.confidence import laplace_halfwidth
from ektelo_ng.operators.estimate import VectorEstimate
from ektelo_ng.operators.laplace_laws import GRID, Laws, grid_bins, halfwidths
from ektelo_ng.operators.matrix import Dense, Identity, Kronecker, VStack
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.operators.measurement import Measurement
from ektelo_ng.operators.selection import hb

#: The adaptive quadrature the laws are checked against solves to about this (relative).
REFERENCE = 1e-8


def laws_of(cases):
    """Laws from ``(laplace scales, gaussian variance)`` pairs, each scale one term."""
    law = np.concatenate([np.full(len(scales), i) for i, (scales, _) in enumerate(cases)] + [np.zeros(0, int)])
    scales = np.concatenate([np.asarray(s, dtype=float) for s, _ in cases] + [np.zeros(0)])
    return Laws(law.astype(np.int64), grid_bins(scales), np.ones(scales.size), np.array([g for _, g in cases]))


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-300, 1e300))
def test_grid_points_are_never_below_the_scale_and_at_most_one_step_above(scale):
    point = 2.0 ** (grid_bins(np.array([scale]))[0] / GRID)
    assert scale <= point * (1 + 1e-15)
    assert point <= scale * 2 ** (1 / GRID) * (1 + 1e-15)


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_single_and_two_equal_laplace_terms_match_their_closed_forms(level):
    # one Laplace(1): P(|X| <= x) = 1 - exp(-x); two: 1 - (1 + x / 2) exp(-x) (scale 1 is on the grid: no rounding)
    one, two = halfwidths(laws_of([([1.0], 0.0), ([1.0, 1.0], 0.0)]), level)
    assert one == pytest.approx(-math.log(1 - level), rel=1e-8)
    assert 1 - (1 + two / 2) * math.exp(-two) == pytest.approx(level, abs=1e-9)


def test_a_law_without_noise_has_no_width_and_a_gaussian_one_is_normal():
    none, normal = halfwidths(laws_of([([], 0.0), ([], 4.0)]), 0.95)
    assert none == 0.0
    assert normal == pytest.approx(2 * 1.959963984540054, rel=1e-8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=12), st.floats(0.0, 5.0),
       st.sampled_from([0.5, 0.9, 0.95, 0.99]))
def test_never_narrower_than_the_exact_law_and_at_most_the_stated_widening_wider(scales, gaussian, level):
    laws = laws_of([(scales, gaussian)])
    exact = laplace_halfwidth(np.array(scales), gaussian, level)
    (found,) = halfwidths(laws, level)
    assert exact * (1 - REFERENCE) <= found <= exact * (1 + laws.widening + REFERENCE)


def test_rounding_up_is_what_makes_it_wider_and_a_narrower_answer_would_fail():
    """Power: scales just above grid points are rounded almost a full step up, so the interval is wider than the
    exact one by nearly the step, and an interval from the scales rounded *down* would be too narrow."""
    points = np.arange(1, 6)
    scales = 2.0 ** (points / GRID) * (1 + 1e-9)
    exact = laplace_halfwidth(scales, 0.0, 0.95)
    (found,) = halfwidths(laws_of([(scales, 0.0)]), 0.95)
    (down,) = halfwidths(Laws(np.zeros(5, np.int64), points, np.ones(5), np.zeros(1)), 0.95)
    assert found > exact * (1 + 0.9 * (2 ** (1 / GRID) - 1))
    assert down < exact


def test_scale_equivariance_holds_from_tiny_to_huge_scales():
    base = [0.3, 1.0, 2.5]
    found = halfwidths(laws_of([(np.array(base) * 2.0**k, 0.0) for k in (-900, -10, 0, 10, 900)]), 0.9)
    assert found / 2.0 ** np.array([-900, -10, 0, 10, 900]) == pytest.approx(np.full(5, found[2]), rel=1e-12)


def test_many_laws_of_few_shapes_share_their_computation():
    """10^5 answers whose laws are a few shapes at many scales cost about as much as those few shapes."""
    rng = np.random.default_rng(0)
    shapes = [np.array([1.0]), np.array([1.0, 0.5]), np.array([1.0, 1.0, 1.0])]
    cases = [(shapes[i % 3] * 2.0 ** rng.integers(-20, 20), 0.0) for i in range(100_000)]
    found = halfwidths(laws_of(cases), 0.95)
    expected = [laplace_halfwidth(s, 0.0, 0.95) for s in shapes]
    for i in range(0, 100_000, 9973):
        assert found[i] / cases[i][0][0] == pytest.approx(expected[i % 3] / shapes[i % 3][0], rel=1e-7)


def dense_and_kronecker(A, W, x, level=0.95):
    """Intervals through the Kronecker path and through dense coefficients (the same measurement, unstructured)."""
    rng = np.random.default_rng(1)
    y = A @ x + rng.laplace(size=A.shape[0])
    structured = VectorEstimate(x, [Measurement(A, y, 2.0, "laplace")]).intervals(W, level)
    dense = VectorEstimate(x, [Measurement(Dense(A.dense()), y, 2.0, "laplace")]).intervals(Dense(W.dense()), level)
    return structured, dense


def test_the_kronecker_path_agrees_with_dense_coefficients():
    A = Kronecker([hb((8,)).matrix, Identity(4)])
    W = VStack([Kronecker([Prefix(8), Prefix(4)]), Kronecker([Identity(8), Prefix(4)])])
    x = np.random.default_rng(0).integers(0, 9, 32).astype(float)
    structured, dense = dense_and_kronecker(A, W, x)
    assert "exact" in structured.method and "exact" in dense.method
    assert structured.halfwidths == pytest.approx(dense.halfwidths, rel=2 ** (3 / GRID) - 1)
    reference = [laplace_halfwidth(np.abs(c) / math.sqrt(2), 0.0, 0.95)
                 for block in VectorEstimate(x, [Measurement(A, A @ x, 2.0, "laplace")])._covariance.coefficients(W)
                 for c in block]
    assert np.all(structured.halfwidths >= np.array(reference) * (1 - REFERENCE))


def test_past_the_work_limit_auto_falls_back_to_the_bound_and_exact_refuses(monkeypatch):
    A = Kronecker([hb((16,)).matrix, hb((16,)).matrix])
    W = Kronecker([Prefix(16), Prefix(16)])
    x = np.ones(256)
    estimate = VectorEstimate(x, [Measurement(A, A @ x, 1.0, "laplace")])
    monkeypatch.setattr("ektelo_ng.operators.estimate.EXACT_WORK", 10)
    monkeypatch.setattr("ektelo_ng.operators.estimate.EXACT_WORK_ASKED", 10)
    assert "sound bound" in estimate.intervals(W, 0.95).method
    with pytest.raises(ValueError, match="fewer answers"):
        estimate.intervals(W, 0.95, method="exact")
    assert laplace_laws.kronecker_laws(estimate._covariance._factor_coefficients(W), "laplace", 10) is None
