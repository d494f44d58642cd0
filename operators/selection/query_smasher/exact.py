"""The exact subworkload solver: the optimal Gaussian strategy for one Gram, with a certificate.

Problem (Yuan et al., QuerySmasher Eq. 4): given the weighted Gram ``G`` of a subworkload,
minimise ``tr(G V^+)`` over PSD ``V`` whose range contains ``range(G)`` with ``V_ii <= 1``.

We solve its Lagrangian dual. Writing ``G = Z0 Z0^T`` (``Z0 = U Lambda^(1/2)`` from the
positive eigenpairs of ``G``, so we work in ``range(G)``) and ``S(w) = Z0^T diag(w) Z0``::

    L* = max_{w >= 0}  phi(w) = 2 tr S(w)^(1/2) - sum(w)

``phi`` is concave (the square root is operator concave); its gradient is ``diag(X) - 1``
with ``X = Z0 S^(-1/2) Z0^T`` and its Hessian has the closed form (Daleckii-Krein)
``-H v = diag(Z ((Z^T diag(v) Z) o K) Z^T)``, ``Z = Z0 Q``, ``K_kl = 1/(s_k s_l (s_k + s_l))``
for ``S = Q diag(s^2) Q^T``. We maximise with Bertsekas' projected Newton method for the
bounds ``w >= 0`` (many ``w_i`` are 0 at the optimum: those cells' diagonal constraint is
slack), solving Levenberg-Marquardt-damped Newton systems (``-H`` is singular whenever there
are more cells than ``r(r+1)/2``) with Jacobi-preconditioned conjugate gradients on
Hessian-vector products (``O(n r^2)`` each, never the ``n^2 r^2`` Hessian), and an Armijo
search along the projection arc. Typical solves take 5-30 Newton steps.

Every iterate certifies the optimum: with ``f = tr S(w)^(1/2)``,
``f^2 / sum(w) <= L* <= f max_i X_ii``; the upper value is achieved by the returned
strategy ``V = X / max_i X_ii``, for which ``B = diag(s^(-1/2)) Z^T / sqrt(max X_ii)`` and
``B^+ = U Lambda^(-1/2) Q diag(s^(1/2)) sqrt(max X_ii)``. (The lower bound holds for every
feasible ``V``, also one whose range leaves ``range(G)``: ``|M W^(1/2)|_* <= |M V^(+/2)|_F
|V^(1/2) W^(1/2)|_F`` with ``M = G^(1/2)``.) The solve stops at relative gap ``tol`` or when
the objective stops improving in floating point (gaps of 1e-10 to ~1e-8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...linalg import preconditioned_cg
from .solutions import DenseSolution

#: Eigenvalues of G below this fraction of the largest count as zero (outside the range).
RANK_TOL = 1e-10
#: ``S(w)`` counts as singular (outside the dual's domain) when its smallest eigenvalue is at most this
#: fraction of its largest. The dual's supremum is never on that boundary (``phi`` grows like ``sqrt(w_i)``
#: into the interior), but a projected step that clips ``w`` onto a face where ``S(w)`` is singular gets
#: round-off eigenvalues (~1e-16 relative or less) from ``eigh``, hence ``X_ii ~ 1e20`` and a useless
#: strategy, and the iteration cannot climb back in floating point. Below ``RANK_TOL``, so ``S(1)`` passes.
PD_TOL = 1e-12
#: Armijo sufficient-increase constant and the cap on conjugate-gradient steps.
ARMIJO = 1e-4
CG_MAX_ITER = 500
#: Levenberg-Marquardt damping of the Newton systems: start, floor (divided by 10 after a full step).
DAMPING_START = 1e-3
DAMPING_MIN = 1e-12


@dataclass
class _Point:
    """The dual at one ``w``: eigen-decomposition of ``S(w)`` and the quantities derived from it."""

    w: np.ndarray
    s: np.ndarray  # sqrt of the eigenvalues of S(w)
    q: np.ndarray  # eigenvectors of S(w)
    z: np.ndarray  # Z0 Q
    diag_x: np.ndarray
    phi: float

    @property
    def grad(self) -> np.ndarray:
        return self.diag_x - 1.0

    @property
    def lower(self) -> float:
        f = float(self.s.sum())
        return f * f / float(self.w.sum())

    @property
    def upper(self) -> float:
        return float(self.s.sum()) * float(self.diag_x.max())


def _evaluate(z0: np.ndarray, w: np.ndarray) -> _Point | None:
    """``phi(w)`` and its pieces, or ``None`` if ``S(w)`` is not (numerically) positive definite."""
    theta, q = np.linalg.eigh(z0.T @ (w[:, None] * z0))
    if theta[0] <= PD_TOL * theta[-1]:
        return None
    s = np.sqrt(theta)
    z = z0 @ q
    diag_x = (z * z) @ (1.0 / s)
    return _Point(w=w, s=s, q=q, z=z, diag_x=diag_x, phi=2.0 * float(s.sum()) - float(w.sum()))


def _newton_direction(p: _Point, free: np.ndarray, fixed: np.ndarray, damping: float, rtol: float) -> np.ndarray:
    """Solve ``(-H + damping D)_FF d = grad_F`` (``D = diag(-H)``) by preconditioned conjugate gradients.

    The damping keeps the system positive definite where ``-H`` is singular: ``phi`` is
    linear along ``w``-directions that leave ``S(w)`` unchanged (always when the number of
    cells exceeds ``r(r+1)/2``), and there the bounds ``w >= 0``, not curvature, stop the step.
    Variables at their bound (``~free``) move along the scaled gradient, ``fixed`` ones not at all.
    """
    s, z = p.s, p.z
    k = 1.0 / (np.outer(s, s) * (s[:, None] + s[None, :]))
    zz = z * z
    h0 = np.where(fixed, 1.0, np.sum((zz @ k) * zz, axis=1))

    def hess(v: np.ndarray) -> np.ndarray:
        e = z.T @ (v[:, None] * z)
        return np.where(free, np.sum((z @ (e * k)) * z, axis=1) + damping * h0 * v, 0.0)

    rhs = np.where(free, p.grad, 0.0)
    precond = np.where(free, 1.0 / ((1.0 + damping) * h0), 0.0)
    x = preconditioned_cg(hess, rhs, precond, rtol, CG_MAX_ITER)
    return np.where(free, x, np.where(fixed, 0.0, p.grad / h0))


def solve_exact(gram: np.ndarray, shape: Sequence[int], tol: float = 1e-8, max_iter: int = 300) -> DenseSolution:
    """The optimal strategy for the subworkload with Gram ``gram`` (cells in C order of ``shape``).

    Returns a :class:`DenseSolution` whose ``loss`` (achieved) and ``lower`` (certified)
    bracket the optimum within relative ``tol`` (or the floating-point limit, ~1e-10).
    """
    gram = np.asarray(gram, dtype=np.float64)
    lam, u = np.linalg.eigh((gram + gram.T) / 2.0)
    if lam[-1] <= 0:
        raise ValueError("the subworkload Gram is zero: nothing to measure")
    keep = lam > RANK_TOL * lam[-1]
    lam, u = lam[keep], u[:, keep]
    # cells no query reads have z0_i = 0: their w stays 0 (their constraint is slack)
    norms = np.sum(u * u * lam, axis=1)
    fixed = norms <= RANK_TOL * norms.max()
    # scale so that the best multiple of the uniform start is w = 1: S(1) = Lambda, f = sum sqrt(lambda)
    scale = (float(np.sum(np.sqrt(lam))) / int(np.sum(~fixed))) ** 2
    lam = lam / scale
    z0 = u * np.sqrt(lam)
    point = _evaluate(z0, np.where(fixed, 0.0, 1.0))
    best_lower, damping = point.lower, DAMPING_START
    for _ in range(max_iter):
        best_lower = max(best_lower, point.lower)
        gap = (point.upper - best_lower) / best_lower
        if gap <= tol:
            break
        w, grad = point.w, point.grad
        eps = min(1e-3 * float(w.max()), float(np.linalg.norm(w - np.maximum(w + grad, 0.0))))
        free = ~fixed & ~((w <= eps) & (grad < 0))
        direction = _newton_direction(point, free, fixed, damping, rtol=min(0.1, math.sqrt(gap)))
        alpha, accepted = 1.0, None
        while alpha > 1e-12:
            w_new = np.maximum(w + alpha * direction, 0.0)
            trial = _evaluate(z0, w_new)
            if trial is not None and trial.phi >= point.phi + ARMIJO * float(grad @ (w_new - w)):
                accepted = trial
                break
            alpha /= 2.0
        if accepted is None or accepted.phi <= point.phi:
            break  # no further progress in floating point
        damping = max(damping / 10.0, DAMPING_MIN) if alpha == 1.0 else min(damping * 10.0, 1.0)
        point = accepted
    best_lower = max(best_lower, point.lower)
    m = float(point.diag_x.max())
    b = (point.z / np.sqrt(point.s)).T / math.sqrt(m)
    b_pinv = ((u / np.sqrt(lam)) @ point.q) * np.sqrt(point.s) * math.sqrt(m)
    return DenseSolution(shape, b, b_pinv, loss=point.upper * scale, lower=best_lower * scale)
