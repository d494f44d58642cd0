"""Workload builders: shapes, DPBench random ranges, marginal families against explicit constructions."""

from __future__ import annotations

import numpy as np
import pytest

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.operators import workload as wl


def test_random_range_1d_is_reproducible_and_in_bounds():
    W = wl.RandomRange(100, 50, seed=3)
    assert W.shape == (50, 100)
    np.testing.assert_array_equal(W.dense(), wl.RandomRange(100, 50, seed=3).dense())
    assert not np.array_equal(W.dense(), wl.RandomRange(100, 50, seed=4).dense())
    rows = W.dense()
    # every row is one contiguous run of ones
    assert all(np.count_nonzero(np.diff(np.r_[0, r, 0])) == 2 for r in rows)


def test_random_range_2d_rows_are_boxes():
    W = wl.RandomRange((6, 5), 20, seed=1)
    rows = W.dense().reshape(20, 6, 5)
    for box in rows:
        i, j = np.nonzero(box)
        assert box[i.min() : i.max() + 1, j.min() : j.max() + 1].all()
        assert box.sum() == (i.max() - i.min() + 1) * (j.max() - j.min() + 1)


def test_marginals_by_name_and_all_kway():
    d = Domain.from_sizes([2, 3, 4], names=["a", "b", "c"])
    M = wl.Marginals(d, [["a", "c"], ["b"]])
    x = np.arange(24.0)
    cube = x.reshape(2, 3, 4)
    np.testing.assert_allclose(M @ x, np.r_[cube.sum(axis=1).ravel(), cube.sum(axis=(0, 2))])
    assert wl.AllKway(d, 2).shape == (2 * 3 + 2 * 4 + 3 * 4, 24)
    assert wl.AllKway([2, 3], 0).shape == (1, 6)
    with pytest.raises(ValueError, match="between 0"):
        wl.AllKway(d, 4)


def test_prefix_marginals_put_prefix_blocks_on_numeric_attributes():
    d = Domain.from_sizes([3, 4], names=["sex", "age"])
    W = wl.prefix_marginals(d, 1, numeric=["age"])
    x = np.arange(12.0)
    cube = x.reshape(3, 4)
    np.testing.assert_allclose(W @ x, np.r_[cube.sum(axis=1), np.cumsum(cube.sum(axis=0))])
    R = wl.range_marginals(d, 2, numeric=["age"])
    assert R.shape == (3 * 10, 12)


def test_unknown_names_and_blocks_are_explained():
    d = Domain.from_sizes([2, 2], names=["a", "b"])
    with pytest.raises(ValueError, match="unknown attribute 'z'"):
        wl.Marginals(d, [["z"]])
    with pytest.raises(ValueError, match="unknown block kind"):
        wl.marginal_queries(d, [["a"]], {"a": "cdf"})
    with pytest.raises(ValueError, match="positive number"):
        wl.RandomRange(10, 0)
