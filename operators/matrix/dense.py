"""Explicit leaves: dense and sparse matrices given entry by entry."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .base import Matrix, Norm


class Dense(Matrix):
    """A matrix stored as a dense numpy array."""

    def __init__(self, array):
        self.array = np.asarray(array, dtype=np.float64)
        if self.array.ndim != 2:
            raise ValueError(f"Dense needs a 2-D array, got {self.array.ndim} dimensions")
        if not np.all(np.isfinite(self.array)):
            raise ValueError("Dense entries must be finite (found NaN or inf)")
        self.shape = self.array.shape
        self.binary = bool(np.all((self.array == 0) | (self.array == 1)))

    def _matmat(self, X):
        return self.array @ X

    def _rmatmat(self, Y):
        return self.array.T @ Y

    @property
    def T(self) -> Matrix:
        return Dense(self.array.T)

    def _column_norms(self, norm: Norm) -> np.ndarray:
        return np.abs(self.array).sum(axis=0) if norm == "l1" else np.sqrt((self.array**2).sum(axis=0))

    def dense(self) -> np.ndarray:
        return self.array.copy()


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

    def _column_norms(self, norm: Norm) -> np.ndarray:
        if norm == "l1":
            return np.asarray(abs(self.matrix).sum(axis=0)).ravel()
        return np.sqrt(np.asarray(self.matrix.multiply(self.matrix).sum(axis=0)).ravel())

    def dense(self) -> np.ndarray:
        return self.matrix.toarray()
