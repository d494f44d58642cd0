"""Small numerical kernels shared by the optimizers and inference."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from kernel.matrix import Dense, Identity, Intervals, Matrix, Ones, Sparse, VStack, Weighted


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
    ones, intervals, weights and vertical stacks of these) and it has at most ``max_nonzeros``
    non-zeros; else ``None`` (keep the implicit products). Many small blocks then cost one sparse
    product instead of a Python call per block (MWEM's per-round solves)."""
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
    if isinstance(matrix, Dense):
        found = sp.csr_array(matrix.array)
    elif isinstance(matrix, Sparse):
        found = matrix.matrix
    elif isinstance(matrix, Identity):
        found = sp.csr_array(sp.identity(matrix.n, format="csr"))
    elif isinstance(matrix, Ones):
        if matrix.shape[0] * matrix.shape[1] > max_nonzeros:
            return None
        found = sp.csr_array(np.ones(matrix.shape))
    elif isinstance(matrix, Intervals):
        lengths = matrix.hi - matrix.lo + 1
        if lengths.sum() > max_nonzeros:
            return None
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        indices = np.repeat(matrix.lo - indptr[:-1], lengths) + np.arange(indptr[-1])
        found = sp.csr_array((np.ones(indptr[-1]), indices, indptr), shape=matrix.shape)
    else:
        return None
    return found if found.nnz <= max_nonzeros else None
