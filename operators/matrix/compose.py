"""Structured compositions: Kronecker products, vertical and horizontal stacks. Vectors are flattened row-major,
so ``(B kron C) @ flat(X) = flat(B @ X @ C.T)``: one factor at a time, never forming the product."""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from functools import cached_property, reduce

import numpy as np

from .base import Matrix, Norm
from ...kernel.matrix.threads import single_threaded_blas


#: Factors with at most this many entries are applied as dense blocks.
SMALL_FACTOR_ENTRIES = 1 << 16


class Kronecker(Matrix):
    """A_1 kron A_2 kron ... kron A_d."""

    def __init__(self, factors: Sequence[Matrix]):
        factors = list(factors)
        if not factors:
            raise ValueError("a Kronecker product needs at least one factor")
        if not all(isinstance(f, Matrix) for f in factors):
            raise TypeError("Kronecker factors must be Matrix objects")
        self.factors = factors
        self.shape = (math.prod(f.shape[0] for f in factors), math.prod(f.shape[1] for f in factors))
        self.binary = all(f.binary for f in factors)

    @cached_property
    def _small_dense(self) -> list[np.ndarray | None]:
        """Dense copies of small factors: one GEMM per factor beats any implicit product there."""
        return [f.dense() if f.shape[0] * f.shape[1] <= SMALL_FACTOR_ENTRIES else None for f in self.factors]

    def _apply(self, X: np.ndarray, transpose: bool) -> np.ndarray:
        # Index order of the flat work array cycles from (c, i_1..i_d) to (j_1..j_d, c).
        k = X.shape[1]
        Z = np.ascontiguousarray(X.T).reshape(-1)
        outer, inner = (1, 0) if transpose else (0, 1)
        size, peak = Z.size, Z.size
        for f in reversed(self.factors):
            size = size // f.shape[inner] * f.shape[outer]
            peak = max(peak, size)
        # Two buffers used in turn: new memory is touched once, not once per factor.
        buffers = [np.empty(peak), np.empty(peak)]
        with single_threaded_blas() if peak >= 1 << 20 else nullcontext():  # skinny GEMMs are memory-bound
            for step, (f, dense) in enumerate(zip(reversed(self.factors), reversed(self._small_dense))):
                view = Z.reshape(-1, f.shape[inner]).T
                if dense is None:
                    Z = (f._rmatmat(view) if transpose else f._matmat(view)).reshape(-1)
                    continue
                out = buffers[step % 2][: f.shape[outer] * view.shape[1]].reshape(f.shape[outer], view.shape[1])
                np.matmul(dense.T if transpose else dense, view, out=out)
                Z = out.reshape(-1)
        return Z.reshape(-1, k)

    def _matmat(self, X):
        return self._apply(X, transpose=False)

    def _rmatmat(self, Y):
        return self._apply(Y, transpose=True)

    @property
    def T(self) -> Matrix:
        return Kronecker([f.T for f in self.factors])

    def _column_norms(self, norm: Norm) -> np.ndarray:
        return reduce(lambda a, b: np.multiply.outer(a, b).ravel(), [f.column_norms(norm) for f in self.factors])

    def sensitivity(self, norm: Norm = "l1") -> float:
        # Column norms of a Kronecker product are outer products of non-negative vectors.
        return math.prod(f.sensitivity(norm) for f in self.factors)

    def dense(self) -> np.ndarray:
        return reduce(np.kron, [f.dense() for f in self.factors])


class VStack(Matrix):
    """Blocks stacked vertically (a union of query sets over the same domain)."""

    def __init__(self, blocks: Sequence[Matrix]):
        blocks = list(blocks)
        if not blocks:
            raise ValueError("a stack needs at least one block")
        widths = {b.shape[1] for b in blocks}
        if len(widths) != 1:
            raise ValueError(f"stacked blocks must have the same number of columns, got {sorted(widths)}")
        self.blocks = blocks
        self._offsets = np.cumsum([0] + [b.shape[0] for b in blocks])
        self.shape = (int(self._offsets[-1]), blocks[0].shape[1])
        self.binary = all(b.binary for b in blocks)

    def _matmat(self, X):
        return np.concatenate([b._matmat(X) for b in self.blocks], axis=0)

    def _rmatmat(self, Y):
        return sum(
            b._rmatmat(Y[start:stop])
            for b, start, stop in zip(self.blocks, self._offsets[:-1], self._offsets[1:])
        )

    @property
    def T(self) -> Matrix:
        return HStack([b.T for b in self.blocks])

    def _column_norms(self, norm: Norm) -> np.ndarray:
        if norm == "l1":
            return sum(b.column_norms("l1") for b in self.blocks)
        return np.sqrt(sum(b.column_norms("l2") ** 2 for b in self.blocks))

    def dense(self) -> np.ndarray:
        return np.vstack([b.dense() for b in self.blocks])


class HStack(Matrix):
    """Blocks side by side: [A_1, A_2, ...] acting on a concatenated vector."""

    def __init__(self, blocks: Sequence[Matrix]):
        blocks = list(blocks)
        if not blocks:
            raise ValueError("a stack needs at least one block")
        heights = {b.shape[0] for b in blocks}
        if len(heights) != 1:
            raise ValueError(f"side-by-side blocks must have the same number of rows, got {sorted(heights)}")
        self.blocks = blocks
        self._offsets = np.cumsum([0] + [b.shape[1] for b in blocks])
        self.shape = (blocks[0].shape[0], int(self._offsets[-1]))
        self.binary = all(b.binary for b in blocks)

    def _matmat(self, X):
        return sum(
            b._matmat(X[start:stop])
            for b, start, stop in zip(self.blocks, self._offsets[:-1], self._offsets[1:])
        )

    def _rmatmat(self, Y):
        return np.concatenate([b._rmatmat(Y) for b in self.blocks], axis=0)

    @property
    def T(self) -> Matrix:
        return VStack([b.T for b in self.blocks])

    def _column_norms(self, norm: Norm) -> np.ndarray:
        return np.concatenate([b.column_norms(norm) for b in self.blocks])

    def dense(self) -> np.ndarray:
        return np.hstack([b.dense() for b in self.blocks])
