"""The leaves of the sealed matrix language, as the kernel builds and applies them.

Each leaf knows, from its own entries, the public facts the one evaluation algorithm (``kernel.matrix.sealed``)
rests on, and computes them before any data is read:

- ``integer``: every entry is an integer; ``largest``: max |entry|; ``growth``: every intermediate value of its
  ``apply`` is at most ``growth`` times the L1 norm of the input column it comes from;
- ``dot_length``: how many products an output entry sums (its rounding, when it is not exact); ``row_l1``: the
  largest row L1 norm of |L| (how far an absolute error travels through it); ``nonzeros``: the most non-zero
  entries in one column;
- ``column_sums(power, weights)``: an upper bound on sum_r |w_r L_rj|^power for every column j, ``exact`` when it
  is the exact value.

``cost(spec)`` gives, before the leaf is built, its shape and what building, applying (per input column) and
summing its columns take (docs/privacy/arithmetic.md#the-sealed-language).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import spec as s
from .rounding import LIMIT, TINY, gamma
from ..limits import Work

EXACT = 2.0**53
"""Integers below this are floats, and sums and products of them that stay below it are exact in any order."""
CORNER_STEPS = 1 << 13
"""The Python work of one corner of a ``ranges`` leaf when it is built: its indexes and its weights' sums (8 us
measured, at 2^16 corners: the ``OBJECT_STEPS`` nanosecond)."""
CORNER_CALL_STEPS = 1 << 11
"""The Python work of one corner in each column sum and each application (1.3 and 2.3 us measured)."""


@dataclass(frozen=True)
class Sums:
    """Column sums: ``values`` within a relative ``gamma(operations)`` and an absolute ``absolute`` of the exact sums
    of non-negative terms (both 0: exact)."""

    values: np.ndarray
    operations: float = 0.0
    absolute: float = 0.0

    @property
    def exact(self) -> bool:
        return self.operations == 0 and self.absolute == 0

    def upper(self) -> np.ndarray:
        """Upper bounds on the exact sums: computed >= exact (1 - gamma), so exact <= computed (1 + 2 gamma)."""
        if self.exact:
            return self.values
        return self.values * (1 + 2 * gamma(self.operations + 4)) + 2 * self.absolute


@dataclass(frozen=True)
class LeafCost:
    """A leaf's shape, and the steps and bytes of building it, applying it to one input column, summing its columns;
    ``call_steps``: the Python work of one application, whatever its columns."""

    rows: int
    cols: int
    build_steps: int
    build_bytes: int
    apply_steps: int
    apply_bytes: int
    sums_steps: int
    call_steps: int = 0


class Leaf:
    """A kernel-built leaf (see the module docstring)."""

    rows: int
    cols: int
    integer: bool = True
    largest: float = 1.0
    growth: float = 1.0
    dot_length: int = 0
    row_l1: float = 1.0
    nonzeros: int = 1

    def apply(self, T: np.ndarray, work: Work) -> np.ndarray:
        """L applied along the middle axis of T (before x cols x after, which becomes before x rows x after),
        counting its steps. Three axes whatever the block's depth: numpy holds at most 64."""
        raise NotImplementedError

    def column_sums(self, power: int, weights: np.ndarray | None, work: Work) -> Sums:
        """Upper bounds on sum_r |w_r L_rj|^power for every column j (``weights`` None: all 1), counting its steps."""
        raise NotImplementedError


def _prefix_sums(source: np.ndarray, axis: int, out: np.ndarray) -> None:
    """Running sums of ``source`` along ``axis`` into ``out`` (may be ``source``): a slice at a time when the slices
    are long (numpy's cumsum strides through memory, ten times slower there), else numpy's cumsum."""
    if source.shape[axis] * 256 > source.size:
        np.cumsum(source, axis=axis, out=out)
        return
    into, each = np.moveaxis(out, axis, 0), np.moveaxis(source, axis, 0)
    into[0] = each[0]
    for i in range(1, into.shape[0]):
        np.add(into[i - 1], each[i], out=into[i])


def _powered(weights: np.ndarray | None, power: int) -> tuple[np.ndarray | None, bool]:
    """|w|^power, and whether it is exact (integer weights whose powers stay below 2^53). One rounding each: an
    underflow loses TINY at most, which the leaves' absolute bounds count."""
    if weights is None:
        return None, True
    values = np.abs(weights) ** power
    exact = bool(np.all(weights == np.rint(weights))) and float(values.max(initial=0.0)) < EXACT
    return values, exact


def _weighted_terms(magnitudes: np.ndarray, weights: np.ndarray | None, power: int) -> np.ndarray:
    """|w_r L_rj|^power for the entries' magnitudes and their rows' weights (broadcast): the product first, then
    the power, so that an underflow loses TINY at most (|w|^power first loses all of a weight below 2^-537,
    which an entry up to 2^500 then multiplies)."""
    return (magnitudes if weights is None else magnitudes * np.abs(weights)) ** power


class Identity(Leaf):
    def __init__(self, leaf: s.IdentityLeaf, work: Work):
        self.rows = self.cols = leaf.n

    @staticmethod
    def cost(leaf: s.IdentityLeaf) -> LeafCost:
        return LeafCost(leaf.n, leaf.n, 0, 0, 0, 0, leaf.n)

    def apply(self, T, work):
        return T

    def column_sums(self, power, weights, work):
        work.step(2 * self.cols)
        if weights is None:
            return Sums(np.ones(self.cols))
        values, exact = _powered(weights, power)
        return Sums(values, 0.0 if exact else 1.0, 0.0 if exact else TINY)


class Ones(Leaf):
    def __init__(self, leaf: s.OnesLeaf, work: Work):
        self.rows, self.cols = leaf.rows, leaf.cols
        self.dot_length, self.row_l1, self.nonzeros = leaf.cols, float(leaf.cols), leaf.rows

    @staticmethod
    def cost(leaf: s.OnesLeaf) -> LeafCost:
        return LeafCost(leaf.rows, leaf.cols, 0, 0, leaf.cols + leaf.rows, 8 * leaf.rows, leaf.cols + leaf.rows)

    def apply(self, T, work):
        work.step(T.size + self.rows * T.size // self.cols)
        sums = T.sum(axis=1, keepdims=True)
        return sums if self.rows == 1 else np.repeat(sums, self.rows, axis=1)

    def column_sums(self, power, weights, work):
        work.step(self.cols + (0 if weights is None else 2 * self.rows))
        if weights is None:
            return Sums(np.full(self.cols, float(self.rows)))
        values, exact = _powered(weights, power)
        total = float(values.sum())
        exact = exact and total < EXACT
        return Sums(np.full(self.cols, total), 0.0 if exact else self.rows + 1, 0.0 if exact else self.rows * TINY)


class Ranges(Leaf):
    """Prefix sums along each axis of the grid, then each box's sum from its 2^d corners (inclusion-exclusion)."""

    def __init__(self, leaf: s.RangesLeaf, work: Work):
        self.shape = tuple(leaf.shape)
        self.lo, self.hi = leaf.lo.array(), leaf.hi.array()
        work.step(6 * self.lo.size)
        if self.lo.min() < 0 or np.any(self.hi >= np.array(self.shape)) or np.any(self.lo > self.hi):
            raise ValueError(f"ranges: every box needs 0 <= lo <= hi < {list(self.shape)} in each dimension")
        self.rows, self.cols = self.lo.shape[0], math.prod(self.shape)
        self._corners = self._corner_indexes(work)
        self.growth = float(2 ** len(self.shape))
        self.row_l1 = float(np.prod(self.hi - self.lo + 1, axis=1).max())
        self.nonzeros = int(self.column_sums(1, None, work).values.max())

    @staticmethod
    def cost(leaf: s.RangesLeaf) -> LeafCost:
        padded, boxes, corners = math.prod(n + 1 for n in leaf.shape), leaf.lo.shape[0], 2 ** len(leaf.shape)
        dims = len(leaf.shape)
        sums = (dims + 1) * padded + corners * (boxes + CORNER_CALL_STEPS)
        indexes = corners * (boxes * dims + CORNER_STEPS)
        return LeafCost(
            boxes,
            math.prod(leaf.shape),
            4 * boxes * dims + indexes + sums,  # checks, corner indexes, the coverage (column sums)
            8 * (corners * boxes + 2 * padded) + 256 * corners,  # each corner's index array and its Python objects
            (dims + 1) * padded + corners * boxes,
            8 * padded,
            sums,
            corners * CORNER_CALL_STEPS,
        )

    def _corner_indexes(self, work: Work) -> list[tuple[np.ndarray, int]]:
        """(flat index into the zero-padded prefix-sum grid, sign) of each of the 2^d corners of every box."""
        padded, d = tuple(n + 1 for n in self.shape), len(self.shape)
        work.step(2**d * CORNER_STEPS)
        corners = []
        for choice in itertools.product((0, 1), repeat=d):
            coordinates = np.where(np.array(choice, dtype=bool), self.hi + 1, self.lo)
            corners.append((np.ravel_multi_index(tuple(coordinates.T), padded), -1 if (d - sum(choice)) % 2 else 1))
        return corners

    def apply(self, T, work):
        d, before, after = len(self.shape), T.shape[0], T.shape[2]
        sums = np.zeros((before, *(n + 1 for n in self.shape), after))
        work.step((d + 1) * sums.size)
        inner = sums[(slice(None),) + (slice(1, None),) * d]
        source = T.reshape((before, *self.shape, after))
        for grid_axis in range(1, d + 1):
            _prefix_sums(source, grid_axis, inner)
            source = inner
        flat = sums.reshape(before, -1, after)
        work.step(len(self._corners) * CORNER_CALL_STEPS)
        (index, sign), *others = self._corners
        out = np.take(flat, index, axis=1)
        if sign < 0:
            np.negative(out, out=out)
        for index, sign in others:
            work.step(2 * out.size)
            (np.add if sign > 0 else np.subtract)(out, np.take(flat, index, axis=1), out=out)
        return out

    def column_sums(self, power, weights, work):
        """The weights of the boxes covering each cell: signed weights at the corners, then prefix sums. Each
        result sums at most 2^d boxes' corner terms per box, so it is within gamma(2^d boxes + sum of the sides)
        of 2^d times the total weight (docs/privacy/arithmetic.md#leaves)."""
        values, exact = _powered(weights, power)
        values = np.ones(self.rows) if values is None else values
        padded, flip = tuple(n + 1 for n in self.shape), (-1) ** len(self.shape)  # +w at lo, -w past hi, per axis
        grid = np.zeros(math.prod(padded))
        corners = 2 ** len(self.shape)
        work.step((len(self.shape) + 2) * grid.size + corners * (self.rows + self.lo.size + CORNER_CALL_STEPS))
        for index, sign in self._corners:
            np.add.at(grid, index, values if sign * flip > 0 else -values)
        grid = grid.reshape(padded)
        for axis in range(len(self.shape)):
            grid = np.cumsum(grid, axis=axis)
        covered = grid[tuple(slice(0, n) for n in self.shape)].ravel()
        total = float(values.sum())
        if exact and 2 ** len(self.shape) * total < EXACT:
            return Sums(covered)
        operations = 2 ** len(self.shape) * self.rows + sum(self.shape) + 1
        return Sums(covered, 0.0, gamma(operations) * 2 ** len(self.shape) * total + self.rows * TINY)


class Dense(Leaf):
    def __init__(self, array: np.ndarray, work: Work):
        work.step(6 * array.size)
        if not np.all(np.abs(array) < LIMIT):
            raise ValueError("dense entries must be finite numbers below 2^500 in magnitude")
        self.array = array
        self.rows, self.cols = array.shape
        magnitudes = np.abs(array)
        self.integer = bool(np.all(array == np.rint(array)))
        self.largest = self.growth = float(magnitudes.max())
        self.dot_length = self.cols
        self.row_l1 = float(magnitudes.sum(axis=1).max()) * (1 + gamma(self.cols + 1))
        self.nonzeros = int(np.count_nonzero(array, axis=0).max())

    @classmethod
    def of(cls, leaf: s.DenseLeaf, work: Work) -> Dense:
        return cls(leaf.data.array(), work)

    @staticmethod
    def cost(leaf: s.DenseLeaf) -> LeafCost:
        rows, cols = leaf.data.shape
        return LeafCost(rows, cols, 8 * rows * cols, 24 * rows * cols, 2 * rows * cols, 0, 3 * rows * cols)

    def apply(self, T, work):
        work.step(2 * self.array.size * (T.size // self.cols))
        return np.moveaxis(np.tensordot(self.array, T, axes=([1], [1])), 0, 1)

    def column_sums(self, power, weights, work):
        work.step(3 * self.array.size)
        _, exact = _powered(weights, power)
        sums = _weighted_terms(np.abs(self.array), None if weights is None else weights[:, None], power).sum(axis=0)
        if self.integer and exact and float(sums.max()) < EXACT and float(np.abs(self.array).max()) ** power < EXACT:
            return Sums(sums)
        return Sums(sums, self.rows + 3, self.rows * TINY)


def fourier_matrix(n: int, stop: int, start: int = 0) -> np.ndarray:
    """Rows start..stop-1 of the orthonormal real Fourier basis of R^n, lowest frequencies first, as the kernel
    computes them: the constant 1/sqrt(n); for 0 < f < n/2, sqrt(2/n) cos(2 pi f j / n) and -sqrt(2/n)
    sin(2 pi f j / n); for even n, (-1)^j / sqrt(n). Entry (f, j) depends on f j mod n only: one table lookup."""
    angle = 2.0 * np.pi * np.arange(n) / n
    cos, sin, j = np.sqrt(2.0 / n) * np.cos(angle), -np.sqrt(2.0 / n) * np.sin(angle), np.arange(n)
    out = np.empty((stop - start, n))
    for row in range(start, stop):
        f = (row + 1) // 2
        if row == 0:
            out[row - start] = 1.0 / np.sqrt(n)
        elif n % 2 == 0 and f == n // 2:
            out[row - start] = np.where(j % 2 == 0, 1.0, -1.0) / np.sqrt(n)
        else:
            out[row - start] = (cos if row % 2 else sin)[(f * j) % n]
    return out


def fourier(leaf: s.FourierLeaf, work: Work) -> Dense:
    work.step(2 * leaf.k * leaf.n)
    return Dense(fourier_matrix(leaf.n, leaf.k), work)


def fourier_cost(leaf: s.FourierLeaf) -> LeafCost:
    entries = leaf.k * leaf.n
    return LeafCost(leaf.k, leaf.n, 8 * entries, 32 * entries, 2 * entries, 0, 3 * entries)


class Sparse(Leaf):
    """A CSR matrix, duplicates summed once when built (those sums are the entries applied)."""

    def __init__(self, leaf: s.SparseLeaf, work: Work):
        data, indices, indptr = leaf.data.array(), leaf.indices.array(), leaf.indptr.array()
        work.step(12 * data.size + 2 * leaf.rows + leaf.cols)
        if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
            raise ValueError("sparse: indptr must start at 0, never decrease and end at the number of entries")
        if indices.size and (indices.min() < 0 or indices.max() >= leaf.cols):
            raise ValueError(f"sparse: a column index lies outside 0..{leaf.cols - 1}")
        if not np.all(np.abs(data) < LIMIT):
            raise ValueError("sparse entries must be finite numbers below 2^500 in magnitude")
        matrix = sp.csr_array((data, indices, indptr), shape=(leaf.rows, leaf.cols))
        matrix.sum_duplicates()
        self.matrix = matrix
        self.rows, self.cols = leaf.rows, leaf.cols
        magnitudes = np.abs(matrix.data)
        self.integer = bool(np.all(matrix.data == np.rint(matrix.data)))
        self.largest = self.growth = float(magnitudes.max(initial=0.0))
        self.dot_length = int(np.diff(matrix.indptr).max(initial=0))
        row_sums = np.bincount(
            np.repeat(np.arange(self.rows), np.diff(matrix.indptr)), weights=magnitudes, minlength=self.rows
        )
        self.row_l1 = float(row_sums.max(initial=0.0)) * (1 + gamma(self.dot_length + 1))
        self.nonzeros = int(np.bincount(matrix.indices, minlength=self.cols).max(initial=0))

    @staticmethod
    def cost(leaf: s.SparseLeaf) -> LeafCost:
        entries = leaf.data.size
        return LeafCost(
            leaf.rows,
            leaf.cols,
            16 * entries + leaf.rows + leaf.cols,
            48 * entries + 16 * leaf.rows + 8 * leaf.cols,
            2 * entries + leaf.rows,
            0,
            4 * entries + leaf.cols,
        )

    def apply(self, T, work):
        before, _, after = T.shape
        work.step((2 * self.matrix.nnz + self.rows + self.cols) * (T.size // self.cols))
        out = np.asarray(self.matrix @ np.moveaxis(T, 1, 0).reshape(self.cols, -1))
        return np.moveaxis(out.reshape(self.rows, before, after), 0, 1)

    def column_sums(self, power, weights, work):
        work.step(4 * self.matrix.nnz + self.cols)
        _, exact = _powered(weights, power)
        row_weights = None if weights is None else np.repeat(weights, np.diff(self.matrix.indptr))
        terms = _weighted_terms(np.abs(self.matrix.data), row_weights, power)
        sums = np.bincount(self.matrix.indices, weights=terms, minlength=self.cols)
        if self.integer and exact and float(sums.max(initial=0.0)) < EXACT and self.largest**power < EXACT:
            return Sums(sums)
        return Sums(sums, self.nonzeros + 3, self.nonzeros * TINY)


BUILDERS = {
    "identity": Identity,
    "ones": Ones,
    "ranges": Ranges,
    "dense": Dense.of,
    "sparse": Sparse,
    "fourier": fourier,
}
"""Each leaf kind and how the kernel builds it from its spec."""
COSTS = {
    "identity": Identity.cost,
    "ones": Ones.cost,
    "ranges": Ranges.cost,
    "dense": Dense.cost,
    "sparse": Sparse.cost,
    "fourier": fourier_cost,
}
"""Each leaf kind and its cost, from the spec alone."""
