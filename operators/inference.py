"""Inference: estimate the data vector from noisy linear measurements (public post-processing).

A ``Measurement`` is a query matrix over the ROOT data vector, its noisy answers and their
noise standard deviation (one number, or one per row). Measurements taken on derived sources
map back to the root through their lineage (``map_to_root``: a reduced vector x' = P x, a
split part x_i = S_i x, any linear transform x' = T x), so one solve uses everything
(ektelo section 5.5). Public knowledge enters as a measurement with tiny noise
(``known_total``).

- ``least_squares``: argmin sum_i ||(M_i x - y_i) / sigma_i||^2, the minimum-norm solution
  (uniform within groups the measurements cannot tell apart). LSMR on the stacked, weighted
  system through implicit products; a single Kronecker measurement is solved directly by the
  Kronecker product of the factors' Gram pseudo-inverses, A^+ = kron_i (A_i^T A_i)^+ A^T.
- ``nnls``: the same objective with x >= 0, by L-BFGS-B.
- ``multiplicative_weights``: MWEM's update with the corrected sign.
- ``ahp_threshold``: AHP's rule zeroing small noisy counts.

>>> import numpy as np
>>> from kernel.matrix import Identity, Total
>>> m = [Measurement(Identity(2), np.array([1.0, 3.0]), 1.0), known_total(2, 6.0)]
>>> np.round(least_squares(m), 3)
array([2., 4.])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, aslinearoperator, lsmr

from kernel.matrix import Dense, Kronecker, Matrix, Product, Total, VStack, Weighted
from kernel.matrix.threads import single_threaded_blas
from operators.linalg import explicit_sparse, gram_inverse_root

#: Largest Kronecker factor whose Gram the direct solver forms and pseudo-inverts densely.
DIRECT_FACTOR_LIMIT = 4096
#: Largest number of non-zeros for which the stacked measurements are built as one CSR array (32 MB).
SPARSE_NONZEROS = 1 << 21


@dataclass(frozen=True, eq=False)
class Measurement:
    """Noisy answers ``answers`` ~ matrix @ x + noise with standard deviation ``noise_std``."""

    matrix: Matrix
    answers: np.ndarray
    noise_std: float | np.ndarray

    def __post_init__(self) -> None:
        answers = np.asarray(self.answers, dtype=np.float64).ravel()
        if answers.size != self.matrix.shape[0]:
            raise ValueError(f"{answers.size} answers for a matrix with {self.matrix.shape[0]} rows")
        std = np.asarray(self.noise_std, dtype=np.float64)
        if std.ndim not in (0, 1) or (std.ndim == 1 and std.size != answers.size):
            raise ValueError("noise_std must be one number or one per answer")
        if not (np.all(np.isfinite(std)) and np.all(std > 0) and np.all(np.isfinite(answers))):
            raise ValueError("answers must be finite and noise_std finite and positive")
        object.__setattr__(self, "answers", answers)
        object.__setattr__(self, "noise_std", float(std) if std.ndim == 0 else std)

    @property
    def weights(self) -> float | np.ndarray:
        """1 / noise_std: the row scaling that makes every answer's noise unit-variance."""
        return 1.0 / self.noise_std


def known_total(n: int, total: float, noise_std: float = 1e-4) -> Measurement:
    """A publicly known total as a measurement with tiny noise; keep noise_std far below the
    other measurements' (it weighs (their std / noise_std)^2 times more in least squares)."""
    return Measurement(Total(n), np.array([float(total)]), noise_std)


def map_to_root(matrix: Matrix, lineage: Sequence[Matrix]) -> Matrix:
    """A query matrix on a derived vector, as a matrix on the root vector.

    ``lineage`` lists the transformations from the root down, x_1 = T_1 x, x_2 = T_2 x_1, ...;
    the result is matrix @ T_k @ ... @ T_1 (implicit). E.g. a part of a split: [S_i]; a
    reduced vector: [P]; a part of a split of a reduced vector: [P, S_i].
    """
    return Product([matrix, *reversed(list(lineage))]) if lineage else matrix


def ahp_threshold(noisy_values, epsilon1: float, eta: float = 0.35) -> np.ndarray:
    """AHP's thresholding: noisy counts y <= eta ln(n) / eps1 become 0 (n = number of cells)."""
    y = np.asarray(noisy_values, dtype=np.float64).ravel()
    if not epsilon1 > 0:
        raise ValueError(f"epsilon1 must be positive, got {epsilon1}")
    return np.where(y > eta * math.log(y.size) / epsilon1, y, 0.0)


def _columns(measurements: Sequence[Measurement], size: int | None) -> int:
    if not measurements:
        raise ValueError("give at least one measurement")
    widths = {m.matrix.shape[1] for m in measurements} | ({int(size)} if size is not None else set())
    if len(widths) != 1:
        raise ValueError(f"measurements must all be over the same vector; got column counts {sorted(widths)}")
    return widths.pop()


def _stacked(measurements: Sequence[Measurement], n: int) -> tuple[LinearOperator, np.ndarray]:
    """The weighted system [w_i M_i] x = [w_i y_i] as a LinearOperator: one CSR array when every
    block is cheaply explicit (at most SPARSE_NONZEROS non-zeros in all), else implicit products."""
    rhs = np.concatenate([m.weights * m.answers for m in measurements])
    explicit = explicit_sparse(VStack([Weighted(m.matrix, 1.0) for m in measurements]), SPARSE_NONZEROS)
    if explicit is not None:
        weights = np.concatenate([np.broadcast_to(m.weights, m.answers.shape) for m in measurements])
        return aslinearoperator(sp.csr_array(explicit.multiply(weights[:, None]))), rhs
    blocks = [(m.matrix, m.weights) for m in measurements]
    offsets = np.cumsum([0] + [M.shape[0] for M, _ in blocks])

    def matvec(x):
        return np.concatenate([w * (M @ np.ravel(x)) for M, w in blocks])

    def rmatvec(r):
        r = np.ravel(r)
        return sum(M.T @ (w * r[a:b]) for (M, w), a, b in zip(blocks, offsets[:-1], offsets[1:]))

    operator = LinearOperator((int(offsets[-1]), n), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    return operator, rhs


def least_squares(
    measurements: Sequence[Measurement],
    size: int | None = None,
    tolerance: float = 1e-10,
    max_iterations: int | None = None,
) -> np.ndarray:
    """Minimum-norm weighted least squares estimate of the root vector.

    One Kronecker measurement (scalar noise, factors up to DIRECT_FACTOR_LIMIT) is solved
    exactly by Kronecker Gram pseudo-inverses; anything else by LSMR from x = 0 (which
    converges to the minimum-norm solution) with atol = btol = ``tolerance``, at most
    ``max_iterations`` (default max(100, 4 n): LSMR's own default, min(m, n), is too few
    when a few rows carry much larger weights, e.g. a known total).
    """
    n = _columns(measurements, size)
    direct = _direct_kronecker(measurements)
    if direct is not None:
        return direct
    operator, rhs = _stacked(measurements, n)
    limit = max(100, 4 * n) if max_iterations is None else max_iterations
    with single_threaded_blas():  # LSMR's short vector steps: a second BLAS thread only waits
        return lsmr(operator, rhs, atol=tolerance, btol=tolerance, maxiter=limit)[0]


def _direct_kronecker(measurements: Sequence[Measurement]) -> np.ndarray | None:
    if len(measurements) != 1 or not isinstance(measurements[0].noise_std, float):
        return None
    (m,) = measurements
    A, scale = m.matrix, 1.0
    if isinstance(A, Weighted):
        A, scale = A.base, A.weight
    if not isinstance(A, Kronecker) or scale == 0.0 or max(f.shape[1] for f in A.factors) > DIRECT_FACTOR_LIMIT:
        return None
    inverses = [Dense(_gram_pinv(f)) for f in A.factors]
    return Kronecker(inverses) @ (A.T @ m.answers) / scale


def _gram_pinv(A: Matrix) -> np.ndarray:
    """(A^T A)^+ densely (operators.linalg.gram_inverse_root)."""
    root, _ = gram_inverse_root(A)
    return root @ root.T


def nnls(
    measurements: Sequence[Measurement],
    size: int | None = None,
    x0: np.ndarray | None = None,
    max_iterations: int = 15000,
) -> np.ndarray:
    """Non-negative weighted least squares: argmin_{x >= 0} 0.5 sum_i ||(M_i x - y_i) / sigma_i||^2
    by L-BFGS-B (x0 = 0 unless given), to tight tolerances."""
    n = _columns(measurements, size)
    operator, rhs = _stacked(measurements, n)

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
    n = _columns(measurements, None)
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
