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
(exact in one step when V is diagonal), accelerated by Anderson mixing of the last ANDERSON steps,
from lambda = 1, where X = V^{1/2} is the paper's SVD-bound start. On AllRange(1024) the gap is
below 1e-6 after three eigendecompositions, on Prefix(1024) after nine (the paper's primal descent
over the n(n+1)/2 entries of X takes hundreds of O(n^3) steps).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ...matrix import Dense, Identity, Matrix
from .gram import Gram

#: Relative duality gap at which the search stops (the error is then within GAP of the optimum).
GAP = 1e-7
#: Iterates mixed by Anderson acceleration.
ANDERSON = 5
#: V is searched as V + RIDGE (tr V / n) I, so that cells no query touches keep lambda finite; the
#: reported error uses V itself.
RIDGE = 1e-12


class DualPoint:
    """One lambda's dual bound, feasible strategy and its error, from one eigendecomposition."""

    def __init__(self, V: np.ndarray, gram: Gram, log_lambda: np.ndarray):
        d = np.exp(log_lambda / 2)
        eigenvalues, U = np.linalg.eigh(d[:, None] * V * d[None, :])
        r = np.sqrt(np.maximum(eigenvalues, 0.0))
        diag_root = (U * U) @ r  # diag(S^{1/2})
        self.dual = float(2.0 * r.sum() - np.sum(d * d))
        x_diag = diag_root / (d * d)  # diag(X(lambda))
        self.step = 2.0 * np.log(x_diag)
        e = 1.0 / np.sqrt(x_diag)
        kept = r > r.max() * np.finfo(float).eps
        B = U[:, kept].T * (d / e)
        self.error = float(np.sum(np.sum(B.T * gram.matmat(B.T), axis=0) / r[kept]))  # tr[X'^{-1} V]
        self.factor = np.sqrt(r[kept])[:, None] * (U[:, kept].T * (e / d))


def gaussian_factor(gram: Gram, maxiter: int) -> Matrix:
    """The strategy block minimizing tr[(A^T A)^{-1} V] over unit-column A, within GAP (module docstring)."""
    n = gram.n
    if n == 1:
        return Identity(1)
    V = gram.dense()
    V = (V + V.T) / 2 + RIDGE * (np.trace(V) / n) * np.eye(n)
    log_lambda = np.zeros(n)
    points, steps = deque(maxlen=ANDERSON + 1), deque(maxlen=ANDERSON + 1)
    best, best_dual = None, -np.inf
    for _ in range(max(1, maxiter)):
        point = DualPoint(V, gram, log_lambda)
        if best is None or point.error < best.error:
            best = point
        best_dual = max(best_dual, point.dual)
        if best.error - best_dual <= GAP * best.error:
            break
        points.append(log_lambda)
        steps.append(point.step)
        log_lambda = _anderson(points, steps)
    return Dense(best.factor / np.linalg.norm(best.factor, axis=0))


def _anderson(points, steps) -> np.ndarray:
    """The next log lambda: the fixed-point step x + f(x), mixed over the kept iterates (type II Anderson)."""
    x, f = points[-1], steps[-1]
    if len(points) == 1:
        return x + f
    dX = np.diff(np.array(points), axis=0).T
    dF = np.diff(np.array(steps), axis=0).T
    gamma = np.linalg.lstsq(dF, f, rcond=None)[0]
    return x + f - (dX + dF) @ gamma
