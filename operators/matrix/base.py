"""The implicit matrix base class (scipy LinearOperator's shape, plus column norms) and the generic compositions:
product, scalar weight, transpose. Materializing is an explicit call (``dense()``); specs are ``operators.matrix.spec``."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal

import numpy as np

Norm = Literal["l1", "l2"]

# Entries materialized at once by generic (structure-free) fallbacks.
BLOCK_ENTRIES = 1 << 24
_MATERIALIZED_LIMIT = 1 << 30  # entries computed for generic column norms: seconds at most


class Matrix(ABC):
    """An implicit real matrix. Subclasses implement ``_matmat`` and ``_rmatmat``."""

    __array_ufunc__ = None  # numpy refuses ufuncs (np.abs(A) raises TypeError) and sends x @ A to __rmatmul__
    dtype = np.dtype(np.float64)
    shape: tuple[int, int]
    #: True when every entry is 0 or 1, so that |A| = A and A*A = A elementwise.
    binary: bool = False
    #: The diagonal w of a diagonal matrix diag(w), None for any other.
    row_weights: np.ndarray | None = None

    # ---- products -------------------------------------------------------------------
    @abstractmethod
    def _matmat(self, X: np.ndarray) -> np.ndarray:
        """A @ X for a 2-D array X with shape (n, k)."""

    @abstractmethod
    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        """A.T @ Y for a 2-D array Y with shape (m, k)."""

    def __matmul__(self, other):
        return Product([self, other]) if isinstance(other, Matrix) else _apply(self._matmat, self.shape, other, "A @ x")

    def __rmatmul__(self, other):
        # x @ A = (A.T @ x.T).T
        x = np.asarray(other, dtype=np.float64)
        if x.ndim == 1:
            return _apply(self._rmatmat, self.shape[::-1], x, "x @ A")
        return _apply(self._rmatmat, self.shape[::-1], x.T, "X @ A").T

    # ---- algebra ----------------------------------------------------------------------
    @property
    def T(self) -> Matrix:
        return Transpose(self)

    def __mul__(self, weight) -> Matrix:
        if isinstance(weight, Matrix) or np.ndim(weight) != 0:
            raise TypeError("Matrix * c takes a scalar c; use diagonal(w) @ A for per-row weights")
        return Weighted(self, float(weight))

    __rmul__ = __mul__

    def gram(self) -> Matrix:
        """A.T @ A as an implicit product; ``operators.algebra.gram`` has the closed forms."""
        return Product([self.T, self])

    # ---- norms ------------------------------------------------------------------------
    def column_norms(self, norm: Norm = "l1") -> np.ndarray:
        """L1 or L2 norm of every column, without materializing when structure allows."""
        _check_norm(norm)
        return self._column_norms(norm)

    def _column_norms(self, norm: Norm) -> np.ndarray:  # each class's own (the norm is checked)
        if self.binary:
            counts = self.T @ np.ones(self.shape[0])
            return counts if norm == "l1" else np.sqrt(counts)
        return _column_norms_blockwise(self, norm)

    def sensitivity(self, norm: Norm = "l1") -> float:
        """Max column norm: how far one record (a unit change of one cell) moves A @ x."""
        norms = self.column_norms(norm)
        return float(norms.max()) if norms.size else 0.0

    # ---- materialization --------------------------------------------------------------
    def dense(self) -> np.ndarray:
        """All entries as a numpy array (explicit, may be large)."""
        return self._matmat(np.eye(self.shape[1]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.shape}"

# ---- generic compositions -------------------------------------------------------------


class Transpose(Matrix):
    """The transpose of a matrix that has no structured transpose of its own."""

    def __init__(self, base: Matrix):
        self.base = base
        self.shape = base.shape[::-1]
        self.binary = base.binary

    def _matmat(self, X):
        return self.base._rmatmat(X)

    def _rmatmat(self, Y):
        return self.base._matmat(Y)

    @property
    def T(self) -> Matrix:
        return self.base


class Weighted(Matrix):
    """c * A for a scalar c."""

    def __init__(self, base: Matrix, weight: float):
        weight = float(weight)
        if not math.isfinite(weight):
            raise ValueError(f"matrix weight must be finite, got {weight}")
        self.base, self.weight = base, weight
        self.shape = base.shape

    def _matmat(self, X):
        return self.weight * self.base._matmat(X)

    def _rmatmat(self, Y):
        return self.weight * self.base._rmatmat(Y)

    @property
    def T(self) -> Matrix:
        return Weighted(self.base.T, self.weight)

    def __mul__(self, weight) -> Matrix:
        scalar = not isinstance(weight, Matrix) and np.ndim(weight) == 0
        return Weighted(self.base, self.weight * float(weight)) if scalar else super().__mul__(weight)

    __rmul__ = __mul__

    def _column_norms(self, norm: Norm) -> np.ndarray:
        return abs(self.weight) * self.base.column_norms(norm)

    def sensitivity(self, norm: Norm = "l1") -> float:
        return abs(self.weight) * self.base.sensitivity(norm)

    def dense(self) -> np.ndarray:
        return self.weight * self.base.dense()


class Product(Matrix):
    """A_1 @ A_2 @ ... @ A_k, applied right to left without forming the product."""

    def __init__(self, factors: Sequence[Matrix]):
        flat: list[Matrix] = []
        for f in factors:
            flat.extend(f.factors if isinstance(f, Product) else [f])
        if not flat:
            raise ValueError("a product needs at least one factor")
        for left, right in zip(flat, flat[1:]):
            if left.shape[1] != right.shape[0]:
                raise ValueError(f"cannot multiply shapes {left.shape} and {right.shape}")
        self.factors = flat
        self.shape = (flat[0].shape[0], flat[-1].shape[1])

    def _matmat(self, X):
        for f in reversed(self.factors):
            X = f._matmat(X)
        return X

    def _rmatmat(self, Y):
        for f in self.factors:
            Y = f._rmatmat(Y)
        return Y

    @property
    def T(self) -> Matrix:
        return Product([f.T for f in reversed(self.factors)])

    def _column_norms(self, norm: Norm) -> np.ndarray:
        # diag(w) @ B with B 0/1 (weighted intervals): |B| = B * B = B, so no materialization is needed.
        if len(self.factors) == 2 and self.factors[0].row_weights is not None and self.factors[1].binary:
            w, B = self.factors[0].row_weights, self.factors[1]
            return B.T @ np.abs(w) if norm == "l1" else np.sqrt(np.maximum(B.T @ (w * w), 0.0))  # rounding: > -0
        return _column_norms_blockwise(self, norm)

    def dense(self) -> np.ndarray:
        if len(self.factors) == 1:
            return self.factors[0].dense()
        return self._matmat(np.eye(self.shape[1])) if self.shape[1] <= self.shape[0] else self.T.dense().T

# ---- helpers ----------------------------------------------------------------------------


def _check_norm(norm: str) -> None:
    if norm not in ("l1", "l2"):
        raise ValueError(f"norm must be 'l1' or 'l2', got {norm!r}")


def _apply(kernel_fn, shape: tuple[int, int], x, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    rows, cols = shape
    if x.ndim not in (1, 2) or x.shape[0] != cols:
        raise ValueError(f"{what}: matrix has shape {shape}, operand has shape {x.shape}")
    return kernel_fn(x.reshape(cols, 1)).reshape(rows) if x.ndim == 1 else kernel_fn(x)


def unit_columns(n: int, start: int, stop: int) -> np.ndarray:
    units = np.zeros((n, stop - start))
    units[np.arange(start, stop), np.arange(stop - start)] = 1.0
    return units


def _column_norms_blockwise(A: Matrix, norm: Norm) -> np.ndarray:
    """Exact column norms by materializing a block of columns at a time."""
    m, n = A.shape
    if m * n > _MATERIALIZED_LIMIT:
        raise ValueError(f"the column norms of this {m} x {n} {type(A).__name__} would take materializing {m * n} "
                         f"entries, over {_MATERIALIZED_LIMIT}: send a structured matrix (Kronecker, stack, ...)")
    out = np.empty(n)
    step = max(1, BLOCK_ENTRIES // max(m, n, 1))
    for start in range(0, n, step):
        stop = min(n, start + step)
        block = A._matmat(unit_columns(n, start, stop))
        out[start:stop] = np.abs(block).sum(axis=0) if norm == "l1" else np.sqrt((block * block).sum(axis=0))
    return out
