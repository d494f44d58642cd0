"""OPT_0 under Gaussian noise, solved through its dual with a certified gap.

The problem (J Def. 12, section 4.2) is convex: minimize tr[X^{-1} V] over X > 0 with diag(X) = 1,
then A = any factor with A^T A = X (unit L2 columns). Its Lagrangian with multipliers lambda_i for
X_ii = 1 is minimized over X by

    X(lambda) = L^{-1/2} S^{1/2} L^{-1/2},   S = L^{1/2} V L^{1/2},   L = diag(lambda),

(the stationarity condition X^{-1} V X^{-1} = L), which gives the concave dual

    g(lambda) = 2 tr[S^{1/2}] - sum_i lambda_i,   dg/dlambda_i = X(lambda)_ii - 1.

Every lambda thus gives a lower bound g(lambda) on the optimum, and X(lambda) rescaled to unit
diagonal, X' = E X E with E = diag(X_ii)^{-1/2}, a feasible strategy whose error is an upper bound;
the search stops when the two agree to GAP. Both come from one eigendecomposition S = U R^2 U^T:
A = R^{1/2} U^T L^{-1/2} E has A^T A = X', and tr[X'^{-1} V] = sum_k b_k^T V b_k / r_k with b_k the
rows of U^T L^{1/2} E^{-1}.

The optimum is the lambda with X(lambda)_ii = 1. The search iterates log lambda_i += 2 log X_ii
(exact in one step when V is diagonal), accelerated by Anderson mixing of the last ANDERSON steps
(a mixed step that leaves the finite numbers restarts from the best point), from lambda = 1, where
X = V^{1/2} is the paper's SVD-bound start. On AllRange(1024) the gap is below 1e-6 after three
eigendecompositions, on Prefix(1024) after nine.

A singular or nearly singular V (width-w ranges, cells no query touches, row weights spanning 1e12) has
its optimum where X turns singular, which X(lambda) reaches only in the limit (the search stalled, and
dropping rank-level rows hid infinite errors). Such a V (a Cholesky pivot keeping less than CONDITION of
its column) goes to the paper's primal descent instead: L-BFGS-B on the upper-triangular Cholesky factor
with normalized columns (feasible everywhere: the paper's descent on X's entries stops at the first
non-PD trial step), from the SVD-bound start with its eigenvalues floored.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import scipy.linalg
from scipy.optimize import minimize

from ...matrix import Dense, Identity, Matrix
from ...linalg import pivoted_cholesky
from .gram import Gram

#: Relative duality gap at which the search stops (the error is then within GAP of the optimum).
GAP = 1e-7
#: Iterates mixed by Anderson acceleration.
ANDERSON = 5
#: The dual search needs every Cholesky pivot of V to keep at least this share of its column's squared norm.
CONDITION = 1e-8
#: L-BFGS-B steps of the primal descent at most (it stops earlier on its tolerance).
PRIMAL_MAXITER = 300


class DualPoint:
    """One lambda's dual bound, feasible strategy and its error, from one eigendecomposition."""

    def __init__(self, V: np.ndarray, gram: Gram, log_lambda: np.ndarray):
        self.log_lambda = log_lambda
        d = np.exp(log_lambda / 2)
        eigenvalues, U = np.linalg.eigh(d[:, None] * V * d[None, :])
        r = np.sqrt(np.maximum(eigenvalues, 0.0))
        x_diag = ((U * U) @ r) / (d * d)  # diag(X(lambda)) = diag(S^{1/2}) / lambda
        self.dual = float(2.0 * r.sum() - np.sum(d * d))
        self.step = 2.0 * np.log(x_diag)
        self.finite = bool(r.min() > 0 and np.isfinite(self.dual) and np.all(np.isfinite(self.step)))
        self.error, self.factor = math.inf, None
        if self.finite:
            e = 1.0 / np.sqrt(x_diag)
            B = U.T * (d / e)
            self.error = float(np.sum(np.sum(B.T * gram.matmat(B.T), axis=0) / r))  # tr[X'^{-1} V]
            self.factor = np.sqrt(r)[:, None] * (U.T * (e / d))


def gaussian_factor(gram: Gram, maxiter: int) -> Matrix:
    """The strategy block minimizing tr[(A^T A)^{-1} V] over unit-column A (module docstring): by the dual within
    GAP, or within ``maxiter`` dual steps, when V is well conditioned; by the primal descent otherwise."""
    n = gram.n
    if n == 1:
        return Identity(1)
    V = gram.dense()
    V = (V + V.T) / 2
    if pivoted_cholesky(V, CONDITION) is not None:  # well conditioned
        best = _dual_search(V, gram, maxiter)
        if best is not None:
            return Dense(best.factor / np.linalg.norm(best.factor, axis=0))
    return _primal_factor(gram, V)


def _dual_search(V: np.ndarray, gram: Gram, maxiter: int) -> DualPoint | None:
    """The best dual point after the gap closed or ``maxiter`` points; None if no point was finite."""
    points, steps = deque(maxlen=ANDERSON + 1), deque(maxlen=ANDERSON + 1)
    best, best_dual = None, -math.inf
    log_lambda = np.zeros(V.shape[0])
    for _ in range(max(1, maxiter)):
        point = DualPoint(V, gram, log_lambda)
        if not point.finite:
            if best is None:
                return None
            points.clear()
            steps.clear()
            log_lambda = best.log_lambda + best.step  # the plain step from the best point
            continue
        if best is None or point.error < best.error:
            best = point
        best_dual = max(best_dual, point.dual)
        if best.error - best_dual <= GAP * best.error:
            break
        points.append(log_lambda)
        steps.append(point.step)
        log_lambda = _anderson(points, steps)
    return best


def _anderson(points, steps) -> np.ndarray:
    """The next log lambda: the fixed-point step x + f(x), mixed over the kept iterates (type II Anderson)."""
    x, f = points[-1], steps[-1]
    if len(points) == 1:
        return x + f
    dX = np.diff(np.array(points), axis=0).T
    dF = np.diff(np.array(steps), axis=0).T
    gamma = np.linalg.lstsq(dF, f, rcond=None)[0]
    return x + f - (dX + dF) @ gamma


def gaussian_loss(B: np.ndarray, gram: Gram) -> tuple[float, np.ndarray]:
    """tr[X^{-1} V] for X = A^T A, A = B with unit columns, and its gradient in upper-triangular B.

    With F = A^{-T}: tr[X^{-1} V] = tr[F V F^T] and d/dA = -2 F V F^T F; normalizing columns
    projects each column's gradient off its own direction.
    """
    norms = np.sqrt(np.sum(B * B, axis=0))
    A = B / norms
    inverse, info = scipy.linalg.lapack.dtrtri(A, lower=0)
    if info != 0 or not np.all(np.isfinite(inverse)):
        return math.inf, np.zeros_like(B)
    # Triangular products (BLAS trmm) take half the flops of general ones.
    FVFt = scipy.linalg.blas.dtrmm(1.0, inverse, gram.matmat(inverse), side=0, lower=0, trans_a=1)
    grad_A = scipy.linalg.blas.dtrmm(-2.0, inverse, FVFt, side=1, lower=0, trans_a=1)
    grad = (grad_A - A * np.sum(A * grad_A, axis=0)) / norms
    return float(np.trace(FVFt)), np.triu(grad)


def _primal_factor(gram: Gram, V: np.ndarray) -> Matrix:
    """L-BFGS-B on the upper-triangular Cholesky factor, from the SVD-bound start with eigenvalues floored."""
    n = gram.n
    rows, cols = np.triu_indices(n)

    def unpack(v):
        B = np.zeros((n, n))
        B[rows, cols] = v
        return B

    def fun(v):
        loss, grad = gaussian_loss(unpack(v), gram)
        return loss, grad[rows, cols]

    eigenvalues, vectors = np.linalg.eigh(V)
    floor = max(eigenvalues.max(), 0.0) * 1e-8
    root = np.sqrt(np.maximum(eigenvalues, floor)) if floor > 0 else np.ones_like(eigenvalues)
    X = (vectors * root) @ vectors.T
    scale = 1.0 / np.sqrt(np.diag(X))
    start = scipy.linalg.cholesky(X * scale[:, None] * scale[None, :], lower=False)[rows, cols]
    result = minimize(fun, start, jac=True, method="L-BFGS-B",
                      options={"maxiter": PRIMAL_MAXITER, "ftol": 1e-12, "gtol": 1e-10})
    best = result.x if result.fun <= fun(start)[0] else start
    B = unpack(best)
    return Dense(B / np.sqrt(np.sum(B * B, axis=0)))
