"""OPT_0: strategies for one explicit (1-D) workload block (J section 4).

Laplace: the p-Identity family A(Theta) = [I; Theta] D, D = diag(1 / (1 + 1^T Theta)), whose
columns all have L1 norm 1, so the objective is just C(Theta) = tr[(A^T A)^{-1} V], minimized
over Theta >= 0 (J Def. 13, 14) by projected L-BFGS (operators/nonnegative.py).

The paper evaluates C in O(p n^2) with a dense V. Here V is only applied to n x p blocks, so a
structured Gram (prefix, all-range, width-w, identity, total: O(n) per column) brings the cost
to O(n p^2 + p^3). With s = 1 + 1^T Theta, S = diag(s), Phi = Theta S, M = I_p + Theta Theta^T
and K = (I + Theta^T Theta)^{-1} = I - Theta^T M^{-1} Theta (Woodbury):

    (A^T A)^{-1} = S K S
    C = sum_j s_j^2 V_jj - tr[M^{-1} Phi V Phi^T]
    dC/dTheta = -2 Theta K (S V S) K + 1 g^T,   g = 2 diag(K S V)

and with Q = V Phi^T (the only product with V), P = M^{-1} Q^T, R = M^{-1} Theta:
    Theta K (S V S) K = P S - (P Phi^T) R,      diag(K S V)_j = s_j V_jj - sum_k Theta_kj P_kj.

Gaussian: the convex problem min tr[X^{-1} V] s.t. diag(X) = 1 (J Def. 12), solved through its dual,
or by the paper's primal descent when V is singular or nearly so (module ``gaussian``).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from ...matrix import Dense, Diagonal, HStack, Identity, Intervals, Matrix, Ones, Product, Total, VStack
from ....kernel.matrix.threads import single_threaded_blas
from ... import algebra
from ...linalg import gram_inverse_root
from ...nonnegative import minimize_nonnegative
from .gaussian import gaussian_factor
from .gram import Gram
from ..strategy import Noise

#: Iteration caps: projected L-BFGS steps for Laplace, dual steps for Gaussian (both stop earlier on their tolerance).
LAPLACE_MAXITER = 1000
GAUSSIAN_MAXITER = 100
#: The Laplace search stops when its loss fell by less than LAPLACE_TOLERANCE of itself over LAPLACE_WINDOW steps.
LAPLACE_TOLERANCE = 1e-3
LAPLACE_WINDOW = 100
#: Largest default p (see default_p).
MAX_P = 128
#: Up to this size the reported error of a p-Identity comes from a dense Cholesky of A^T A:
#: the Woodbury form cancels large terms when Theta has large entries (relative error 1e-6
#: seen at n = 64, against 1e-15 for the dense solve of the well-conditioned A^T A).
DENSE_ERROR_LIMIT = 2048


class PIdentity(VStack):
    """The p-Identity strategy [I; Theta] D: n + p rows, every column of L1 norm exactly 1."""

    def __init__(self, theta: np.ndarray):
        theta = np.asarray(theta, dtype=np.float64)
        if theta.ndim != 2 or theta.shape[0] < 1 or not np.all(np.isfinite(theta)) or theta.min() < 0:
            raise ValueError("p-Identity needs a finite, non-negative p x n parameter matrix with p >= 1")
        self.theta = theta
        self.scale = 1.0 + theta.sum(axis=0)
        super().__init__([Diagonal(1.0 / self.scale), Dense(theta / self.scale)])


@algebra.pinv.register
def _pidentity_pinv(A: PIdentity) -> Matrix:
    """A^+ [y1; y2] = S (y1 + Theta^T M^{-1} (y2 - Theta y1)), M = I + Theta Theta^T: O((n + p) p) per column.

    Same as S (I + Theta^T Theta)^{-1} (y1 + Theta^T y2), but without forming Theta^T y2:
    optimized Theta can have entries ~1e6 (cells measured only through Theta), where the
    Woodbury form cancels large terms (error 7e-5 against 8e-11 here, on AllRange(12)).
    """
    theta = A.theta
    p, n = theta.shape
    m_inv_theta = scipy.linalg.solve(np.eye(p) + theta @ theta.T, theta, assume_a="pos")
    select = HStack([Identity(n), Ones(n, p) * 0.0])
    correction = Product([Dense(m_inv_theta.T), HStack([Dense(-theta), Identity(p)])])
    return Product([Diagonal(A.scale), algebra.Sum([select, correction])])


def pidentity_loss(theta: np.ndarray, gram: Gram) -> tuple[float, np.ndarray]:
    """C(Theta) = tr[(A^T A)^{-1} V] and dC/dTheta for the p-Identity strategy (module docstring).

    Four p x p by p x n products and one structured V @ (n x p). (Treating the optimized Theta,
    about 5% non-zero, as a sparse matrix was measured no faster at n = 4096, p = 256.)
    """
    p = theta.shape[0]
    s = 1.0 + theta.sum(axis=0)
    phi = theta * s
    Q = gram.matmat(phi.T)  # V Phi^T, the only product with V: n x p
    # M = I + Theta Theta^T has eigenvalues >= 1, so an explicit inverse is accurate; it also
    # avoids LAPACK triangular solves, which are pathologically slow with threaded OpenBLAS.
    try:
        m_inv = np.linalg.inv(np.eye(p) + theta @ theta.T)
    except np.linalg.LinAlgError:  # Theta so large (~1e5 on AllRange(8)) that M rounds to singular: no loss here
        return math.inf, np.zeros_like(theta)
    F = phi @ Q  # Phi V Phi^T
    P = m_inv @ Q.T  # M^{-1} Phi V
    loss = float(s**2 @ gram.diag - np.sum(m_inv * F.T))
    # (P Phi^T) R = M^{-1} F^T M^{-1} Theta, with the p x p factor first.
    grad = -2.0 * (P * s - (m_inv @ F.T @ m_inv) @ theta)
    grad += 2.0 * (s * gram.diag - np.sum(theta * P, axis=0))
    return loss, grad


def default_p(n: int) -> int:
    """The paper's p = n / 16, but at least min(8, n / 2) and at most 128.

    Small p gets trapped: on AllRange(64), p = 4 ended at the identity (Theta = 0, a KKT
    point) or a poor minimum in 6 of 10 random starts, p = 8 in none. Large p is slow: a step
    costs O(n p^2); on AllRange(4096), p = 128 reached RMSE 14.50 in 600 steps (60 s) while
    p = 256 was at 15.7 after 250 steps (130 s).
    """
    return max(min(n // 16, MAX_P), min(8, max(1, n // 2)))


def optimize_factor(
    gram: Gram,
    noise: Noise,
    rng: np.random.Generator,
    p: int | None = None,
    restarts: int = 1,
    start: Matrix | None = None,
    maxiter: int | None = None,
) -> Matrix:
    """OPT_0 on one attribute's Gram: a sensitivity-normalized strategy block.

    All-ones Grams get Total and multiples of I get I (both optimal: they attain the SVD
    bound). Otherwise Laplace returns a p-Identity (p = 1 for I/T predicates, else default_p),
    the best of ``restarts`` random starts plus ``start`` when it is a p-Identity of the right
    shape; Gaussian returns a factor of the convex optimum (within a certified gap when V is well
    conditioned; deterministic, so restarts do not apply).
    ``maxiter`` caps the iterations: projected L-BFGS steps (Laplace) or dual steps (Gaussian).
    """
    if noise not in ("laplace", "gaussian"):
        raise ValueError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
    if gram.total_only:
        return Total(gram.n)
    if gram.identity_only:
        return Identity(gram.n)
    with single_threaded_blas():
        if noise == "gaussian":
            return gaussian_factor(gram, maxiter or GAUSSIAN_MAXITER)
        return _laplace_factor(gram, rng, p, restarts, start, maxiter or LAPLACE_MAXITER)


def _laplace_factor(
    gram: Gram, rng: np.random.Generator, p: int | None, restarts: int, start: Matrix | None, maxiter: int
) -> Matrix:
    if p is None:
        p = 1 if gram.identity_or_total else default_p(gram.n)
    starts = [rng.uniform(0.0, 1.0, size=(p, gram.n)) for _ in range(max(1, restarts))]
    if isinstance(start, PIdentity) and start.theta.shape == (p, gram.n):
        starts[0] = start.theta
    best, best_loss = None, math.inf
    for theta0 in starts:
        theta, loss = _minimize_pidentity(theta0, gram, maxiter)
        if loss < best_loss:
            best, best_loss = theta, loss
    return PIdentity(best)


def _minimize_pidentity(theta0: np.ndarray, gram: Gram, maxiter: int) -> tuple[np.ndarray, float]:
    shape = theta0.shape

    def fun(flat):
        loss, grad = pidentity_loss(flat.reshape(shape), gram)
        return loss, grad.ravel()

    found = minimize_nonnegative(fun, theta0, maxiter, LAPLACE_TOLERANCE, LAPLACE_WINDOW)
    return found.x.reshape(shape), found.loss


def factor_error(A: Matrix, gram: Gram, noise: Noise) -> float:
    """||A||_K^2 tr[(A^T A)^+ V]: one attribute's factor of the error (inf if A does not support V)."""
    if isinstance(A, Identity):
        return gram.trace
    if isinstance(A, Ones) and A.shape[0] == 1:
        return gram.total / gram.n**2 if _supported(gram.trace, gram.total / gram.n) else math.inf
    if isinstance(A, PIdentity) and noise == "laplace" and gram.n > DENSE_ERROR_LIMIT:
        return pidentity_loss(A.theta, gram)[0]
    with single_threaded_blas():
        root, basis = gram_inverse_root(A)
        if basis is not None and not _supported(gram.trace, np.sum(basis * gram.matmat(basis))):
            return math.inf
        return _sensitivity2(A, noise) * float(np.sum(root * gram.matmat(root)))


def row_errors(A: Matrix, rows: Intervals, noise: Noise) -> np.ndarray:
    """factor_error for each row r of an interval matrix on its own: ||A||_K^2 r^T (A^T A)^+ r.

    One product rows @ F with F F^T = (A^T A)^+ gives them all (inf for rows outside A's row space).
    """
    lengths = (rows.hi - rows.lo + 1).astype(np.float64)  # ||r||^2 of a 0/1 row
    if isinstance(A, Identity):
        return lengths
    with single_threaded_blas():
        root, basis = gram_inverse_root(A)
        errors = _sensitivity2(A, noise) * np.sum((rows @ root) ** 2, axis=1)
        if basis is not None:
            captured = np.sum((rows @ basis) ** 2, axis=1)
            errors[~_supported(lengths, captured)] = math.inf
    return errors


def _sensitivity2(A: Matrix, noise: Noise) -> float:
    return A.sensitivity("l1" if noise == "laplace" else "l2") ** 2


def _supported(total, captured):
    """A query (or Gram) lies in A's row space when its projection keeps all its squared norm."""
    return total - captured <= 1e-9 * np.maximum(total, 1.0)
