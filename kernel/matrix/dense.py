"""Explicit leaves: dense and sparse matrices given entry by entry, and diagonals."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernel.matrix.base import Matrix, Norm, _check_norm


def _finite_2d(array, what: str) -> np.ndarray:
    array = np.asarray(array, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"{what} needs a 2-D array, got {array.ndim} dimensions")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} entries must be finite (found NaN or inf)")
    return array


class Dense(Matrix):
    """A matrix stored as a dense numpy array."""

    def __init__(self, array):
        self.array = _finite_2d(array, "Dense")
        self.shape = self.array.shape
        self.binary = bool(np.all((self.array == 0) | (self.array == 1)))

    def _matmat(self, X):
        return self.array @ X

    def _rmatmat(self, Y):
        return self.array.T @ Y

    @property
    def T(self) -> Matrix:
        return Dense(self.array.T)

    def column_norms(self, norm: Norm = "l1") -> np.ndarray:
        _check_norm(norm)
        return np.abs(self.array).sum(axis=0) if norm == "l1" else np.sqrt((self.array**2).sum(axis=0))

    def dense(self) -> np.ndarray:
        return self.array.copy()

    def to_spec(self):
        from kernel.matrix.spec import ArrayData, DenseSpec

        return DenseSpec(data=ArrayData.of(self.array))


class Sparse(Matrix):
    """A matrix stored as a scipy CSR array."""

    def __init__(self, matrix):
        csr = sp.csr_array(matrix, dtype=np.float64)
        csr.sum_duplicates()
        if csr.ndim != 2:
            raise ValueError("Sparse needs a 2-D matrix")
        if not np.all(np.isfinite(csr.data)):
            raise ValueError("Sparse entries must be finite (found NaN or inf)")
        self.matrix = csr
        self.shape = csr.shape
        self.binary = bool(np.all(csr.data == 1))

    def _matmat(self, X):
        return np.asarray(self.matrix @ X)

    def _rmatmat(self, Y):
        return np.asarray(self.matrix.T @ Y)

    @property
    def T(self) -> Matrix:
        return Sparse(self.matrix.T)

    def column_norms(self, norm: Norm = "l1") -> np.ndarray:
        _check_norm(norm)
        if norm == "l1":
            return np.asarray(abs(self.matrix).sum(axis=0)).ravel()
        return np.sqrt(np.asarray(self.matrix.multiply(self.matrix).sum(axis=0)).ravel())

    def dense(self) -> np.ndarray:
        return self.matrix.toarray()

    def to_spec(self):
        from kernel.matrix.spec import ArrayData, SparseSpec

        m = self.matrix
        return SparseSpec(
            rows=m.shape[0],
            cols=m.shape[1],
            data=ArrayData.of(m.data),
            indices=ArrayData.of(m.indices.astype(np.int64)),
            indptr=ArrayData.of(m.indptr.astype(np.int64)),
        )
