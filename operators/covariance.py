"""How noisy a least-squares estimate is: ``Cov(x_hat) = G^+`` with ``G = sum_i M_i^T M_i / sigma_i^2``.

The minimum-norm weighted least-squares estimate ``x_hat = G^+ A^T D y`` (``A`` the stacked
measurement matrices, ``D`` the inverse noise variances) has covariance ``G^+ G G^+ = G^+``, so an
answer ``w^T x_hat`` has variance ``w^T G^+ w`` and error ``c^T e`` on the unit-variance noise
``e = D^(1/2) (y - A x)`` with ``c = D^(1/2) A G^+ w``. (For a query outside the measured row
space the answer is also biased: least squares assumes the unmeasured directions are zero.)

``G^+`` is applied with the structure the measurements have, never as a dense ``n x n`` matrix
unless ``n`` is small:

- when the measurements cannot tell apart the cells of each of fewer groups than cells, at most ``DENSE_LIMIT``
  (a partition plan's block-constant estimate: ``cell_groups``), densely over the groups' totals: with ``P`` the
  groups' indicators and ``B`` the measurements on the groups, ``G^+ = P S Cov_B S P^T`` (``S``: 1 / group
  sizes), exact at any number of cells;
- one Kronecker measurement (one factor: any 1-D strategy) with one noise level:
  ``G^+ = sigma^2 / w^2 kron_i (A_i^T A_i)^+``, and for a Kronecker workload
  ``diag(W G^+ W^T) = sigma^2 / w^2 kron_i diag(W_i (A_i^T A_i)^+ W_i^T)``: 10^6 answers from two
  1000-cell factors;
- otherwise, up to ``DENSE_LIMIT`` cells, ``G^+`` densely from a QR and an SVD of the stacked weighted rows
  (never from ``G``, whose condition number is the square);
- beyond, with at most ``DENSE_LIMIT`` measured rows (an OPT_+ strategy of a few hundred rows over 10^5
  cells), ``c = (B B^T)^+ B w`` directly, ``B = D^(1/2) A``: its Gram over rows is small (eigenvalues below
  1e-13 of the largest are dropped as rounding; one between that and 1e-10, an ill-conditioned system such as a
  heavily weighted known total, sends it to the iterative path instead, since the Gram squares the condition);
- beyond that, one LSMR solve per answer (``c`` = the minimum-norm solution of ``D^(1/2) A^T``-system
  ``A^T D^(1/2) c = w``), for at most ``SOLVE_LIMIT`` answers.

A query with a part outside the measured row space is not determined by the measurements (``undetermined``):
least squares sets that part to zero, a bias no variance describes, so its variance is infinite. An iterative
solve that stops short of its tolerance leaves a residual too, and is treated the same way: never a variance
smaller than the truth.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.linalg
import scipy.sparse
from scipy.sparse.linalg import lsmr

from ..kernel.matrix.threads import single_threaded_blas
from .algebra import rows
from .laplace_laws import Laws, coefficient_laws, kronecker_laws
from .linalg import explicit_sparse, gram_inverse_root
from .matrix import Dense, Identity, Intervals, Kronecker, Matrix, VStack, Weighted
from .measurement import stacked_system

#: Largest factor (columns) whose Gram the Kronecker path pseudo-inverts densely.
FACTOR_LIMIT = 4096
#: Largest data vector whose Gram the general path pseudo-inverts densely (128 MB).
DENSE_LIMIT = 4096
#: Most answers the iterative path (one LSMR solve each) takes on.
SOLVE_LIMIT = 20_000
#: Entries of workload rows handled at once.
CHUNK_ENTRIES = 1 << 22
#: A query is determined when its part outside the measured row space is at most this fraction of its norm.
DETERMINED_RTOL = 1e-6


class LeastSquaresCovariance:
    """``G^+`` of a set of measurements (objects with ``matrix``, ``weights`` = 1 / noise sd), applied with structure."""

    def __init__(self, measurements: Sequence, size: int) -> None:
        if not measurements:
            raise ValueError("no measurements: nothing to take a covariance of")
        self.measurements = list(measurements)
        self.size = int(size)
        self._dense: tuple[np.ndarray, np.ndarray] | None = None  # G^+ and an orthonormal basis of the row space

    @cached_property
    def _kron_parts(self) -> tuple[float, list[np.ndarray], list[np.ndarray | None]] | None:
        return kronecker_gram_parts(self.measurements)

    @property
    def factors(self) -> tuple[float, list[np.ndarray]] | None:
        """The Kronecker factors of ``G^+`` when the measurements have that structure (computed on first use)."""
        return None if self._kron_parts is None else self._kron_parts[:2]

    @property
    def method(self) -> str:
        """Which structure the covariance uses."""
        first = _unweighted(self.measurements[0].matrix)
        several = len(self.measurements) == 1 and isinstance(first, Kronecker) and len(first.factors) > 1
        if several and self.factors is not None:  # a product of factors: its workloads' diagonals factor too
            return "kronecker"
        if self._reduced is not None:  # else cheapest when it applies: dense algebra over the groups alone
            return "groups"
        if self.factors is not None:
            return "kronecker"
        return "dense" if self.size <= DENSE_LIMIT else "iterative"

    @cached_property
    def groups(self) -> np.ndarray:
        """:func:`cell_groups` of the measurements (computed on first use)."""
        return cell_groups(self.measurements, self.size)

    @cached_property
    def _reduced(self) -> LeastSquaresCovariance | None:
        """The covariance of the groups' totals (the measurements on one cell of each group), when there are at
        most ``DENSE_LIMIT`` groups and fewer groups than cells."""
        count = int(self.groups.max()) + 1
        if count > DENSE_LIMIT or count == self.size:
            return None
        _, first = np.unique(self.groups, return_index=True)
        on_groups = [_OnGroups(Dense(np.vstack([block[:, first] for _, block in _blocks_with_offsets(m.matrix)])),
                               m.weights) for m in self.measurements]
        return LeastSquaresCovariance(on_groups, count)

    @cached_property
    def _group_sizes(self) -> np.ndarray:
        return np.bincount(self.groups).astype(np.float64)

    @cached_property
    def _averaging(self) -> scipy.sparse.csr_array:
        """The groups x cells matrix of group means."""
        n = self.size
        return scipy.sparse.csr_array((1.0 / self._group_sizes[self.groups], (self.groups, np.arange(n))),
                                      shape=(self._group_sizes.size, n))

    def _group_means(self, X: np.ndarray) -> np.ndarray:
        """Each column of ``X`` (cells x k) averaged over each group (groups x k)."""
        return np.asarray(self._averaging @ X)

    @property
    def rank(self) -> int | None:
        """The dimension of the measured row space (None on the iterative path, which does not find it)."""
        if self.method == "kronecker":
            return math.prod(p.shape[0] if b is None else b.shape[1] for p, b in zip(*self._kron_parts[1:]))
        if self.method == "groups":
            return self._reduced.rank
        return None if self.method == "iterative" else self._dense_parts()[1].shape[1]

    def undetermined(self, W: Matrix) -> np.ndarray:
        """Which of ``W``'s answers the measurements do not determine (see the module docstring)."""
        self._check(W)
        if self.method == "kronecker":
            structured = self._kronecker_undetermined(W)
            if structured is not None:
                return structured
        out = []
        for block in row_blocks(W):
            if self.method == "kronecker":
                projections = [np.eye(p.shape[0]) if q is None else q
                               for p, q in zip(self._kron_parts[1], self._kron_projections)]
                inside = _kron_apply(projections, block.T).T
            elif self.method == "dense":
                basis = self._dense_parts()[1]
                inside = (block @ basis) @ basis.T
            elif self.method == "groups":  # constant on the groups, with group values the groups' rows determine
                means = self._group_means(block.T).T
                spread = np.linalg.norm(block - means[:, self.groups], axis=1)
                out.append(self._reduced.undetermined(Dense(means)) | (
                    spread > DETERMINED_RTOL * np.maximum(np.linalg.norm(block, axis=1), np.finfo(float).tiny)))
                continue
            else:
                coefficients = next(self._iterative_coefficients(Dense(block)))  # B^T c: w's part in the row space
                inside = np.asarray(stacked_adjoint(self.measurements, coefficients.T)).T
            outside = np.linalg.norm(block - inside, axis=1)
            out.append(outside > DETERMINED_RTOL * np.maximum(np.linalg.norm(block, axis=1), np.finfo(float).tiny))
        return np.concatenate(out) if out else np.zeros(0, dtype=bool)

    def variances(self, W: Matrix) -> np.ndarray:
        """``diag(W G^+ W^T)``: the variance of each of ``W``'s answers (rounding's negative values clipped to 0),
        infinite for the answers the measurements do not determine."""
        found = self.noise_variances(W)
        found[self.undetermined(W)] = np.inf
        return found

    def noise_variances(self, W: Matrix) -> np.ndarray:
        """``diag(W G^+ W^T)``: the noise's part of each answer's error, whether or not the answer is determined."""
        self._check(W)
        if W.shape[0] == 0:
            return np.empty(0)
        if self.method == "kronecker":
            structured = self._kronecker_diagonal(W)
            if structured is not None:
                return np.maximum(structured, 0.0)
        if self.method == "iterative":
            found = np.concatenate([np.sum(c * c, axis=1) for c in self._iterative_coefficients(W)])
        else:
            found = np.concatenate([np.sum(block * self._apply(block.T).T, axis=1) for block in row_blocks(W)])
        return np.maximum(found, 0.0)

    def largest_shares(self, W: Matrix, work_limit: int) -> np.ndarray | None:
        """Each answer's largest Laplace term's share of its noise variance, ``max_j c_j^2 / sum_j c_j^2`` over
        the rows measured with Laplace noise (what tightens the sound bound, ``confidence.bound_halfwidths``):
        factor by factor for a Kronecker measurement and workload (a product's largest coefficient is the product
        of its factors'), else from the coefficients when answers x measured rows is at most ``work_limit``;
        None otherwise."""
        if self.method == "kronecker":
            structured = self._kronecker_shares(W)
            if structured is not None:
                return structured
        rows = sum(m.matrix.shape[0] for m in self.measurements)
        if W.shape[0] * rows > work_limit:
            return None
        laplace = np.concatenate([np.full(m.matrix.shape[0], m.noise == "laplace") for m in self.measurements])
        tiny = np.finfo(float).tiny
        out = [np.max(c[:, laplace] ** 2, axis=1, initial=0.0) / np.maximum(np.sum(c * c, axis=1), tiny)
               for c in self.coefficients(W)]
        return np.concatenate(out) if out else np.empty(0)

    def _kronecker_shares(self, W: Matrix) -> np.ndarray | None:
        products = self._factor_coefficients(W)
        if products is None:
            return None
        out = []
        for _, coefficients in products:  # a weight scales every coefficient alike: the shares do not see it
            largest, total = np.ones(1), np.ones(1)
            for squares in (c**2 for c in coefficients):
                largest = np.multiply.outer(largest, squares.max(axis=0, initial=0.0)).ravel()
                total = np.multiply.outer(total, squares.sum(axis=0)).ravel()
            laplace = self.measurements[0].noise == "laplace"
            out.append(largest / np.maximum(total, np.finfo(float).tiny) if laplace else 0 * total)
        return np.concatenate(out)

    def _factor_coefficients(self, W: Matrix) -> list[tuple[float, list[np.ndarray]]] | None:
        """For a Kronecker measurement and workload: per product, its weight times ``1 / (w sigma)`` (the factor
        every coefficient shares) and per factor the coefficients ``A_i (A_i^T A_i)^+ W_i^T`` (rows measured x
        factor rows), so that an answer's coefficients are that weight times the Kronecker product of its
        factors' columns; None for other workloads."""
        products = self._kronecker_products(W)
        if products is None:
            return None
        A = _unweighted(self.measurements[0].matrix)
        measured = A.factors if isinstance(A, Kronecker) else [A]
        scale, pinvs = self.factors
        return [(weight * math.sqrt(scale), [
            np.hstack([np.asarray(strategy @ (pinv @ block.T)) for block in
                       [np.zeros((0, factor.shape[1])), *row_blocks(factor)]])
            for factor, pinv, strategy in zip(factors, pinvs, measured)]) for weight, factors in products]

    def error_laws(self, W: Matrix, work_limit: int) -> tuple[np.ndarray, Laws] | None:
        """Each answer's error as a law (``laplace_laws.Laws``; the first array maps answers to laws): factor by
        factor for a Kronecker measurement and workload (a product's coefficients are the products of its
        factors'), else from the coefficients; None when that takes more than ``work_limit`` terms."""
        if self.method == "kronecker":
            products = self._factor_coefficients(W)
            if products is not None:
                return kronecker_laws(products, self.measurements[0].noise, work_limit)
        rows = sum(m.matrix.shape[0] for m in self.measurements)
        if W.shape[0] * rows > work_limit:
            return None
        laplace = np.concatenate([np.full(m.matrix.shape[0], m.noise == "laplace") for m in self.measurements])
        return np.arange(W.shape[0]), coefficient_laws(list(self.coefficients(W)), laplace)

    def coefficients(self, W: Matrix) -> Iterator[np.ndarray]:
        """Blocks of rows ``c = D^(1/2) A G^+ w``: each answer's error on the unit-variance noise of every
        measured row (the measurements' rows stacked in order)."""
        self._check(W)
        if self.method == "iterative":
            yield from self._iterative_coefficients(W)
            return
        for block in row_blocks(W):
            solved = self._apply(block.T)
            yield np.vstack([np.broadcast_to(m.weights, (m.matrix.shape[0],))[:, None] * (m.matrix @ solved)
                             for m in self.measurements]).T

    def _check(self, W: Matrix) -> None:
        if W.shape[1] != self.size:
            raise ValueError(f"the workload has {W.shape[1]} columns but the estimate has {self.size} cells")

    def _apply(self, X: np.ndarray) -> np.ndarray:
        """``G^+ X`` for a block of columns."""
        if self.method == "kronecker":
            scale, pinvs = self.factors
            return scale * _kron_apply(pinvs, X)
        if self.method == "groups":
            return (self._reduced._apply(self._group_means(X)) / self._group_sizes[:, None])[self.groups]
        return self._dense_parts()[0] @ X

    def _dense_parts(self) -> tuple[np.ndarray, np.ndarray]:
        if self._dense is None:
            self._dense = _dense_gram_pinv(self.measurements, self.size)
        return self._dense

    @cached_property
    def _kron_projections(self) -> list[np.ndarray | None]:
        """The projections onto each Kronecker factor's row space (None for full column rank: the identity)."""
        return [None if basis is None else basis @ basis.T for basis in self._kron_parts[2]]

    def _kronecker_products(self, W: Matrix) -> list[tuple[float, list[Matrix]]] | None:
        """``W`` as its Kronecker products in row order, each ``(weight, factors)`` over the measurement's factor
        sizes (every cell: the product of identities); None when it is not such a stack."""
        pinvs = self.factors[1]
        if isinstance(W, Weighted):
            inner = self._kronecker_products(W.base)
            return None if inner is None else [(W.weight * weight, factors) for weight, factors in inner]
        if isinstance(W, VStack):
            parts = [self._kronecker_products(block) for block in W.blocks]
            return None if any(p is None for p in parts) else [product for part in parts for product in part]
        if isinstance(W, Identity) and len(pinvs) > 1:
            W = Kronecker([Identity(p.shape[0]) for p in pinvs])
        factors = W.factors if isinstance(W, Kronecker) else [W]
        return [(1.0, factors)] if [f.shape[1] for f in factors] == [p.shape[0] for p in pinvs] else None

    def _kronecker_diagonal(self, W: Matrix) -> np.ndarray | None:
        products = self._kronecker_products(W)
        if products is None:
            return None
        scale, pinvs = self.factors
        out = []
        for weight, factors in products:
            diagonal = np.ones(1)
            for factor, pinv in zip(factors, pinvs):
                if isinstance(factor, Intervals):
                    part = interval_variances(pinv, factor.lo, factor.hi)
                else:
                    part = np.concatenate([np.sum(b * (pinv @ b.T).T, axis=1) for b in row_blocks(factor)])
                diagonal = np.multiply.outer(diagonal, part).ravel()
            out.append(weight**2 * scale * diagonal)
        return np.concatenate(out)

    def _kronecker_undetermined(self, W: Matrix) -> np.ndarray | None:
        """``undetermined`` one factor at a time: a product of rows is determined when each factor's row is (or
        one is zero); None when ``W`` is not a (stack of) Kronecker product(s) of the measurement's factor sizes."""
        products = self._kronecker_products(W)
        if products is None:
            return None
        out = []
        for _, factors in products:
            outside, zero = np.zeros(1, dtype=bool), np.zeros(1, dtype=bool)
            for factor, projection in zip(factors, self._kron_projections):
                block = np.vstack([np.zeros((0, factor.shape[1])), *row_blocks(factor)])
                norms = np.linalg.norm(block, axis=1)
                if projection is None:  # a factor of full column rank determines every row
                    missed = np.zeros(block.shape[0], dtype=bool)
                else:
                    missed = np.linalg.norm(block - block @ projection.T, axis=1) > DETERMINED_RTOL * np.maximum(
                        norms, np.finfo(float).tiny)
                outside = np.logical_or.outer(outside, missed).ravel()
                zero = np.logical_or.outer(zero, norms == 0).ravel()
            out.append(outside & ~zero)
        return np.concatenate(out)

    @cached_property
    def _rows_gram_pinv(self) -> np.ndarray | None:
        return rows_gram_pinv(self.measurements, self.size)

    def _iterative_coefficients(self, W: Matrix) -> Iterator[np.ndarray]:
        if self._rows_gram_pinv is not None:  # few measured rows: c = (B B^T)^+ B w, no iterative solve
            for block in row_blocks(W):
                yield (self._rows_gram_pinv @ _stacked_apply(self.measurements, block.T)).T
            return
        if W.shape[0] > SOLVE_LIMIT:
            raise ValueError(
                f"error bars for {W.shape[0]} answers over {self.size} cells without Kronecker structure would take "
                f"one iterative solve each (at most {SOLVE_LIMIT}): ask for fewer queries at a time"
            )
        operator, _ = stacked_system(self.measurements, self.size)
        transpose = operator.adjoint()
        with single_threaded_blas():
            for block in row_blocks(W):
                yield np.stack([lsmr(transpose, w, atol=1e-12, btol=1e-12, maxiter=20 * self.size)[0] for w in block])


@dataclass(frozen=True)
class _OnGroups:
    """A measurement's matrix on the groups of cells it cannot tell apart, with its noise weights."""

    matrix: Matrix
    weights: np.ndarray | float


def cell_groups(measurements: Sequence, n: int) -> np.ndarray:
    """A group label per cell: cells the measurements cannot tell apart (equal columns of the stacked matrix) share
    one, and least squares spreads each group's total evenly over it. Columns are compared by two random
    projections, rounded to 9 significant digits (equal columns agree to rounding; unequal ones almost surely
    differ far more)."""
    rng = np.random.default_rng(0)  # public: the groups depend on the matrices only
    probes = np.column_stack([sum(m.matrix.T @ rng.standard_normal(m.matrix.shape[0]) for m in measurements)
                              for _ in range(2)])
    scale = np.abs(probes).max(axis=0)
    keys = np.round(probes / np.where(scale > 0, scale, 1.0), 9)
    _, labels = np.unique(keys, axis=0, return_inverse=True)
    return labels.ravel()


def interval_variances(covariance: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``Var(x[lo..hi].sum())`` for each interval, from the 2-D cumulative sums of ``covariance``: O(n^2 + rows)
    instead of O(n^2) per row (all 8 million ranges of 4,096 cells in seconds)."""
    n = covariance.shape[0]
    cumulative = np.zeros((n + 1, n + 1))
    np.cumsum(np.cumsum(covariance, axis=0), axis=1, out=cumulative[1:, 1:])
    a, b = np.asarray(lo), np.asarray(hi) + 1
    return cumulative[b, b] - cumulative[a, b] - cumulative[b, a] + cumulative[a, a]


def kronecker_gram_pinvs(measurements: Sequence) -> tuple[float, list[np.ndarray]] | None:
    """``(sigma^2 / w^2, [(A_i^T A_i)^+])`` when the measurements are one (weighted) Kronecker product, or
    one 1-D matrix, with one noise level and factors of at most ``FACTOR_LIMIT`` columns; else None."""
    parts = kronecker_gram_parts(measurements)
    return None if parts is None else parts[:2]


def kronecker_gram_parts(measurements: Sequence) -> tuple[float, list[np.ndarray], list[np.ndarray | None]] | None:
    """:func:`kronecker_gram_pinvs` and each factor's row-space basis (None: full column rank)."""
    if len(measurements) != 1 or np.ndim(measurements[0].weights) != 0:
        return None
    (m,) = measurements
    A, weight = m.matrix, 1.0
    if isinstance(A, Weighted):
        A, weight = A.base, A.weight
    factors = A.factors if isinstance(A, Kronecker) else [A]
    if weight == 0.0 or max(f.shape[1] for f in factors) > FACTOR_LIMIT:
        return None
    pinvs, bases = [], []
    for factor in factors:
        root, basis = gram_inverse_root(factor)
        pinvs.append(root @ root.T)
        bases.append(basis)
    return 1.0 / (weight * float(m.weights)) ** 2, pinvs, bases


def _unweighted(A: Matrix) -> Matrix:
    return A.base if isinstance(A, Weighted) else A


def _kron_apply(pinvs: Sequence[np.ndarray], X: np.ndarray) -> np.ndarray:
    """``kron(pinvs) @ X`` one axis at a time."""
    sizes = [p.shape[0] for p in pinvs]
    tensor = X.reshape(*sizes, X.shape[1])
    for axis, pinv in enumerate(pinvs):
        tensor = np.moveaxis(np.tensordot(pinv, tensor, axes=(1, axis)), 0, axis)
    return tensor.reshape(X.shape)


def _dense_gram_pinv(measurements: Sequence, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``G^+`` from the stacked weighted rows ``A_D`` (``G = A_D^T A_D``), never from ``G`` itself: forming
    ``G`` squares the condition number, and a known total with tiny noise beside noisy counts (a ratio of
    1e7 in weights) would lose the counts' variance to rounding. ``A_D``'s rows are folded into an ``n x n``
    triangular ``R`` by QR a block at a time; then ``G^+ = V S^-2 V^T`` from the SVD of ``R``, with singular
    values below ``n eps`` of the largest treated as zero (unmeasured directions). Returns ``G^+`` and an
    orthonormal basis of the measured row space (its columns)."""
    R = np.zeros((0, n))
    for m in measurements:
        weights = np.broadcast_to(m.weights, (m.matrix.shape[0],))
        for start, block in _blocks_with_offsets(m.matrix, rows_at_least=n):
            scaled = block * weights[start : start + block.shape[0], None]
            R = scipy.linalg.qr(np.vstack([R, scaled]), mode="r", overwrite_a=True, check_finite=False)[0][:n]
    _, singular, rows = scipy.linalg.svd(R, full_matrices=False, check_finite=False)
    keep = singular > singular.max(initial=0.0) * n * np.finfo(float).eps
    scaled = rows[keep].T / singular[keep]
    return scaled @ scaled.T, rows[keep].T


def rows_gram_pinv(measurements: Sequence, size: int) -> np.ndarray | None:
    """``(B B^T)^+`` for the weighted stacked measurements ``B`` when they have at most ``DENSE_LIMIT`` rows
    (an OPT_+ strategy of a few hundred rows over many cells), else None: least squares is then
    ``x = B^T (B B^T)^+ D^(1/2) y`` and an answer's coefficients ``(B^T)^+ w = (B B^T)^+ B w``, exactly, where
    the iterative path takes one LSMR per answer."""
    count = sum(m.matrix.shape[0] for m in measurements)
    if count > DENSE_LIMIT:
        return None
    gram = np.empty((count, count))
    step = max(1, CHUNK_ENTRIES // max(size, 1))
    for start in range(0, count, step):
        stop = min(count, start + step)
        units = np.zeros((count, stop - start))
        units[np.arange(start, stop), np.arange(stop - start)] = 1.0
        gram[:, start:stop] = _stacked_apply(measurements, stacked_adjoint(measurements, units))
    values, vectors = np.linalg.eigh((gram + gram.T) / 2)
    top = values.max(initial=0.0)
    if np.any((values > ROWS_GRAM_ZERO * top) & (values < ROWS_GRAM_TRUSTED * top)):
        return None  # ill-conditioned (a row weighing far more, e.g. a known total): LSMR keeps what this would lose
    kept = values > ROWS_GRAM_ZERO * top
    return (vectors[:, kept] / values[kept]) @ vectors[:, kept].T


ROWS_GRAM_ZERO = 1e-13
"""Eigenvalues of the rows' Gram below this share of the largest are rounding (rows that repeat others)."""
ROWS_GRAM_TRUSTED = 1e-10
"""The smallest share of the largest eigenvalue the rows' Gram is trusted to solve in double precision (its
condition number is the square of the rows': about 1e-6 relative error at worst); one between ROWS_GRAM_ZERO and
this sends the solve to LSMR, as before the direct path existed."""


def _stacked_apply(measurements: Sequence, X: np.ndarray) -> np.ndarray:
    """``B X`` for the measurements' weighted stacked matrix ``B`` (rows: theirs, in order)."""
    return np.vstack([_row_weights(m)[:, None] * np.asarray(m.matrix @ X) for m in measurements])


def stacked_adjoint(measurements: Sequence, R: np.ndarray) -> np.ndarray:
    """``B^T R`` (the transpose of :func:`_stacked_apply`)."""
    offsets = np.cumsum([0] + [m.matrix.shape[0] for m in measurements])
    return sum(np.asarray(m.matrix.T @ (_row_weights(m)[:, None] * R[a:b]))
               for m, a, b in zip(measurements, offsets[:-1], offsets[1:]))


def _row_weights(measurement) -> np.ndarray:
    return np.broadcast_to(np.asarray(measurement.weights, dtype=np.float64), (measurement.matrix.shape[0],))


def row_blocks(W: Matrix) -> Iterator[np.ndarray]:
    """``W``'s rows as dense blocks of at most ``CHUNK_ENTRIES`` entries."""
    for _, block in _blocks_with_offsets(W):
        yield block


def _blocks_with_offsets(W: Matrix, rows_at_least: int = 1) -> Iterator[tuple[int, np.ndarray]]:
    m, n = W.shape
    step = max(rows_at_least, CHUNK_ENTRIES // max(n, 1))
    explicit = explicit_sparse(W, CHUNK_ENTRIES * 8)
    for start in range(0, m, step):
        stop = min(m, start + step)
        if explicit is not None:
            yield start, explicit[start:stop].toarray()
        else:
            yield start, rows(W, np.arange(start, stop))
