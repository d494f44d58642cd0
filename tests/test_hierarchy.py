"""operators.hierarchy: the two-pass tree estimate is dense GLS over the leaves, consistent, with exact variances."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.operators.hierarchy import Hierarchy, largest_shares, nonnegative_integers, shared_gls, tree_gls, unit_weights


@st.composite
def trees(draw, max_units: int = 9):
    units = draw(st.integers(1, max_units))
    parent = [-1] + [draw(st.integers(0, v - 1)) for v in range(1, units)]
    tree = Hierarchy(parent)
    # a unit with children may go unmeasured; a leaf never
    measured = [draw(st.booleans()) if tree.children[v] else True for v in range(units)]
    return tree, np.array(measured)


def _leaf_sums(tree: Hierarchy) -> np.ndarray:
    """S (units x leaves): unit v's vector is the sum of its leaves'."""
    leaves = np.flatnonzero(tree.children == 0)
    S = np.zeros((tree.units, leaves.size))
    for j, leaf in enumerate(leaves):
        v = leaf
        while v >= 0:
            S[v, j] = 1
            v = tree.parent[v]
    return S


def _random_measurement(rng, k: int):
    rows = k + int(rng.integers(0, 3))
    A = rng.normal(size=(rows, k))
    L = rng.normal(size=(rows, rows)) * 0.3 + np.diag(rng.uniform(0.5, 2.0, rows))
    return A, L @ L.T  # full column rank and a positive definite noise covariance, almost surely


def dense_gls(tree, measured, designs, noises, answers):
    """Stack every measurement over the leaves' unknowns, whiten, and solve with lstsq: each unit's estimate and
    covariance."""
    S, k = _leaf_sums(tree), designs[0].shape[1]
    rows, values = [], []
    for v in np.flatnonzero(measured):
        whiten = np.linalg.cholesky(np.linalg.inv(noises[v])).T  # W^T W = Sigma^-1
        rows.append(whiten @ designs[v] @ np.kron(S[v : v + 1], np.eye(k)))
        values.append(whiten @ answers[v])
    X, y = np.vstack(rows), np.concatenate(values)
    theta = np.linalg.lstsq(X, y, rcond=None)[0]
    information_inverse = np.linalg.inv(X.T @ X)
    units = [np.kron(S[v : v + 1], np.eye(k)) for v in range(tree.units)]
    return np.array([U @ theta for U in units]), np.array([U @ information_inverse @ U.T for U in units])


def local(design, noise, answer):
    """A unit's own GLS: z = (A^T S^-1 A)^-1 A^T S^-1 y and its covariance."""
    information = design.T @ np.linalg.solve(noise, design)
    covariance = np.linalg.inv(information)
    return covariance @ design.T @ np.linalg.solve(noise, answer), covariance


@settings(max_examples=60, deadline=None)
@given(trees(), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_the_tree_estimate_is_dense_gls_over_the_leaves(tree_and_measured, k, seed):
    tree, measured = tree_and_measured
    rng = np.random.default_rng(seed)
    designs, noises = zip(*(_random_measurement(rng, k) for _ in range(tree.units)))
    answers = [rng.normal(size=A.shape[0]) * 10 for A in designs]
    expected, expected_cov = dense_gls(tree, measured, designs, noises, answers)
    z = np.zeros((tree.units, k))
    C = np.tile(np.eye(k), (tree.units, 1, 1))
    for v in np.flatnonzero(measured):
        z[v], C[v] = local(designs[v], noises[v], answers[v])
    fit = tree_gls(tree, z, C, measured)
    scale = 1 + np.abs(expected).max()
    np.testing.assert_allclose(fit.estimates, expected, atol=1e-8 * scale)
    np.testing.assert_allclose(fit.covariances, expected_cov, atol=1e-8 * (1 + np.abs(expected_cov).max()))


@settings(max_examples=60, deadline=None)
@given(trees(max_units=30), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_children_sum_to_their_parent(tree_and_measured, r, seed):
    tree, measured = tree_and_measured
    rng = np.random.default_rng(seed)
    scales = rng.uniform(0.1, 10, tree.units)
    fit = shared_gls(tree, rng.normal(size=(tree.units, r)) * 100, scales, measured)
    for v in np.flatnonzero(tree.children):
        children = np.flatnonzero(tree.parent == v)
        np.testing.assert_allclose(fit.answers[children].sum(axis=0), fit.answers[v], rtol=0, atol=1e-9 * 100)
    # every unit is estimated at least as precisely as by its own measurement alone
    assert np.all(fit.factors > 0) and np.all(fit.factors[measured] <= scales[measured] * (1 + 1e-12))


@settings(max_examples=40, deadline=None)
@given(trees(max_units=12), st.integers(0, 2**32 - 1))
def test_unit_weights_are_the_dense_estimators_and_give_the_largest_shares(tree_and_measured, seed):
    tree, measured = tree_and_measured
    scales = np.random.default_rng(seed).uniform(0.2, 5, tree.units)
    S = _leaf_sums(tree)[measured]  # the measured units over the leaves, one scalar each
    whitened = S / np.sqrt(scales[measured])[:, None]
    estimator = _leaf_sums(tree) @ np.linalg.pinv(whitened) / np.sqrt(scales[measured])[None, :]
    dense = np.zeros((tree.units, tree.units))
    dense[:, measured] = estimator  # unit v's estimate = sum over measured u of dense[v, u] z_u
    np.testing.assert_allclose(unit_weights(tree, scales, measured), dense, atol=1e-9)
    parts = dense**2 * scales
    np.testing.assert_allclose(largest_shares(tree, scales, measured), parts.max(axis=1) / parts.sum(axis=1), atol=1e-9)
    np.testing.assert_allclose(parts.sum(axis=1), shared_gls(tree, np.zeros((tree.units, 1)), scales, measured).factors,
                               rtol=1e-9)  # fmt: skip


def test_a_shared_covariance_is_the_dense_estimate_column_by_column():
    rng = np.random.default_rng(3)
    tree = Hierarchy([-1, 0, 0, 0, 1, 1, 2, 2, 2, 3])
    Q = np.cov(rng.normal(size=(3, 12)))  # one shape for every unit, scaled per unit
    scales = rng.uniform(0.5, 4, tree.units)
    z = rng.normal(size=(tree.units, 3)) * 20
    dense = tree_gls(tree, z, scales[:, None, None] * Q)
    shared = shared_gls(tree, z, scales)
    np.testing.assert_allclose(shared.answers, dense.estimates, atol=1e-9)
    np.testing.assert_allclose(shared.variances(np.diag(Q)), np.diagonal(dense.covariances, axis1=1, axis2=2),
                               atol=1e-12)  # fmt: skip


def _monte_carlo_ratios(factors_of, replicates: int, seed: int) -> np.ndarray:
    """The empirical variance of each unit's error over ``replicates`` Gaussian draws, over ``factors_of``'s."""
    rng = np.random.default_rng(seed)
    tree = Hierarchy([-1, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3])
    scales = np.array([9.0, 4, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1]) * rng.uniform(0.5, 2, tree.units)
    truth = rng.integers(0, 1000, size=(tree.units, 1)).astype(float)
    for v in reversed(range(1, tree.units)):  # leaves are free, parents their sums
        if tree.children[v]:
            truth[v] = truth[tree.parent == v].sum()
    truth[0] = truth[tree.parent == 0].sum()
    noisy = truth + rng.normal(size=(tree.units, replicates)) * np.sqrt(scales)[:, None]
    fit = shared_gls(tree, noisy, scales)
    errors = fit.answers - truth
    return errors.var(axis=1, ddof=1) / factors_of(fit)


@pytest.mark.parametrize("replicates", [20_000])
def test_the_variances_match_monte_carlo(replicates):
    """(n - 1) s^2 / F is chi-square with n - 1 degrees of freedom for each of the 13 units: a two-sided test at
    1e-6 over all of them (Bonferroni) fails by chance once in a million runs. Power: variances 15% off are rejected."""
    n, units, alpha = replicates, 13, 1e-6
    low, high = (scipy.stats.chi2.ppf([alpha / (2 * units), 1 - alpha / (2 * units)], n - 1) / (n - 1))
    ratios = _monte_carlo_ratios(lambda fit: fit.factors, n, seed=0)
    assert np.all((low <= ratios) & (ratios <= high)), ratios
    assert not np.all((low <= ratios * 1.15) & (ratios * 1.15 <= high))
    assert not np.all((low <= ratios / 1.15) & (ratios / 1.15 <= high))


def test_nonnegative_integers_keep_the_hierarchy_consistent():
    rng = np.random.default_rng(5)
    tree = Hierarchy([-1, 0, 0, 1, 1, 1, 2, 2])
    fit = shared_gls(tree, rng.normal(size=(tree.units, 50)) * 3 + 2, np.ones(tree.units))
    integers = nonnegative_integers(tree, fit.answers)
    assert integers.dtype == np.int64 and integers.min() >= 0
    for v in np.flatnonzero(tree.children):
        np.testing.assert_array_equal(integers[tree.parent == v].sum(axis=0), integers[v])
    np.testing.assert_array_equal(integers[0], np.maximum(np.rint(fit.answers[0]), 0))
    # children already non-negative integers summing to their parent are kept as they are
    exact = np.array([[7, 0], [3, 0], [4, 0], [1, 0], [2, 0], [0, 0], [4, 0], [0, 0]], float)
    np.testing.assert_array_equal(nonnegative_integers(tree, exact), exact)
    # a child far below zero gets 0 and its siblings share the parent's total
    np.testing.assert_array_equal(nonnegative_integers(Hierarchy([-1, 0, 0]), np.array([[5.0], [-3], [8]])),
                                  [[5], [0], [5]])  # fmt: skip


def test_bad_hierarchies_and_inputs_are_refused():
    with pytest.raises(ValueError, match="parent\\[0\\] == -1"):
        Hierarchy([0, 0])
    with pytest.raises(ValueError, match="numbered before them"):
        Hierarchy([-1, 2, 0])
    with pytest.raises(ValueError, match="neither a measurement nor children"):
        shared_gls(Hierarchy([-1, 0]), np.ones((2, 1)), np.ones(2), measured=[True, False])
    with pytest.raises(ValueError, match="positive finite"):
        shared_gls(Hierarchy([-1, 0]), np.ones((2, 1)), np.array([1.0, 0.0]))
