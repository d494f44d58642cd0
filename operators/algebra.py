"""Client-side algebra over kernel matrices: Grams A^T A, pseudo-inverses A^+, traces, sums, rows, row subsets.

The kernel only multiplies matrices with data and computes their sensitivities; strategy
optimizers, error formulas and inference also need Grams, pseudo-inverses (least-squares
reconstruction), traces, squared Frobenius norms, sums of matrices and selected rows. That is public
post-processing, so it lives here, outside the audited kernel: a wrong shortcut here costs
accuracy, never privacy. Each operation is a ``functools.singledispatch`` function with a generic
fallback and one registration per class that has structure; client classes register their own the
same way. A ``Sum`` is never sent to the kernel, which takes no sums (it has no spec).

Interval families (prefix, suffix, all ranges, width-w ranges, hierarchies, any list of intervals)
have Grams with closed forms (``G_ij`` = number of rows covering both i and j) and fast products.

>>> from ektelo_ng.operators.matrix import AllRange
>>> gram(AllRange(3)).dense()[0]
array([3., 2., 1.])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import singledispatch

import numpy as np
import scipy.sparse as sp

from .matrix import (
    AllRange,
    Dense,
    Diagonal,
    Fourier,
    HStack,
    Identity,
    Intervals,
    Kronecker,
    Matrix,
    Ones,
    Product,
    Ranges,
    Sparse,
    Transpose,
    VStack,
    Weighted,
)
from .matrices import Haar, Prefix, Suffix, WidthRange
from .specs import to_spec
from .matrix.base import BLOCK_ENTRIES, unit_columns

# ---- sums ---------------------------------------------------------------------------------


class Sum(Matrix):
    """A_1 + A_2 + ... + A_k (same shape)."""

    def __init__(self, terms: Sequence[Matrix]):
        terms = list(terms)
        if not terms:
            raise ValueError("a sum needs at least one term")
        shapes = {t.shape for t in terms}
        if len(shapes) != 1:
            raise ValueError(f"cannot add matrices of shapes {sorted(shapes)}")
        self.terms = terms
        self.shape = terms[0].shape

    def _matmat(self, X):
        return sum(t._matmat(X) for t in self.terms)

    def _rmatmat(self, Y):
        return sum(t._rmatmat(Y) for t in self.terms)

    @property
    def T(self) -> Matrix:
        return Sum([t.T for t in self.terms])

    def dense(self) -> np.ndarray:
        return sum(t.dense() for t in self.terms)


@to_spec.register(Sum)
def _(A: Sum):
    raise TypeError(
        "a Sum of matrices has no spec: the kernel takes no sums (client-side algebra only); "
        "measure the terms, e.g. stacked in a VStack, instead"
    )


# ---- Gram matrices ------------------------------------------------------------------------


@singledispatch
def gram(A: Matrix) -> Matrix:
    """A.T @ A, as structured as the class allows (the fallback is the kernel's implicit product)."""
    return A.gram()


@gram.register
def _(A: Weighted) -> Matrix:
    return Weighted(gram(A.base), A.weight**2)


@gram.register
def _(A: Identity) -> Matrix:
    return A


@gram.register
def _(A: Ones) -> Matrix:
    return Ones(A.shape[1], A.shape[1]) * float(A.shape[0])


@gram.register
def _(A: Diagonal) -> Matrix:
    return Diagonal(A.values**2)


@gram.register
def _(A: Intervals) -> Matrix:
    return IntervalGram(A)


@gram.register
def _(A: Fourier) -> Matrix:
    return Identity(A.n) if A.k == A.n else Product([A.T, A])


@gram.register
def _(A: Kronecker) -> Matrix:
    return Kronecker([gram(f) for f in A.factors])


@gram.register
def _(A: VStack) -> Matrix:
    grams = [gram(b) for b in A.blocks]
    return grams[0] if len(grams) == 1 else Sum(grams)


@gram.register
def _(A: Dense) -> Matrix:
    return Dense(A.array.T @ A.array)


@gram.register
def _(A: Sparse) -> Matrix:
    return Sparse(A.matrix.T @ A.matrix)


class IntervalGram(Matrix):
    """A.T @ A of an interval matrix: symmetric, with the source's fast product and closed form."""

    def __init__(self, source: Intervals):
        self.source = source
        self.shape = (source.n, source.n)

    def _matmat(self, X):
        return _interval_gram_matmat(self.source, X)

    _rmatmat = _matmat

    @property
    def T(self) -> Matrix:
        return self

    def dense(self) -> np.ndarray:
        return _interval_gram_dense(self.source)


@to_spec.register(IntervalGram)
def _(A: IntervalGram):
    """The kernel takes a Gram as the product it is."""
    return to_spec(Product([A.source.T, A.source]))


@singledispatch
def _interval_gram_matmat(A: Intervals, X: np.ndarray) -> np.ndarray:
    return A._rmatmat(A._matmat(X))


@_interval_gram_matmat.register
def _(A: AllRange, X: np.ndarray) -> np.ndarray:
    # G_ij = (min(i,j)+1)(n - max(i,j)): two forward running sums, O(n k), no reversed copies.
    n = A.n
    j = np.arange(n, dtype=np.float64)[:, None]
    below = np.cumsum((j + 1) * X, axis=0)  # sum_{j <= i} (j+1) x_j
    above = np.cumsum((n - j) * X, axis=0)
    above -= above[-1]  # -(sum_{j > i} (n-j) x_j)
    above *= -(j + 1)
    below *= n - j
    below += above
    return below


@singledispatch
def _interval_gram_dense(A: Intervals) -> np.ndarray:
    D = A.dense()
    return D.T @ D


@_interval_gram_dense.register
def _(A: Prefix) -> np.ndarray:
    return (A.n - _index_grid(A.n)[1]).astype(np.float64)


@_interval_gram_dense.register
def _(A: Suffix) -> np.ndarray:
    return (_index_grid(A.n)[0] + 1).astype(np.float64)


@_interval_gram_dense.register
def _(A: AllRange) -> np.ndarray:
    low, high = _index_grid(A.n)
    return ((low + 1) * (A.n - high)).astype(np.float64)


@_interval_gram_dense.register
def _(A: WidthRange) -> np.ndarray:
    low, high = _index_grid(A.n)
    count = np.minimum(low, A.n - A.width) - np.maximum(0, high - A.width + 1) + 1
    return np.maximum(count, 0).astype(np.float64)


def _index_grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n)
    return np.minimum.outer(i, i), np.maximum.outer(i, i)


# ---- pseudo-inverses ----------------------------------------------------------------------


@singledispatch
def pinv(A: Matrix) -> Matrix:
    """The Moore-Penrose pseudo-inverse; generic fallback materializes (small matrices only)."""
    m, n = A.shape
    if m * n > BLOCK_ENTRIES:
        raise NotImplementedError(
            f"{type(A).__name__} of shape {A.shape} has no structured pseudo-inverse and is too "
            "large to invert densely; solve least squares iteratively (scipy LSMR) instead"
        )
    return Dense(np.linalg.pinv(A.dense()))


@pinv.register
def _(A: Transpose) -> Matrix:
    return pinv(A.base).T


@pinv.register
def _(A: Weighted) -> Matrix:
    if A.weight == 0.0:
        return Ones(*A.shape[::-1]) * 0.0
    return Weighted(pinv(A.base), 1.0 / A.weight)


@pinv.register
def _(A: Identity) -> Matrix:
    return A


@pinv.register
def _(A: Ones) -> Matrix:
    m, n = A.shape
    return Ones(n, m) * (1.0 / (m * n))


@pinv.register
def _(A: Diagonal) -> Matrix:
    safe = np.where(A.values != 0, A.values, 1.0)
    return Diagonal(np.where(A.values != 0, 1.0 / safe, 0.0))


@pinv.register
def _(A: Prefix) -> Matrix:
    difference = sp.diags([np.ones(A.n), -np.ones(A.n - 1)], [0, -1], format="csr")
    return Sparse(difference)


@pinv.register
def _(A: Suffix) -> Matrix:
    difference = sp.diags([np.ones(A.n), -np.ones(A.n - 1)], [0, 1], format="csr")
    return Sparse(difference)


@pinv.register
def _(A: Haar) -> Matrix:
    row_norms = np.asarray(A.matrix.multiply(A.matrix).sum(axis=1)).ravel()
    return Sparse(A.matrix.T @ sp.diags(1.0 / row_norms))


@pinv.register
def _(A: Fourier) -> Matrix:
    return A.T  # orthonormal rows


@pinv.register
def _(A: Dense) -> Matrix:
    return Dense(np.linalg.pinv(A.array))


@pinv.register
def _(A: Kronecker) -> Matrix:
    return Kronecker([pinv(f) for f in A.factors])


# ---- traces and squared Frobenius norms ---------------------------------------------------


@singledispatch
def trace(A: Matrix) -> float:
    """Trace of a square matrix."""
    n = _square(A)
    total = 0.0
    step = max(1, BLOCK_ENTRIES // max(n, 1))
    for start in range(0, n, step):
        stop = min(n, start + step)
        block = A._matmat(unit_columns(n, start, stop))
        total += float(np.trace(block[start:stop]))
    return total


def _square(A: Matrix) -> int:
    m, n = A.shape
    if m != n:
        raise ValueError(f"trace needs a square matrix, got shape {A.shape}")
    return n


@trace.register
def _(A: Weighted) -> float:
    return A.weight * trace(A.base)


@trace.register
def _(A: Sum) -> float:
    return float(sum(trace(t) for t in A.terms))


@trace.register
def _(A: Identity) -> float:
    return float(A.n)


@trace.register
def _(A: Ones) -> float:
    return float(_square(A))


@trace.register
def _(A: Diagonal) -> float:
    return float(A.values.sum())


@trace.register
def _(A: IntervalGram) -> float:
    return frobenius_squared(A.source)


@trace.register
def _(A: Kronecker) -> float:
    return math.prod(trace(f) for f in A.factors)


@trace.register
def _(A: Dense) -> float:
    _square(A)
    return float(np.trace(A.array))


@trace.register
def _(A: Sparse) -> float:
    _square(A)
    return float(A.matrix.diagonal().sum())


@singledispatch
def frobenius_squared(A: Matrix) -> float:
    """Sum of squared entries (= trace of the Gram)."""
    return float(np.sum(A.column_norms("l2") ** 2))


@frobenius_squared.register
def _(A: Weighted) -> float:
    return A.weight**2 * frobenius_squared(A.base)


@frobenius_squared.register
def _(A: Intervals) -> float:
    return float(A.column_norms("l1").sum())  # a 0/1 matrix's column L1 norms count the rows covering each cell


@frobenius_squared.register
def _(A: Kronecker) -> float:
    return math.prod(frobenius_squared(f) for f in A.factors)


@frobenius_squared.register(VStack)
@frobenius_squared.register(HStack)
def _(A: VStack | HStack) -> float:
    return float(sum(frobenius_squared(b) for b in A.blocks))


@singledispatch
def rows(A: Matrix, index) -> np.ndarray:
    """Selected rows of A as a dense 2-D array (one product with unit vectors)."""
    index = np.atleast_1d(np.asarray(index, dtype=np.int64))
    m = A.shape[0]
    if index.size and (index.min() < -m or index.max() >= m):
        raise IndexError(f"row index out of range for a matrix with {m} rows")
    units = np.zeros((m, index.size))
    units[index % m, np.arange(index.size)] = 1.0
    return (A.T @ units).T


@rows.register
def _(A: Dense, index) -> np.ndarray:
    return A.array[np.atleast_1d(index)]


@rows.register
def _(A: Sparse, index) -> np.ndarray:
    return A.matrix[np.atleast_1d(index)].toarray()


@singledispatch
def row_subset(A: Matrix, keep) -> Matrix:
    """The rows ``keep`` of A (in that order) as a matrix the kernel takes: A's own structure where it has
    one (intervals, boxes, dense, sparse), else a CSR array of the rows. MWEM chooses among the workload
    queries it has not measured yet; a product with a row selector would leave the kernel a loose
    sensitivity bound (about n for Prefix(n) instead of 1)."""
    return Sparse(sp.csr_array(rows(A, keep)))


@row_subset.register
def _(A: Intervals, keep) -> Matrix:
    keep = np.atleast_1d(keep)
    return Intervals(A.n, A.lo[keep], A.hi[keep])


@row_subset.register
def _(A: Ranges, keep) -> Matrix:
    keep = np.atleast_1d(keep)
    return Ranges(A.domain_shape, A.lo[keep], A.hi[keep])


@row_subset.register
def _(A: Dense, keep) -> Matrix:
    return Dense(A.array[np.atleast_1d(keep)])


@row_subset.register
def _(A: Sparse, keep) -> Matrix:
    return Sparse(A.matrix[np.atleast_1d(keep)])
