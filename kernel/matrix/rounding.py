"""What floating point does to ``M @ x``: proven bounds on the values and rounding errors of the kernel's own
evaluation of every matrix class, for any input with ``||x||_1 <= size``. ``evaluation(M, size, integral)`` bounds
||M x||_1, every intermediate's magnitude and ||fl(M x) - M x||_1, and says when the result is exact (integer
leaves and input, intermediates below 2^53). The argument, after Higham (2002): docs/privacy/arithmetic.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .base import Matrix, Product, Transpose, Weighted
from .blocks import Diagonal, Fourier, Identity, Intervals, Ones
from .compose import SMALL_FACTOR_ENTRIES, HStack, Kronecker, VStack
from .dense import Dense, Sparse
from .ranges import Ranges

UNIT = 2.0**-53
EXACT = 2.0**53
LIMIT = 2.0**500
"""Bound every intermediate below this: far from overflow even squared, so no inf (or inf - inf) arises."""
_TINY = 2.0**-1074


def gamma(k: float) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of k roundings."""
    if not k * UNIT < 0.5:
        raise ValueError(f"a computation of {k:.3g} chained operations is too long to bound")
    return k * UNIT / (1 - k * UNIT)


@dataclass(frozen=True)
class Evaluation:
    """Bounds on fl(M x) for every x with ||x||_1 <= an input bound (see the module docstring)."""

    size: float  # ||M x||_1 of the exact product
    peak: float  # |every intermediate value|, and |every entry of fl(M x)|
    error: float  # ||fl(M x) - M x||_1
    row: float | None = None  # |fl(M x)_i - (M x)_i| for every i, where tighter than ``error``

    @property
    def entry_error(self) -> float:
        return self.error if self.row is None else min(self.row, self.error)

    @property
    def exact(self) -> bool:
        return self.error == 0.0


def evaluation(M: Matrix, size: float, integral: bool) -> Evaluation:
    """Bounds on the kernel's evaluation of M on any input of L1 norm <= size (integers when ``integral``)."""
    if isinstance(M, Product):
        return _chain(M.factors[::-1], size, integral)
    if isinstance(M, Kronecker):  # applied one factor at a time (small factors as dense blocks)
        return _chain([_materialized(f) for f in M.factors[::-1]], size, integral)
    if isinstance(M, VStack):
        parts = [evaluation(b, size, integral) for b in M.blocks]
        return Evaluation(sum(p.size for p in parts), max(p.peak for p in parts), sum(p.error for p in parts),
                          max(p.entry_error for p in parts))
    if isinstance(M, HStack):  # every block may see the whole input; block results are added in turn
        parts = [evaluation(b, size, integral) for b in M.blocks]
        total = sum(p.size + p.error for p in parts)
        exact = all(p.exact for p in parts) and total < EXACT
        error = 0.0 if exact else sum(p.error for p in parts) + gamma(len(parts)) * total
        return Evaluation(max(p.size for p in parts), max(max(p.peak for p in parts), total), error)
    if isinstance(M, Weighted):
        base, c = evaluation(M.base, size, integral), abs(M.weight)
        reach = c * (base.size + base.error)
        exact = base.exact and M.weight == round(M.weight) and reach < EXACT
        error = 0.0 if exact else c * base.error + UNIT * reach + _TINY * M.shape[0]
        row = 0.0 if exact else c * base.entry_error + UNIT * c * base.peak + _TINY
        return Evaluation(c * base.size, max(base.peak, reach), error, row)
    if isinstance(M, Transpose) and isinstance(M.base, Transpose):  # applies the inner base itself
        return evaluation(M.base.base, size, integral)
    if isinstance(M, Transpose) and not isinstance(M.base.T, Transpose):  # the base's structured transpose
        return evaluation(M.base.T, size, integral)
    return _leaf(M, size, integral)


class _Dense:
    """A small Kronecker factor as the kernel applies it: its entries materialized (with f's own rounding)."""

    def __init__(self, factor: Matrix):
        self.factor, self.shape = factor, factor.shape


def _materialized(f: Matrix) -> Matrix | _Dense:
    return _Dense(f) if f.shape[0] * f.shape[1] <= SMALL_FACTOR_ENTRIES else f


def _chain(stages, size: float, integral: bool) -> Evaluation:
    """Stages applied right to left: an error e entering stage f leaves as at most growth(f) e, plus f's own."""
    error, peak = 0.0, 0.0
    for f in stages:
        step = (_block if isinstance(f, _Dense) else evaluation)(f, size + error, integral and error == 0.0)
        growth = step.size / (size + error) if size + error > 0 else 0.0
        error, size, peak = growth * error + step.error, growth * size, max(peak, step.peak)
        if not peak < LIMIT:
            break
    return Evaluation(size, peak, error)


def _block(f: _Dense, size: float, integral: bool) -> Evaluation:
    """A factor applied as its dense block: entries from f's own products on unit vectors (either side, as
    ``dense()`` does, and np.kron), each column off by at most ``deviation``; then one BLAS product."""
    rows, cols = f.shape
    by_column, by_row = evaluation(f.factor, 1.0, True), evaluation(f.factor.T, 1.0, True)
    growth = by_column.size
    if by_column.exact and by_row.exact:  # integer entries, materialized exactly
        exact = integral and growth * size < EXACT
        return _result(growth * size, growth * size, exact, gamma(cols + 1) * growth * size, rows, cols)
    deviation = by_column.error + rows * by_row.error + 4 * UNIT * growth
    error = deviation * size + gamma(cols + 1) * (growth + deviation) * size
    return _result((growth + deviation) * size, (growth + deviation) * size, False, error, rows, cols)


def _leaf(M: Matrix, size: float, integral: bool) -> Evaluation:
    """A structured leaf, applied with its own algorithm (M may be the transpose of one)."""
    rows, cols = M.shape
    transposed = isinstance(M, Transpose)
    base = M.base if transposed else M
    largest, integer = leaf_entries(base)
    if transposed:
        column = cols * largest  # a column of M^T is a row of the base: at most cols entries of size <= largest
    else:
        column = float(np.max(base.column_norms("l1"))) * (1 + gamma(rows + 2))
    row = None  # each entry's error, where a leaf bounds it apart from the total
    if isinstance(base, Identity):
        error, peak = 0.0, size
    elif isinstance(base, Diagonal):
        error, peak, row = UNIT * largest * size, largest * size, UNIT * largest * size
    elif isinstance(base, (Dense, Sparse)):  # entry i: gamma (|A| |x|)_i <= gamma max_j |a_ij| ||x||_1
        error, peak = gamma(cols + 1) * column * size, max(largest, column) * size
        row = None if transposed else gamma(cols + 1) * largest * size
    elif isinstance(base, Fourier):  # pocketfft: ||error||_2 <= 16 * 4 log2(2n) u ||x||_2 <= .. ||x||_1
        error, peak = math.sqrt(rows) * 64 * math.log2(2 * base.n) * UNIT * size, math.sqrt(2 * base.n) * size
    elif isinstance(base, (Ones, Intervals, Ranges)):  # prefix sums, then differences of 2^d corners
        corners = 2 ** len(base.domain_shape) if isinstance(base, Ranges) else 2
        row = corners * gamma((rows + cols) * corners + 2) * size
        error, peak = rows * row, corners * size
    else:
        raise ValueError(f"the kernel has no rounding bound for {type(base).__name__} matrices")
    exact = integer and integral and peak < EXACT
    evaluated = _result(column * size, peak, exact, error, rows, cols)
    return evaluated if exact or row is None else replace(evaluated, row=row + _TINY * (cols + 2))


def _result(size: float, peak: float, exact: bool, error: float, rows: int, cols: int) -> Evaluation:
    return Evaluation(size, peak, 0.0 if exact else error + _TINY * rows * (cols + 2))


def leaf_entries(M: Matrix) -> tuple[float, bool]:
    """(max |M_ij|, whether every entry is an integer) of a leaf, exactly (Fourier: an upper bound)."""
    if M.binary or isinstance(M, (Identity, Ones, Intervals, Ranges)):
        return 1.0, True
    if isinstance(M, Fourier):
        return math.sqrt(2.0 / M.n) * (1 + 2.0**-40), M.n == 1
    values = {Dense: lambda: M.array, Sparse: lambda: M.matrix.data, Diagonal: lambda: M.values}
    kind = next((k for k in values if isinstance(M, k)), None)
    if kind is None:
        raise ValueError(f"the kernel has no rounding bound for {type(M).__name__} matrices")
    data = values[kind]()
    return float(np.max(np.abs(data), initial=0.0)), bool(np.all(data == np.rint(data)))
