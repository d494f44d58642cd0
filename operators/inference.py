"""Inference: estimate the data vector from noisy linear measurements (public post-processing).

Every routine reads ``operators.measurement.Measurement`` objects (query matrices over the root
data vector, noisy answers, noise kind and scale), wherever in a plan they were taken, so one
solve uses everything (ektelo section 5.5).

- ``least_squares``: argmin sum_i ||(M_i x - y_i) / sigma_i||^2, the minimum-norm solution
  (uniform within groups the measurements cannot tell apart). LSMR on the stacked, weighted
  system through implicit products; a single Kronecker measurement is solved directly by the
  Kronecker product of the factors' Gram pseudo-inverses, A^+ = kron_i (A_i^T A_i)^+ A^T; at most
  covariance.DENSE_LIMIT rows over more cells, directly by the rows' Gram, A^+ = A^T (A A^T)^+.
- ``nnls``: the same objective with x >= 0, by L-BFGS-B.
- ``multiplicative_weights``: MWEM's update with the corrected sign.
- ``ahp_threshold``: AHP's rule zeroing small noisy counts.

>>> import numpy as np
>>> from ektelo_ng.operators.matrix import Identity
>>> from ektelo_ng.operators.measurement import Measurement, known_total
>>> m = [Measurement(Identity(2), np.array([1.0, 3.0]), 1.0), known_total(2, 6.0)]
>>> np.round(least_squares(m), 3)
array([2., 4.])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.optimize
import scipy.sparse as sp
from scipy.sparse.linalg import lsmr

from .matrix import Dense, Kronecker, Matrix, Weighted
from ..kernel.matrix.threads import single_threaded_blas
from .covariance import DENSE_LIMIT, kronecker_gram_pinvs, rows_gram_pinv, stacked_adjoint
from .linalg import explicit_sparse
from .measurement import SPARSE_NONZEROS, Measurement, columns, stacked_system

def ahp_threshold(noisy_values, epsilon1: float, eta: float = 0.35) -> np.ndarray:
    """AHP's thresholding: noisy counts y <= eta ln(n) / eps1 become 0 (n = number of cells)."""
    y = np.asarray(noisy_values, dtype=np.float64).ravel()
    if not epsilon1 > 0:
        raise ValueError(f"epsilon1 must be positive, got {epsilon1}")
    return np.where(y > eta * math.log(y.size) / epsilon1, y, 0.0)


def least_squares(
    measurements: Sequence[Measurement],
    size: int | None = None,
    tolerance: float = 1e-10,
    max_iterations: int | None = None,
) -> np.ndarray:
    """Minimum-norm weighted least squares estimate of the root vector.

    One Kronecker measurement (scalar noise, factors up to operators.covariance.FACTOR_LIMIT) is solved
    exactly by Kronecker Gram pseudo-inverses; at most covariance.DENSE_LIMIT rows over more cells by the
    rows' Gram, x = B^T (B B^T)^+ D^(1/2) y (B the weighted rows); anything else by LSMR from x = 0 (which
    converges to the minimum-norm solution) with atol = btol = ``tolerance``, at most
    ``max_iterations`` (default max(100, 4 n): LSMR's own default, min(m, n), is too few
    when a few rows carry much larger weights, e.g. a known total).
    """
    n = columns(measurements, size)
    direct = _direct_kronecker(measurements)
    if direct is not None:
        return direct
    operator, rhs = stacked_system(measurements, n)
    few_rows = rows_gram_pinv(measurements, n) if n > DENSE_LIMIT else None
    if few_rows is not None:  # a few hundred rows over many cells (OPT_+): x = B^T (B B^T)^+ D^(1/2) y
        return stacked_adjoint(measurements, (few_rows @ rhs)[:, None])[:, 0]
    limit = max(100, 4 * n) if max_iterations is None else max_iterations
    with single_threaded_blas():  # LSMR's short vector steps: a second BLAS thread only waits
        return lsmr(operator, rhs, atol=tolerance, btol=tolerance, maxiter=limit)[0]


def _direct_kronecker(measurements: Sequence[Measurement]) -> np.ndarray | None:
    """x_hat = G^+ A^T D y with G^+ from its Kronecker factors (operators.covariance)."""
    if len(measurements) != 1 or not isinstance(_unweighted(measurements[0].matrix), Kronecker):
        return None
    factors = kronecker_gram_pinvs(measurements)
    if factors is None:
        return None
    scale, pinvs = factors
    (m,) = measurements
    return scale * (Kronecker([Dense(p) for p in pinvs]) @ (m.matrix.T @ (m.answers * m.weights**2)))


def _unweighted(matrix: Matrix) -> Matrix:
    return matrix.base if isinstance(matrix, Weighted) else matrix


def nnls(
    measurements: Sequence[Measurement],
    size: int | None = None,
    x0: np.ndarray | None = None,
    max_iterations: int = 15000,
) -> np.ndarray:
    """Non-negative weighted least squares: argmin_{x >= 0} 0.5 sum_i ||(M_i x - y_i) / sigma_i||^2
    by L-BFGS-B (x0 = 0 unless given), to tight tolerances."""
    n = columns(measurements, size)
    operator, rhs = stacked_system(measurements, n)

    def objective(x):
        residual = operator.matvec(x) - rhs
        return 0.5 * float(residual @ residual), operator.rmatvec(residual)

    start = np.zeros(n) if x0 is None else np.clip(np.asarray(x0, dtype=np.float64).ravel(), 0.0, None)
    with single_threaded_blas():  # as in least_squares
        result = scipy.optimize.minimize(
            objective,
            start,
            jac=True,
            method="L-BFGS-B",
            bounds=scipy.optimize.Bounds(0.0, np.inf),
            options={"maxiter": max_iterations, "maxfun": 2 * max_iterations, "ftol": 1e-15, "gtol": 1e-10},
        )
    return result.x


def multiplicative_weights(
    measurements: Sequence[Measurement],
    total: float,
    x0: np.ndarray | None = None,
    iterations: int = 50,
) -> np.ndarray:
    """MWEM's multiplicative weights inference (ektelo Table 1 with the sign corrected).

    ``iterations`` passes; each applies, for every measurement in turn,
    x <- x * exp(M^T (y - M x) / (2 N)) and rescales x to sum to N = ``total`` (public or
    noisy). A query answered too low by x (y > M x) raises the cells it covers. Noise levels are
    not used, as in MWEM. Runs in the log domain, so large corrections cannot overflow.
    """
    n = columns(measurements, None)
    if not total > 0:
        raise ValueError(f"multiplicative weights needs a positive total, got {total}")
    start = np.full(n, total / n) if x0 is None else np.asarray(x0, dtype=np.float64).ravel()
    if start.size != n or np.any(start < 0) or not start.sum() > 0:
        raise ValueError("x0 must be a non-negative vector over the root with a positive sum")
    with np.errstate(divide="ignore"):
        log_x = np.log(start)
    log_x -= log_x.max()
    x = np.exp(log_x)
    x *= total / x.sum()
    products = [(m.answers, *_products(m.matrix)) for m in measurements]
    with single_threaded_blas():  # thousands of small products
        for _ in range(iterations):
            for answers, forward, backward in products:
                log_x += backward(answers - forward(x)) / (2.0 * total)
                log_x -= log_x.max()
                np.exp(log_x, out=x)
                x *= total / x.sum()
    return x


def _products(matrix: Matrix) -> tuple:
    """``(x -> M x, r -> M^T r)``, on one CSR array and its transpose when M is cheaply explicit
    (MWEM repeats these products many thousand times: no per-call wrapper overhead)."""
    explicit = explicit_sparse(matrix, SPARSE_NONZEROS)
    if explicit is None:
        transpose = matrix.T
        return matrix.__matmul__, transpose.__matmul__
    if explicit.shape[0] == 1:  # one query (MWEM's usual measurement): plain numpy, no sparse dispatch
        row = explicit.toarray()[0]
        return (lambda x: row @ x), (lambda r: row * r[0])
    transpose = sp.csr_array(explicit.T)
    return explicit.__matmul__, transpose.__matmul__
