"""Named structured matrices that only clients need: prefix, suffix, width-w windows, b-ary hierarchies,
the Haar wavelet and weighted marginals.

Each subclasses a kernel class and keeps its fast products and closed forms here; its spec is the
kernel's general one (``IntervalsSpec``, ``SparseSpec``, or a ``VStackSpec`` of Kronecker and weighted
blocks), so the kernel rebuilds it as ``Intervals``, ``Sparse`` or ``VStack`` and computes its
sensitivity itself, without trusting any code in this module.

>>> import numpy as np
>>> Prefix(3) @ np.array([1.0, 2.0, 3.0])
array([1., 3., 6.])
>>> from ektelo_ng.operators.specs import to_spec
>>> to_spec(Prefix(3)).kind, Hierarchical(4).sensitivity("l1"), Haar(8).sensitivity("l1")
('intervals', 3.0, 4.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from .matrix import Identity, Intervals, Kronecker, Matrix, Sparse, Total, VStack
from .matrix.blocks import positive_int

__all__ = ["Haar", "Hierarchical", "MarginalStack", "Prefix", "Suffix", "WidthRange"]


class Prefix(Intervals):
    """Row i sums cells 0..i (the empirical CDF)."""

    def __init__(self, n: int):
        n = positive_int(n, "Prefix size")
        super().__init__(n, np.zeros(n, dtype=np.int64), np.arange(n))

    def _matmat(self, X):
        return np.cumsum(X, axis=0)

    def _rmatmat(self, Y):
        return np.cumsum(Y[::-1], axis=0)[::-1]

    @property
    def T(self) -> Matrix:
        return Suffix(self.n)

    def _coverage(self):
        return np.arange(self.n, 0, -1, dtype=np.float64)


class Suffix(Intervals):
    """Row i sums cells i..n-1."""

    def __init__(self, n: int):
        n = positive_int(n, "Suffix size")
        super().__init__(n, np.arange(n), np.full(n, n - 1, dtype=np.int64))

    def _matmat(self, X):
        return np.cumsum(X[::-1], axis=0)[::-1]

    def _rmatmat(self, Y):
        return np.cumsum(Y, axis=0)

    @property
    def T(self) -> Matrix:
        return Prefix(self.n)

    def _coverage(self):
        return np.arange(1, self.n + 1, dtype=np.float64)


class WidthRange(Intervals):
    """All windows of w consecutive cells: rows [i, i+w-1] for i = 0..n-w."""

    def __init__(self, n: int, width: int):
        n = positive_int(n, "WidthRange size")
        self.width = positive_int(width, "window width")
        if self.width > n:
            raise ValueError(f"window width {self.width} exceeds the domain size {n}")
        lo = np.arange(n - self.width + 1)
        super().__init__(n, lo, lo + self.width - 1)


class Hierarchical(Intervals):
    """The nodes of a b-ary tree of intervals over [0, n), level by level, leaves included.

    ``Hierarchical(n, 2)`` is H2; HB excludes the root (``include_root=False``).
    A node of size s splits into min(b, s) nearly equal children.
    """

    def __init__(self, n: int, branching: int = 2, include_root: bool = True):
        n = positive_int(n, "Hierarchical size")
        self.branching = positive_int(branching, "branching factor")
        if self.branching < 2:
            raise ValueError(f"branching factor must be at least 2, got {self.branching}")
        self.include_root = bool(include_root)
        lo, hi = _tree_intervals(n, self.branching)
        if not self.include_root:
            if n == 1:
                raise ValueError("a tree over one cell has only its root")
            lo, hi = lo[1:], hi[1:]
        super().__init__(n, lo, hi)


def _tree_intervals(n: int, branching: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = [np.array([0])], [np.array([n - 1])]
    level_lo, level_hi = lo[0], hi[0]
    while True:
        sizes = level_hi - level_lo + 1
        split = sizes > 1
        if not split.any():
            break
        next_lo, next_hi = [], []
        for a, size in zip(level_lo[split], sizes[split]):
            parts = min(branching, int(size))
            cuts = a + (np.arange(parts + 1) * int(size)) // parts
            next_lo.append(cuts[:-1])
            next_hi.append(cuts[1:] - 1)
        level_lo, level_hi = np.concatenate(next_lo), np.concatenate(next_hi)
        lo.append(level_lo)
        hi.append(level_hi)
    return np.concatenate(lo), np.concatenate(hi)


class Haar(Sparse):
    """The (unnormalized) Haar wavelet basis of size n = 2^k: the total, then +1/-1 half-block contrasts.

    Rows are mutually orthogonal, every column has L1 norm log2(n) + 1 (Privelet).
    """

    def __init__(self, n: int):
        n = positive_int(n, "Haar size")
        if n & (n - 1):
            raise ValueError(f"the Haar wavelet needs a power-of-two size, got {n}")
        self.n = n
        rows, cols, vals = [np.zeros(n, dtype=np.int64)], [np.arange(n)], [np.ones(n)]
        row, block = 1, n
        while block > 1:
            half = block // 2
            starts = np.arange(0, n, block)
            cells = starts[:, None] + np.arange(block)[None, :]
            rows.append(np.repeat(np.arange(row, row + starts.size), block))
            cols.append(cells.ravel())
            vals.append(np.tile(np.r_[np.ones(half), -np.ones(half)], starts.size))
            row += starts.size
            block = half
        matrix = sp.csr_array(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
        )
        super().__init__(matrix)


class MarginalStack(VStack):
    """A weighted union of marginals: for each attribute subset a, w_a * kron_i (I if i in a else Total).

    ``weights`` maps subsets (tuples of attribute positions) to weights, or is an iterable of
    subsets (weight 1). The empty subset is the total count.
    """

    def __init__(self, sizes: Sequence[int], weights: Mapping[Iterable[int], float] | Iterable[Iterable[int]]):
        self.sizes = tuple(int(s) for s in sizes)
        if not self.sizes or min(self.sizes) < 1:
            raise ValueError(f"marginal attribute sizes must be positive, got {list(sizes)}")
        items = weights.items() if isinstance(weights, Mapping) else ((s, 1.0) for s in weights)
        table: dict[tuple[int, ...], float] = {}
        for subset, weight in items:
            key = tuple(sorted(int(i) for i in subset))
            if len(set(key)) != len(key) or any(not 0 <= i < len(self.sizes) for i in key):
                raise ValueError(f"marginal {tuple(subset)} is not a set of attribute positions 0..{len(self.sizes) - 1}")
            if key in table:
                raise ValueError(f"marginal {key} listed twice")
            weight = float(weight)
            if not math.isfinite(weight):
                raise ValueError(f"marginal weight must be finite, got {weight}")
            table[key] = weight
        if not table:
            raise ValueError("give at least one marginal")
        self.weights = table
        blocks = []
        for subset, weight in table.items():
            block = marginalizer(self.sizes, subset)
            blocks.append(block if weight == 1.0 else block * weight)
        super().__init__(blocks)

    @property
    def subsets(self) -> list[tuple[int, ...]]:
        return list(self.weights)


def marginalizer(sizes: Sequence[int], subset: Iterable[int]) -> Kronecker:
    """The matrix taking a data vector over ``sizes`` to its marginal on the positions ``subset`` (cells in C order,
    axes in domain order)."""
    keep = set(subset)
    return Kronecker([Identity(n) if i in keep else Total(n) for i, n in enumerate(sizes)])


def as_matrix(matrix) -> Matrix:
    """A Matrix as it is, or the matrix of a strategy (anything with a ``.matrix``): where a strategy
    matrix is expected, the LinearStrategy a selector returned will do."""
    if isinstance(matrix, Matrix):
        return matrix
    inner = getattr(matrix, "matrix", None)
    if isinstance(inner, Matrix):
        return inner
    raise TypeError(f"expected a kernel Matrix or a strategy with a .matrix, got {type(matrix).__name__}")
