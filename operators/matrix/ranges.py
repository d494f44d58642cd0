"""Axis-aligned box queries (d-dimensional ranges): row k sums x[lo_k[0]..hi_k[0], ..., lo_k[d-1]..hi_k[d-1]]
(inclusive), by prefix sums and inclusion-exclusion over the 2^d corners: O(N + q 2^d)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from .base import Matrix


class Ranges(Matrix):
    """Box (multi-dimensional range) queries on a row-major domain of the given shape."""

    binary = True

    def __init__(self, shape: Sequence[int], lo, hi):
        self.domain_shape = tuple(int(s) for s in shape)
        if not self.domain_shape or min(self.domain_shape) < 1:
            raise ValueError(f"range queries need a domain shape of positive sizes, got {list(shape)}")
        d = len(self.domain_shape)
        lo = np.asarray(lo, dtype=np.int64).reshape(-1, d)
        hi = np.asarray(hi, dtype=np.int64).reshape(-1, d)
        if lo.shape != hi.shape or lo.shape[0] == 0:
            raise ValueError("range queries need equally many lower and upper corners (at least one)")
        upper = np.array(self.domain_shape) - 1
        if lo.min() < 0 or np.any(hi > upper) or np.any(lo > hi):
            raise ValueError(f"every range needs 0 <= lo <= hi <= {tuple(upper)} in each dimension")
        self.lo, self.hi = lo, hi
        self.shape = (lo.shape[0], math.prod(self.domain_shape))

    @cached_property
    def _corners(self) -> list[tuple[np.ndarray, float]]:
        """(flat index into the zero-padded prefix-sum array, sign) for each of the 2^d corners."""
        padded = tuple(s + 1 for s in self.domain_shape)
        d = len(self.domain_shape)
        corners = []
        for choice in itertools.product((0, 1), repeat=d):
            coords = np.where(np.array(choice, dtype=bool), self.hi + 1, self.lo)
            sign = -1.0 if (d - sum(choice)) % 2 else 1.0
            corners.append((np.ravel_multi_index(tuple(coords.T), padded), sign))
        return corners

    def _matmat(self, X):
        k = X.shape[1]
        sums = np.zeros(tuple(s + 1 for s in self.domain_shape) + (k,))
        inner = X.reshape(self.domain_shape + (k,))
        for axis in range(len(self.domain_shape)):
            inner = np.cumsum(inner, axis=axis)
        sums[tuple(slice(1, None) for _ in self.domain_shape)] = inner
        flat = sums.reshape(-1, k)
        return sum(sign * flat[index] for index, sign in self._corners)

    def _rmatmat(self, Y):
        k = Y.shape[1]
        padded = tuple(s + 1 for s in self.domain_shape)
        scatter = np.zeros((math.prod(padded), k))
        for index, sign in self._corners:
            np.add.at(scatter, index, sign * Y)
        out = scatter.reshape(padded + (k,))[tuple(slice(1, None) for _ in self.domain_shape)]
        for axis in range(len(self.domain_shape)):
            out = np.flip(np.cumsum(np.flip(out, axis=axis), axis=axis), axis=axis)
        return out.reshape(-1, k)
