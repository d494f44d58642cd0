"""Partition selection: valid partitions, the P / P^+ algebra, lossless workload reduction,
the Hilbert order and AHP's greedy clustering, against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ektelo_ng.operators.matrix import AllRange, Dense, Identity, Kronecker, Total, VStack
from ektelo_ng.operators.matrices import MarginalStack, Prefix
from ektelo_ng.operators import partition
from ektelo_ng.operators.partition import Partition
from ektelo_ng.operators.workload import RandomRange


def test_labels_are_canonical_and_validated():
    p = Partition(np.array([5, 5, 2, 7, 2]))
    assert p.labels.tolist() == [0, 0, 1, 2, 1]
    assert p.groups == 3 and p.sizes.tolist() == [2, 2, 1]
    assert p == Partition(np.array([1, 1, 0, 9, 0])) and hash(p) == hash(Partition(np.array([1, 1, 0, 9, 0])))
    with pytest.raises(ValueError):
        p.labels[0] = 1  # read-only
    for bad in (np.array([]), np.array([0.5, 1.0]), np.zeros((2, 2), dtype=int)):
        with pytest.raises(ValueError):
            Partition(bad)


def test_matrix_expand_reduce_algebra():
    p = Partition(np.array([3, 1, 3, 3, 0, 1]))
    P = p.matrix().dense()
    assert np.array_equal(P.sum(axis=0), np.ones(6))  # every cell in exactly one group
    assert np.allclose(p.expand().dense(), np.linalg.pinv(P))
    assert np.allclose(P @ p.expand().dense(), np.eye(p.groups))
    W = Prefix(6)
    assert np.allclose(p.reduce(W).dense(), W.dense() @ np.linalg.pinv(P))
    stacked = np.vstack([p.selection(g).dense() for g in range(p.groups)])
    assert np.array_equal(np.sort(stacked.argmax(axis=1)), np.arange(6))  # a permutation of the cells
    assert p.selection(0).dense().argmax(axis=1).tolist() == [0, 2, 3]
    with pytest.raises(ValueError):
        p.selection(3)


def test_representatives_reduce_a_workload_constant_on_groups_exactly():
    p = Partition(np.array([3, 1, 3, 3, 0, 1]))
    R = p.representatives().dense()
    assert R.shape == (6, 3) and R.argmax(axis=0).tolist() == [0, 1, 4]  # each group's first cell
    assert np.array_equal(R.sum(axis=0), np.ones(3))
    W = np.random.default_rng(2).random((4, 3)) @ p.matrix().dense()  # constant on every group
    assert np.array_equal(W @ R, W[:, [0, 1, 4]])
    assert np.allclose(W @ R, p.reduce(Dense(W)).dense(), rtol=1e-15)


def _brute_labels(shape, key):
    """Group cells by key(coordinates), numbering groups by first appearance (row-major)."""
    seen, labels = {}, []
    for coords in np.ndindex(*shape):
        labels.append(seen.setdefault(key(coords), len(seen)))
    return labels


def test_grid_stripe_marginal_brute_force():
    shape = (5, 7)
    assert partition.grid(shape, (2, 3)).labels.tolist() == _brute_labels(shape, lambda c: (c[0] // 2, c[1] // 3))
    assert partition.grid(shape, 2).groups == 3 * 4
    assert partition.stripe(shape, 0).labels.tolist() == _brute_labels(shape, lambda c: c[1])
    assert partition.stripe(shape, 1).labels.tolist() == _brute_labels(shape, lambda c: c[0])
    assert partition.marginal(shape, 0).labels.tolist() == _brute_labels(shape, lambda c: c[0])
    assert partition.marginal(shape, 1).labels.tolist() == _brute_labels(shape, lambda c: c[1])
    shape3 = (2, 3, 4)
    assert partition.stripe(shape3, 1).labels.tolist() == _brute_labels(shape3, lambda c: (c[0], c[2]))
    # reducing by the marginal partition gives the marginal
    x = np.arange(35.0)
    assert np.array_equal(partition.marginal(shape, 1).matrix() @ x, x.reshape(5, 7).sum(axis=0))
    with pytest.raises(ValueError):
        partition.stripe(shape, 2)


WORKLOADS = {
    "marginal": Kronecker([Identity(4), Total(5), Identity(3)]),
    "random-range": RandomRange(64, 6, seed=2),
    "random-range-2d": RandomRange((12, 10), 5, seed=1),
    "all-range": AllRange(16),
    "two-marginals": MarginalStack([3, 4, 5], [(0,), (2,)]),
    "weighted-dense": Dense(np.repeat(np.random.default_rng(0).normal(size=(4, 7)), [1, 3, 2, 1, 4, 2, 1], axis=1)),
    "union": VStack([Kronecker([Total(6), Identity(2)]), Kronecker([Identity(6), Total(2)]) * 0.5]),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_based_reduction_is_lossless_and_exact(name):
    W = WORKLOADS[name]
    p = partition.workload_based(W, seed=7)
    # the groups are exactly the sets of identical columns (brute force on the dense matrix)
    _, inverse = np.unique(W.dense().T, axis=0, return_inverse=True)
    assert p == Partition(inverse.ravel())
    reduced = p.reduce(W)
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.poisson(4.0, W.shape[1]).astype(float)
        assert np.allclose(W @ x, reduced @ (p.matrix() @ x), rtol=1e-12, atol=1e-9)
    assert partition.workload_based(W, seed=7) == p


def test_workload_based_reduction_sizes():
    assert partition.workload_based(Kronecker([Identity(4), Total(5)]), seed=0).groups == 4
    assert partition.workload_based(Identity(9), seed=0).groups == 9  # nothing to merge
    assert partition.workload_based(Total(9), seed=0).groups == 1


@pytest.mark.parametrize("side", [1, 2, 4, 8, 32])
def test_hilbert_order_is_a_path_through_every_cell(side):
    order = partition.hilbert_order(side)
    assert np.array_equal(np.sort(order), np.arange(side * side))
    rows, cols = np.divmod(order, side)
    assert np.all(np.abs(np.diff(rows)) + np.abs(np.diff(cols)) == 1)
    assert order[0] == 0
    if side > 1:  # the curve ends at a neighbouring corner of the start
        assert order[-1] in (side - 1, (side - 1) * side)
    if side == 2:
        assert order.tolist() == [0, 2, 3, 1]


def test_hilbert_order_rejects_other_sides():
    with pytest.raises(ValueError):
        partition.hilbert_order(6)


def _brute_ahp(values, eps2):
    """AHP's greedy clustering written out plainly: explicit segment costs and err*(j) by a loop."""
    noise = 2.0 / eps2**2
    order = np.argsort(values, kind="stable")
    v = values[order]

    def cost(segment):
        return float(((segment - segment.mean()) ** 2).sum()) + noise / segment.size

    def alone(j):  # least error of v[j] leading a cluster v[j..l], l scanned until the early stop
        floor = noise / (v.size - j + 1) ** 2
        bias, variance = 0.0, noise
        best = bias + variance
        for l in range(j + 1, v.size):
            length = l - j + 1
            grown_bias, grown_variance = (v[j] - v[j : l + 1].mean()) ** 2, noise / length**2
            if grown_bias - bias >= variance - floor:
                break
            bias, variance = grown_bias, grown_variance
            best = min(best, bias + variance)
        return best

    clusters, start = [], 0
    for j in range(1, v.size):
        if cost(v[start : j + 1]) >= cost(v[start:j]) + alone(j):
            clusters.append((start, j))
            start = j
    clusters.append((start, v.size))
    labels = np.empty(v.size, dtype=int)
    for k, (a, b) in enumerate(clusters):
        labels[order[a:b]] = k
    return labels


@pytest.mark.parametrize("seed", range(5))
def test_ahp_cluster_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.normal(0, 3, 40), rng.normal(100, 10, 30), rng.normal(1000, 50, 10)])
    values[rng.random(values.size) < 0.3] = 0.0  # thresholded cells
    rng.shuffle(values)
    eps2 = [0.05, 0.2, 1.0, 5.0, 0.5][seed]
    p = partition.ahp_cluster(values, eps2)
    assert p == Partition(_brute_ahp(values, eps2))


def test_ahp_cluster_long_scans_match_brute_force():
    # dense noisy plateaus under large noise: err*(j) scans past its first 64-cell window
    rng = np.random.default_rng(1)
    values = np.concatenate([np.zeros(100), rng.normal(500, 5, 300), rng.normal(2000, 30, 300)])
    rng.shuffle(values)
    assert partition.ahp_cluster(values, 0.05) == Partition(_brute_ahp(values, 0.05))


def test_ahp_cluster_small_example():
    # noise cost 2 / 0.1^2 = 200 per cluster: the zeros and 0.5 merge, 100 and 101 merge, 5000 alone
    p = partition.ahp_cluster([0, 0, 0, 100, 101, 5000, 0.5], 0.1)
    assert p.labels.tolist() == [0, 0, 0, 1, 1, 2, 0]
    assert partition.ahp_cluster([3.0] * 5, 1.0).groups == 1
    # noise 2: adding x to {0} costs x^2 / 2 - 1 = 2.5e-4 more, and x leading its run of 200 would
    # cost only 2 / 200^2 = 5e-5 (err* scans the whole run), so x starts a new cluster
    assert partition.ahp_cluster([0.0] + [math.sqrt(2.0005)] * 200, 1.0).groups == 2
