"""Structured one-dimensional blocks: identity, ones, diagonals, interval queries, real Fourier. An interval
row sums the cells ``lo..hi`` (inclusive): prefix sums, O(n + m). Named families are in ``operators.matrices``."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import scipy.sparse as sp

from .base import Matrix, Norm


def positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


class Identity(Matrix):
    """The n x n identity."""

    binary = True

    def __init__(self, n: int):
        self.n = positive_int(n, "Identity size")
        self.shape = (self.n, self.n)

    def _matmat(self, X):
        return np.array(X, dtype=np.float64, copy=True)

    _rmatmat = _matmat

    @property
    def T(self) -> Matrix:
        return self

    def _column_norms(self, norm: Norm) -> np.ndarray:
        return np.ones(self.n)


class Ones(Matrix):
    """The m x n all-ones matrix; ``Total(n) = Ones(1, n)``."""

    binary = True

    def __init__(self, rows: int, cols: int):
        self.shape = (positive_int(rows, "Ones rows"), positive_int(cols, "Ones columns"))

    def _matmat(self, X):
        return np.repeat(X.sum(axis=0, keepdims=True), self.shape[0], axis=0)

    def _rmatmat(self, Y):
        return np.repeat(Y.sum(axis=0, keepdims=True), self.shape[1], axis=0)

    @property
    def T(self) -> Matrix:
        return Ones(self.shape[1], self.shape[0])

    def _column_norms(self, norm: Norm) -> np.ndarray:
        m = float(self.shape[0])
        return np.full(self.shape[1], m if norm == "l1" else np.sqrt(m))

    def dense(self) -> np.ndarray:
        return np.ones(self.shape)


def Total(n: int) -> Ones:
    """The single query summing all n cells."""
    return Ones(1, n)


class Diagonal(Matrix):
    """diag(values): per-row weights (``Diagonal(w) @ A``)."""

    def __init__(self, values):
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1 or values.size == 0:
            raise ValueError("Diagonal needs a non-empty 1-D array of values")
        if not np.all(np.isfinite(values)):
            raise ValueError("Diagonal values must be finite (found NaN or inf)")
        self.values = values
        self.shape = (values.size, values.size)
        self.binary = bool(np.all((values == 0) | (values == 1)))

    def _matmat(self, X):
        return self.values[:, None] * X

    _rmatmat = _matmat

    @property
    def row_weights(self) -> np.ndarray:
        return self.values

    @property
    def T(self) -> Matrix:
        return self

    def _column_norms(self, norm: Norm) -> np.ndarray:
        return np.abs(self.values)

    def dense(self) -> np.ndarray:
        return np.diag(self.values)

# ---- interval families ----------------------------------------------------------------


class Intervals(Matrix):
    """Rows sum contiguous cells: row k is the indicator of ``lo[k]..hi[k]`` (inclusive)."""

    binary = True

    def __init__(self, n: int, lo, hi):
        self.n = positive_int(n, "domain size")
        lo = np.asarray(lo, dtype=np.int64).ravel()
        hi = np.asarray(hi, dtype=np.int64).ravel()
        if lo.shape != hi.shape or lo.size == 0:
            raise ValueError("intervals need equally many lower and upper ends (at least one)")
        if lo.min() < 0 or hi.max() >= self.n or np.any(lo > hi):
            raise ValueError(f"every interval needs 0 <= lo <= hi < {self.n}")
        self.lo, self.hi = lo, hi
        self.shape = (lo.size, self.n)

    def _matmat(self, X):
        sums = np.zeros((self.n + 1, X.shape[1]))
        np.cumsum(X, axis=0, out=sums[1:])
        return sums[self.hi + 1] - sums[self.lo]

    @cached_property
    def _ends(self) -> sp.csr_array:
        """(n+1) x m difference operator: +1 at lo, -1 at hi+1."""
        m = self.shape[0]
        rows = np.concatenate([self.lo, self.hi + 1])
        cols = np.concatenate([np.arange(m), np.arange(m)])
        vals = np.concatenate([np.ones(m), -np.ones(m)])
        return sp.csr_array((vals, (rows, cols)), shape=(self.n + 1, m))

    def _rmatmat(self, Y):
        return np.cumsum(np.asarray(self._ends @ Y), axis=0)[: self.n]

    def _column_norms(self, norm: Norm) -> np.ndarray:
        counts = self._coverage()
        return counts if norm == "l1" else np.sqrt(counts)

    def _coverage(self) -> np.ndarray:
        """How many rows cover each cell."""
        diff = np.zeros(self.n + 1)
        np.add.at(diff, self.lo, 1.0)
        np.add.at(diff, self.hi + 1, -1.0)
        return np.cumsum(diff)[: self.n]


class AllRange(Intervals):
    """Every interval [i, j], 0 <= i <= j < n, in lexicographic order: n(n+1)/2 rows, bounds built on first use."""

    def __init__(self, n: int):
        self.n = positive_int(n, "AllRange size")
        self.shape = (self.n * (self.n + 1) // 2, self.n)

    @cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.triu_indices(self.n)
        return lo.astype(np.int64), hi.astype(np.int64)

    @property
    def lo(self) -> np.ndarray:
        return self._bounds[0]

    @property
    def hi(self) -> np.ndarray:
        return self._bounds[1]

    def _coverage(self):
        """Cell j lies in (j + 1)(n - j) intervals: j + 1 choices of start, n - j of end."""
        j = np.arange(self.n, dtype=np.float64)
        return (j + 1) * (self.n - j)


class Fourier(Matrix):
    """The first k rows of the orthonormal real Fourier basis of R^n, lowest frequencies first (EFPA): 1/sqrt(n),
    pairs sqrt(2/n) cos(2 pi f j / n), -sqrt(2/n) sin(..) for 0 < f < n/2, and for even n (-1)^j / sqrt(n)."""

    def __init__(self, n: int, k: int | None = None):
        self.n = positive_int(n, "Fourier size")
        self.k = self.n if k is None else positive_int(k, "Fourier rows")
        if self.k > self.n:
            raise ValueError(f"the real Fourier basis of R^{self.n} has {self.n} rows, asked for {self.k}")
        self.shape = (self.k, self.n)

    def _matmat(self, X):
        spectrum = np.fft.rfft(X, axis=0, norm="ortho")
        pairs = np.sqrt(2.0) * np.stack([spectrum.real[1:], spectrum.imag[1:]], axis=1).reshape(-1, X.shape[1])
        if self.n % 2 == 0:  # the last frequency is real: one row, no factor sqrt(2)
            pairs = np.vstack([pairs[:-2], spectrum.real[-1:]])
        return np.vstack([spectrum.real[:1], pairs])[: self.k]

    def _rmatmat(self, Y):
        full = np.zeros((self.n, Y.shape[1]))
        full[: self.k] = Y
        spectrum = np.zeros((self.n // 2 + 1, Y.shape[1]), dtype=np.complex128)
        spectrum[0] = full[0]
        paired = (self.n - 1) // 2
        spectrum[1 : paired + 1] = (full[1 : 2 * paired + 1 : 2] + 1j * full[2 : 2 * paired + 2 : 2]) / np.sqrt(2.0)
        if self.n % 2 == 0:
            spectrum[-1] = full[-1]
        return np.fft.irfft(spectrum, n=self.n, axis=0, norm="ortho")

    def _column_norms(self, norm: Norm) -> np.ndarray:
        """Exact, without materializing: entry (f, j) depends on f j mod n only, so each row adds a table lookup."""
        power = 1 if norm == "l1" else 2
        t = np.arange(self.n) * 2.0 * np.pi / self.n
        tables = {"cos": np.abs(np.sqrt(2.0 / self.n) * np.cos(t)) ** power,
                  "sin": np.abs(np.sqrt(2.0 / self.n) * np.sin(t)) ** power}
        total = np.full(self.n, self.n ** (-power / 2))  # the constant row
        columns = np.arange(self.n)
        for f, kind in self._rows()[1:]:
            if kind == "alternating":
                total += self.n ** (-power / 2)  # |(-1)^j / sqrt(n)|
            else:
                total += tables[kind][(f * columns) % self.n]
        return total if power == 1 else np.sqrt(total)

    def _rows(self) -> list[tuple[int, str]]:
        """(frequency, kind) of each of the k rows, in order."""
        rows = [(0, "constant")]
        for f in range(1, (self.n - 1) // 2 + 1):
            rows += [(f, "cos"), (f, "sin")]
        if self.n % 2 == 0:
            rows.append((self.n // 2, "alternating"))
        return rows[: self.k]
