"""Small numerical kernels shared by the optimizing selectors."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


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
