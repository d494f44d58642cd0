"""Inference: least squares, NNLS and multiplicative weights against dense/brute-force oracles,
and global inference through lineage mappings."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize

from ektelo_ng.operators.matrix import Dense, Identity, Kronecker, Total
from ektelo_ng.operators.matrices import Hierarchical, Prefix
from ektelo_ng.operators import inference
from ektelo_ng.operators.measurement import Measurement, known_total, map_to_root
from ektelo_ng.operators.inference import least_squares, multiplicative_weights, nnls
from ektelo_ng.operators.partition import Partition
from ektelo_ng.operators.selection import classic


def _dense_weighted_lstsq(blocks):
    """Minimum-norm weighted least squares with numpy: blocks of (dense matrix, answers, std)."""
    A = np.vstack([M / np.broadcast_to(s, y.shape)[:, None] for M, y, s in blocks])
    b = np.concatenate([y / s for M, y, s in blocks])
    return np.linalg.lstsq(A, b, rcond=None)[0]


def test_measurement_validation():
    with pytest.raises(ValueError):
        Measurement(Identity(3), np.zeros(2), 1.0)
    with pytest.raises(ValueError):
        Measurement(Identity(3), np.zeros(3), 0.0)
    with pytest.raises(ValueError):
        Measurement(Identity(3), np.zeros(3), np.ones(2))
    m = Measurement(Identity(2), [1, 2], np.array([1.0, 4.0]))
    assert np.array_equal(m.weights, [1.0, 0.25])
    with pytest.raises(ValueError):
        least_squares([Measurement(Identity(2), [1, 2], 1.0), Measurement(Identity(3), [1, 2, 3], 1.0)])


@pytest.mark.parametrize(
    "strategy",
    [Hierarchical(37, 2), classic.quadtree((6, 9)).matrix, classic.hb((16, 64)).matrix, classic.privelet((8, 4)).matrix],
)
def test_least_squares_recovers_exact_measurements(strategy):
    x = np.random.default_rng(0).poisson(6.0, strategy.shape[1]).astype(float)
    estimate = least_squares([Measurement(strategy, strategy @ x, 1.0)])
    assert np.allclose(estimate, x, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_least_squares_equals_dense_weighted_lstsq(seed):
    rng = np.random.default_rng(seed)
    n = 12
    blocks = []
    for rows in (5, 4, 3):  # 12 rows but rank-deficient (repeated rows): min-norm matters
        M = rng.normal(size=(rows, n))
        blocks.append((M, rng.normal(size=rows) * 5, rng.uniform(0.5, 3.0, rows) if rows != 4 else 2.0))
    blocks[2] = (blocks[0][0][:3] + blocks[1][0][:3], *blocks[2][1:])
    measurements = [Measurement(Dense(M), y, s) for M, y, s in blocks]
    assert np.allclose(least_squares(measurements), _dense_weighted_lstsq(blocks), atol=1e-8)


@pytest.mark.parametrize(
    "factors", [[Hierarchical(8, 2), Hierarchical(4, 2)], [Total(3), Prefix(5)], [Hierarchical(6, 3)]]
)
def test_direct_kronecker_solve_is_the_minimum_norm_solution(factors):
    A = Kronecker(factors) * 0.5
    y = np.random.default_rng(1).normal(size=A.shape[0])
    expected = np.linalg.pinv(A.dense()) @ y
    assert inference._direct_kronecker([Measurement(A, y, 3.0)]) is not None
    assert np.allclose(least_squares([Measurement(A, y, 3.0)]), expected, atol=1e-10)


def test_known_total_pins_the_sum():
    y = np.array([10.0, 20.0, 30.0, 40.0])
    estimate = least_squares([Measurement(Identity(4), y, 5.0), known_total(4, 80.0)])
    assert estimate.sum() == pytest.approx(80.0, abs=1e-4)
    assert np.allclose(estimate, y - 5.0, atol=1e-4)  # the correction spreads evenly
    # a heavily weighted row needs more LSMR iterations than min(m, n)
    for n in (2, 3, 50):
        y = np.arange(n, dtype=float)
        expected = _dense_weighted_lstsq([(np.eye(n), y, 1.0), (np.ones((1, n)), np.array([2.0 * n]), 1e-4)])
        estimate = least_squares([Measurement(Identity(n), y, 1.0), known_total(n, 2.0 * n)])
        assert np.allclose(estimate, expected, atol=1e-6)


def test_ahp_threshold():
    threshold = 0.35 * np.log(8) / 0.5
    y = np.array([-3.0, 0.0, threshold, threshold + 1e-9, 10.0, 0.2, 5.0, 1.0])
    assert np.array_equal(inference.ahp_threshold(y, 0.5), np.where(y > threshold, y, 0.0))
    assert inference.ahp_threshold(y, 0.5)[2] == 0.0


@pytest.mark.parametrize("seed", range(4))
def test_nnls_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(25, 10))
    y = rng.normal(size=25) * 3
    std = rng.uniform(0.5, 2.0, 25)
    estimate = nnls([Measurement(Dense(A[:15]), y[:15], std[:15]), Measurement(Dense(A[15:]), y[15:], std[15:])])
    reference, _ = scipy.optimize.nnls(A / std[:, None], y / std)
    assert np.all(estimate >= 0)
    assert np.any(reference == 0)  # the constraint is active: plain least squares would differ
    assert np.allclose(estimate, reference, atol=1e-6)


def _mw_wrong_sign(measurement, total, iterations):
    x = np.full(measurement.matrix.shape[1], total / measurement.matrix.shape[1])
    for _ in range(iterations):
        x = x * np.exp(measurement.matrix.T @ (measurement.matrix @ x - measurement.answers) / (2 * total))
        x *= total / x.sum()
    return x


def test_multiplicative_weights_moves_toward_the_answers():
    n, total = 16, 1000.0
    truth = np.zeros(n)
    truth[:4] = 250.0
    M = Prefix(n)
    m = Measurement(M, M @ truth, 1.0)
    start = np.full(n, total / n)
    before = np.abs(M @ start - m.answers).sum()
    after = np.abs(M @ multiplicative_weights([m], total, iterations=50) - m.answers).sum()
    wrong = np.abs(M @ _mw_wrong_sign(m, total, 50) - m.answers).sum()
    assert after < 0.2 * before < before < wrong
    assert multiplicative_weights([m], total).sum() == pytest.approx(total)


def test_multiplicative_weights_converges_on_consistent_identity_answers():
    truth = np.array([100.0, 300.0, 50.0, 550.0])
    estimate = multiplicative_weights([Measurement(Identity(4), truth, 1.0)], 1000.0, iterations=2000)
    assert np.allclose(estimate, truth, rtol=1e-3)
    with pytest.raises(ValueError):
        multiplicative_weights([Measurement(Identity(4), truth, 1.0)], 0.0)


def test_global_inference_through_split_and_reduce_lineage():
    """Measurements on a split part, on another part, and on a reduced vector, mapped to the
    root, give the same estimate as inference on the root with the mapped dense matrices."""
    rng = np.random.default_rng(5)
    n = 12
    x = rng.poisson(5.0, n).astype(float)
    split = Partition(np.array([0, 0, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1]))
    reduce = Partition(np.arange(n) // 3)
    S0, S1, P = split.selection(0), split.selection(1), reduce.matrix()
    derived = [  # (query matrix on the derived vector, lineage from the root, noise std)
        (Hierarchical(S0.shape[0], 2), [S0], 1.0),
        (Prefix(S1.shape[0]), [S1], 2.0),
        (Identity(P.shape[0]), [P], 0.5),
        (Total(2), [P, Partition(np.array([0, 0, 1, 1])).selection(1)], 0.7),  # split of the reduced vector
    ]
    noisy = []
    for M, lineage, std in derived:
        root_matrix = map_to_root(M, lineage)
        noisy.append((root_matrix, root_matrix @ x + rng.normal(0, std, M.shape[0]), std))
    implicit = least_squares([Measurement(R, y, s) for R, y, s in noisy])
    dense = least_squares([Measurement(Dense(R.dense()), y, s) for R, y, s in noisy])
    expected = _dense_weighted_lstsq([(R.dense(), y, s) for R, y, s in noisy])
    assert np.allclose(implicit, expected, atol=1e-8) and np.allclose(dense, expected, atol=1e-8)
    exact = least_squares([Measurement(R, R @ x, s) for R, y, s in noisy])
    assert np.allclose(exact, x, atol=1e-6)  # the split parts identify every cell
    assert map_to_root(Identity(3), []).shape == (3, 3)


def test_explicit_sparse_equals_the_dense_matrix_or_declines():
    from ektelo_ng.operators.matrix import Dense, Fourier, Identity, Intervals, Sparse, Total, VStack, Weighted
    from ektelo_ng.operators.matrices import Prefix
    from ektelo_ng.operators.linalg import explicit_sparse

    rng = np.random.default_rng(3)
    M = VStack([
        Weighted(Intervals(7, [0, 2, 6], [3, 2, 6]), 2.5), Dense(rng.normal(size=(2, 7))), Identity(7), Total(7),
        Sparse(np.eye(7)[:3]), Prefix(7),
    ])
    np.testing.assert_allclose(explicit_sparse(M, 10_000).toarray(), M.dense())
    assert explicit_sparse(M, 40) is None  # too many non-zeros
    assert explicit_sparse(Fourier(8), 10_000) is None  # no cheap explicit form: stay implicit


def test_explicit_sparse_of_boxes_diagonals_and_products_equals_the_dense_matrix():
    """Boxes in 1-, 2- and 3-D, and products (boxes reduced by a partition, a weighted tree mapped to the
    root through a partition) equal their dense matrices; a product declines when a factor has no cheap
    explicit form or a factor or partial product has too many non-zeros."""
    from ektelo_ng.operators.matrix import Diagonal, Fourier, Identity, Intervals, Ones, Product, Ranges
    from ektelo_ng.operators.linalg import explicit_sparse
    from ektelo_ng.operators.partition import Partition

    rng = np.random.default_rng(4)
    for shape in [(7,), (4, 6), (3, 1, 5), (2, 3, 2, 4)]:
        ends = np.stack([rng.integers(0, n, (9, 2)) for n in shape], axis=1)
        boxes = Ranges(shape, ends.min(axis=2), ends.max(axis=2))
        np.testing.assert_array_equal(explicit_sparse(boxes, 10_000).toarray(), boxes.dense())
    boxes = Ranges((4, 6), [[0, 1], [2, 0], [1, 3]], [[3, 4], [2, 5], [1, 3]])  # 16 + 6 + 1 cells
    cells = Partition(rng.integers(0, 5, 24))
    tree = Product([Diagonal(rng.random(3)), Intervals(cells.groups, [0, 1, 3], [4, 2, 3]), cells.matrix()])
    for M in (cells.reduce(boxes), tree):
        np.testing.assert_allclose(explicit_sparse(M, 10_000).toarray(), M.dense(), rtol=1e-14)
    assert explicit_sparse(boxes, 22) is None
    assert explicit_sparse(Product([boxes, Identity(24)]), 22) is None
    assert explicit_sparse(Product([Ones(3, 1), Ones(1, 10)]), 20) is None  # factors 3 and 10, product 30
    assert explicit_sparse(Product([Fourier(8), Identity(8)]), 10_000) is None


def test_multiplicative_weights_on_atoms_equals_it_on_cells():
    """MWEM's multiplicative weights on the atoms of its measured queries (boxes, and a stack of rows as
    in the H2 augmentation) gives the estimate of multiplicative weights on every cell, from any start."""
    from ektelo_ng.operators.matrix import Dense, Intervals, Sparse, VStack
    from ektelo_ng.operators.workload import RandomRange
    from ektelo_ng.plans.mwem import SWEEPS, _multiplicative_weights_on_atoms

    rng = np.random.default_rng(8)
    boxes = RandomRange((6, 5), 4, seed=2).dense()
    history = [Measurement(Sparse(row[None]), rng.normal(20, 5, 1), 1.0) for row in boxes]
    history.append(Measurement(VStack([Dense(boxes[:1]), Intervals(30, [0, 12], [5, 29])]), rng.normal(30, 5, 3), 1.0))
    total = 150.0
    for x0 in (np.full(30, total / 30), rng.random(30) * (rng.random(30) > 0.2)):
        np.testing.assert_allclose(
            _multiplicative_weights_on_atoms(history, total, x0),
            multiplicative_weights(history, total, x0=x0, iterations=SWEEPS),
            rtol=1e-10,
        )


def test_multiplicative_weights_equals_the_update_rule_written_out():
    """x <- x exp(M^T (y - M x) / 2N), renormalized to N, measurement by measurement, pass by pass:
    the fast paths (single rows, CSR stacks, implicit matrices) change nothing."""
    from ektelo_ng.operators.matrix import Dense, Fourier, Intervals, VStack

    rng = np.random.default_rng(5)
    n, total = 16, 200.0
    measurements = [
        Measurement(Dense(rng.integers(0, 2, (1, n))), rng.normal(50, 5, 1), 1.0),
        Measurement(VStack([Dense(np.ones((1, n))), Intervals(n, [0, 4], [3, 9])]), rng.normal(60, 5, 3), 1.0),
        Measurement(Fourier(n, 3), rng.normal(10, 1, 3), 1.0),
    ]
    x0 = rng.random(n) * (rng.random(n) > 0.2)
    x = x0 * total / x0.sum()
    for _ in range(7):
        for m in measurements:
            A = m.matrix.dense()
            x = x * np.exp(A.T @ (m.answers - A @ x) / (2 * total))
            x *= total / x.sum()
    np.testing.assert_allclose(multiplicative_weights(measurements, total, x0=x0, iterations=7), x, rtol=1e-10)


@pytest.mark.parametrize("relative_std, accuracy", [(1e-2, 1e-9), (1e-4, 1e-7), (1e-6, 1e-2)])
def test_few_rows_over_many_cells_solve_as_dense_least_squares_even_with_a_heavy_known_total(relative_std, accuracy):
    """A few hundred rows over more cells than covariance.DENSE_LIMIT go by the rows' Gram, whose condition number
    is the square of the rows': a known total weighing up to 10^12 times more (MWEM's public total is 10^6) must not
    cost the other rows' information. The Gram solved it 25% off at 10^12; that case now goes to LSMR, as before
    the direct path, which reaches 1e-3 there."""
    rng = np.random.default_rng(0)
    n, m = 5000, 150
    A = (rng.random((m, n)) < 0.3).astype(float)
    x = rng.poisson(5, n).astype(float)
    y = A @ x + rng.normal(0, 10, m)
    measurements = [Measurement(Dense(A), y, 10.0), known_total(n, x.sum(), relative_std * 10)]
    B = np.vstack([A / 10.0, np.ones((1, n)) / (relative_std * 10)])
    reference = np.linalg.lstsq(B, np.concatenate([y / 10.0, [x.sum() / (relative_std * 10)]]), rcond=None)[0]
    np.testing.assert_allclose(least_squares(measurements, size=n), reference, rtol=0,
                               atol=accuracy * np.abs(reference).max())
