"""Small numerical kernels shared by the optimizers and inference."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from .matrix import Dense, Diagonal, Identity, Intervals, Matrix, Ones, Product, Ranges, Sparse, VStack, Weighted
from .algebra import gram


def gram_inverse_root(A: Matrix) -> tuple[np.ndarray, np.ndarray | None]:
    """(F, None) with F F^T = (A^T A)^{-1} when A has full column rank; otherwise (F, B) with
    F F^T = (A^T A)^+ and B an orthonormal basis of A's row space (for support checks).

    Full rank means a Cholesky factor U (A^T A = U^T U, F = U^{-1}) whose every pivot keeps more
    than n eps of its column's squared norm; a rounding-level pivot means a singular A^T A.
    """
    G = gram(A).dense()
    G = (G + G.T) / 2
    tolerance = G.shape[0] * np.finfo(float).eps
    upper = pivoted_cholesky(G, tolerance)
    if upper is not None:
        inverse, info = scipy.linalg.lapack.dtrtri(upper, lower=0)
        if info == 0:
            return inverse, None
    eigenvalues, vectors = np.linalg.eigh(G)
    keep = eigenvalues > eigenvalues.max(initial=0.0) * tolerance
    basis = vectors[:, keep]
    return basis / np.sqrt(eigenvalues[keep]), basis


def pivoted_cholesky(G: np.ndarray, share: float) -> np.ndarray | None:
    """The upper Cholesky factor of the symmetric ``G`` when every pivot keeps more than ``share`` of its column's
    squared norm (G far enough from singular for the use at hand), else None."""
    upper, info = scipy.linalg.lapack.dpotrf(G, lower=0, clean=1)
    return upper if info == 0 and np.all(np.diag(upper) ** 2 > share * np.diag(G)) else None


def preconditioned_cg(
    hess: Callable[[np.ndarray], np.ndarray], rhs: np.ndarray, inverse_diag: np.ndarray, rtol: float, max_iter: int
) -> np.ndarray:
    """Jacobi-preconditioned conjugate gradients for ``hess(x) = rhs`` (positive definite), from x = 0.

    Stops at relative residual ``rtol``, after ``max_iter`` steps, or on non-positive curvature
    (returning the last iterate, a descent direction for Newton methods).
    """
    x = np.zeros_like(rhs)
    r = rhs.copy()
    z = inverse_diag * r
    d = z.copy()
    rz = r @ z
    stop = rtol * math.sqrt(rhs @ rhs)
    for _ in range(max_iter):
        if math.sqrt(r @ r) <= stop:
            break
        hd = hess(d)
        curvature = d @ hd
        if curvature <= 0:
            break
        alpha = rz / curvature
        x += alpha * d
        r -= alpha * hd
        z = inverse_diag * r
        rz_new = r @ z
        d = z + (rz_new / rz) * d
        rz = rz_new
    return x


def explicit_sparse(matrix: Matrix, max_nonzeros: int) -> sp.csr_array | None:
    """``matrix`` as a CSR array when its structure makes that cheap (dense and sparse leaves, identity,
    ones, diagonals, intervals, boxes, weights, vertical stacks and products of these) and it (and, for
    a product, every factor and partial product) has at most ``max_nonzeros`` non-zeros; else ``None``
    (keep the implicit products). Many small blocks then cost one sparse product instead of a Python
    call per block (MWEM's per-round solves), and a workload of boxes times a partition's expansion
    is one sparse product instead of prefix sums over the whole domain per column (DAWA in 2-D)."""
    if isinstance(matrix, Weighted):
        inner = explicit_sparse(matrix.base, max_nonzeros)
        return None if inner is None else inner * matrix.weight
    if isinstance(matrix, VStack):
        parts = []
        for block in matrix.blocks:
            part = explicit_sparse(block, max_nonzeros - sum(p.nnz for p in parts))
            if part is None:
                return None
            parts.append(part)
        return sp.csr_array(sp.vstack(parts, format="csr"))
    if isinstance(matrix, Product):
        return _explicit_product(matrix.factors, max_nonzeros)
    if isinstance(matrix, Dense):
        found = sp.csr_array(matrix.array)
    elif isinstance(matrix, Sparse):
        found = matrix.matrix
    elif isinstance(matrix, Identity):
        found = sp.csr_array(sp.identity(matrix.n, format="csr"))
    elif isinstance(matrix, Diagonal):
        found = sp.csr_array(sp.diags_array(matrix.values, format="csr"))
    elif isinstance(matrix, Ones):
        if matrix.shape[0] * matrix.shape[1] > max_nonzeros:
            return None
        found = sp.csr_array(np.ones(matrix.shape))
    elif isinstance(matrix, Intervals):
        lengths = matrix.hi - matrix.lo + 1
        if lengths.sum() > max_nonzeros:
            return None
        found = _rows_of_runs(matrix.lo, lengths, np.cumsum(lengths), matrix.shape)
    elif isinstance(matrix, Ranges):
        found = _explicit_boxes(matrix, max_nonzeros)
    else:
        return None
    return found if found is not None and found.nnz <= max_nonzeros else None


def _explicit_product(factors: list[Matrix], max_nonzeros: int) -> sp.csr_array | None:
    """A product of explicit factors, multiplied from the right: the workload or strategy usually
    comes first and is the largest, so it meets the (small) product of the lineage once."""
    product = None
    for factor in reversed(factors):
        found = explicit_sparse(factor, max_nonzeros)
        if found is None:
            return None
        product = found if product is None else sp.csr_array(found @ product)
        if product.nnz > max_nonzeros:
            return None
    return product


def _runs(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[k], starts[k] + 1, ..., starts[k] + lengths[k] - 1 for every k, concatenated."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if ends.size else 0)


def _rows_of_runs(
    starts: np.ndarray, lengths: np.ndarray, row_ends: np.ndarray, shape: tuple[int, int]
) -> sp.csr_array:
    """The 0/1 matrix whose rows are unions of runs of columns: run k covers starts[k] to starts[k] +
    lengths[k] - 1; row i holds the runs from cumulative length row_ends[i - 1] to row_ends[i]."""
    indices = _runs(starts, lengths)
    indptr = np.concatenate([[0], row_ends])
    return sp.csr_array((np.ones(indices.size), indices, indptr), shape=shape)


def _explicit_boxes(boxes: Ranges, max_nonzeros: int) -> sp.csr_array | None:
    """A Ranges matrix (boxes on a row-major domain) as CSR: each box is a set of runs along the last
    axis, one per combination of its other coordinates; ``None`` past ``max_nonzeros``."""
    sides = boxes.hi - boxes.lo + 1
    sizes = sides.prod(axis=1)
    if sizes.sum() > max_nonzeros:
        return None
    strides = np.cumprod((boxes.domain_shape[1:] + (1,))[::-1])[::-1]
    owner, offsets = np.arange(sizes.size), np.zeros(sizes.size, dtype=np.int64)
    for axis in range(len(boxes.domain_shape) - 1):  # expand each box over this axis's coordinates
        counts = sides[owner, axis]
        coordinates = _runs(boxes.lo[owner, axis], counts)
        owner = np.repeat(owner, counts)
        offsets = np.repeat(offsets, counts) + coordinates * strides[axis]
    return _rows_of_runs(offsets + boxes.lo[owner, -1], sides[owner, -1], np.cumsum(sizes), boxes.shape)
