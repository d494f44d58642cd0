"""Hierarchical least squares: one consistent estimate of every unit of a tree (nation > states > counties).

Each unit v of a tree has a vector x_v (its cells, or its answers), and a parent's is the sum of its children's.
Each measured unit has a *local* unbiased estimate z_v of x_v with covariance C_v (its own measurement alone, e.g.
least squares of its strategy's noisy answers: C_v = (A^T S_v^-1 A)^-1), and the units' noises are independent.
:func:`tree_gls` returns the generalized least-squares estimate of every x_v from all the z_v together, under the
constraint that children sum to their parent: the best linear unbiased estimate (Gauss-Markov), the same as
stacking every measurement over the leaves' unknowns and solving once (``tests/test_hierarchy.py`` checks this
against numpy's ``lstsq`` on random trees), and its exact covariance. Two passes over the tree, so the work is
linear in the number of units (cubic only in the vector's length k, which is 1 when the covariances share a shape,
below):

- **up** (leaves to root): a unit's subtree estimate combines its own z_v with the sum s of its children's subtree
  estimates (covariance S, the sum of theirs): u_v = z_v + C_v (C_v + S)^-1 (s - z_v), P_v = C_v (C_v + S)^-1 S.
  A unit without a measurement takes s and S.
- **down** (root to leaves): the root's subtree estimate is final; a child's final estimate spreads its parent's
  correction over the siblings in proportion to their covariances: x_c = u_c + P_c S^-1 (x_p - s), so the children
  sum to the parent exactly (up to rounding), with covariance F_c = P_c - P_c S^-1 P_c + P_c S^-1 F_p S^-1 P_c.

**Shared shape.** When every unit's covariance is a multiple c_v Q of one matrix (the same strategy at every unit,
each level with its own noise scale), the gains are scalars and Q cancels: the estimate is the k = 1 tree run on
each coordinate alone, and each coordinate's variance is f_v Q_jj. So the tree can run on a unit's workload answers
(W z_v) rather than its cells, with ``scales`` c_v (:func:`shared_gls`): for SF1 at county level 4,151 answers a
unit instead of 500,480 cells. With a rank-deficient strategy, z_v = A^+ y_v estimates the part of x_v the strategy
sees, and the same holds for every workload the strategy supports.

:func:`unit_weights` gives every unit's weight in every other unit's estimate in the shared-shape case (the tree run
on each unit's impulse), and :func:`largest_shares` the largest part one unit's noise makes of an estimate's
variance: what a sound Laplace interval is tightened by.

:func:`nonnegative_integers` is optional post-processing (no privacy cost, biased): non-negative integers that
still add up, children to parents, and the intervals then describe the unrounded estimate.

>>> tree = Hierarchy([-1, 0, 0])
>>> fit = shared_gls(tree, np.array([[10.0], [4.0], [5.0]]), np.ones(3))
>>> fit.answers.ravel().round(3).tolist(), fit.factors.round(3).tolist()
([9.667, 4.333, 5.333], [0.667, 0.667, 0.667])
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """A tree of units numbered parents first: ``parent[0] == -1`` (the root) and ``parent[v] < v`` otherwise."""

    parent: np.ndarray

    def __post_init__(self) -> None:
        parent = np.asarray(self.parent, dtype=np.int64)
        if parent.ndim != 1 or parent.size == 0 or parent[0] != -1:
            raise ValueError("a hierarchy needs parent[0] == -1: unit 0 is the root")
        if np.any(parent[1:] < 0) or np.any(parent[1:] >= np.arange(1, parent.size)):
            bad = np.flatnonzero((parent[1:] < 0) | (parent[1:] >= np.arange(1, parent.size)))[:5] + 1
            raise ValueError(f"unit(s) {bad.tolist()} must have a parent numbered before them (0 <= parent[v] < v)")
        parent.setflags(write=False)
        object.__setattr__(self, "parent", parent)

    @property
    def units(self) -> int:
        return int(self.parent.size)

    @cached_property
    def depth(self) -> np.ndarray:
        """Each unit's distance from the root (0 for the root)."""
        depth = np.zeros(self.units, dtype=np.int64)
        for v in range(1, self.units):  # parents first, so the parent's depth is known
            depth[v] = depth[self.parent[v]] + 1
        return depth

    @cached_property
    def children(self) -> np.ndarray:
        """How many children each unit has."""
        return np.bincount(self.parent[1:], minlength=self.units)


@dataclass(frozen=True)
class TreeEstimate:
    """Every unit's estimate (units x k x r: r columns sharing one covariance) and covariance (units x k x k)."""

    estimates: np.ndarray
    covariances: np.ndarray


def _symmetric(M: np.ndarray) -> np.ndarray:
    return (M + np.swapaxes(M, -1, -2)) / 2


def _right_solve(B: np.ndarray, S: np.ndarray) -> np.ndarray:
    """B S^-1 for symmetric S (stacked)."""
    return np.swapaxes(np.linalg.solve(S, np.swapaxes(B, -1, -2)), -1, -2)


def tree_gls(hierarchy: Hierarchy, estimates, covariances, measured=None) -> TreeEstimate:
    """The hierarchical GLS estimate of every unit from local estimates ``estimates`` (units x k, or units x k x r
    for r vectors with one covariance) with covariances ``covariances`` (units x k x k, positive definite where
    ``measured``; default: every unit measured). A unit without a measurement needs children."""
    z = np.asarray(estimates, dtype=np.float64)
    columns = z.ndim == 3
    z = z if columns else z[..., None]
    C = np.asarray(covariances, dtype=np.float64)
    units, k = hierarchy.units, z.shape[1]
    if z.shape[0] != units or C.shape != (units, k, k):
        raise ValueError(f"expected estimates of shape ({units}, k[, r]) and covariances ({units}, k, k) for "
                         f"{units} units, got {z.shape} and {C.shape}")  # fmt: skip
    measured = np.ones(units, bool) if measured is None else np.asarray(measured, dtype=bool)
    empty = np.flatnonzero(~measured & (hierarchy.children == 0))
    if empty.size:
        raise ValueError(f"unit(s) {empty[:5].tolist()} have neither a measurement nor children: nothing estimates them")
    depth, parent = hierarchy.depth, hierarchy.parent
    up_z, up_P = np.where(measured[:, None, None], z, 0.0), np.where(measured[:, None, None], C, 0.0)
    sums, sum_cov = np.zeros_like(up_z), np.zeros_like(up_P)
    levels = [np.flatnonzero(depth == d) for d in range(int(depth.max()) + 1)]
    for d in reversed(range(len(levels))):
        inner = levels[d][hierarchy.children[levels[d]] > 0]
        alone, both = inner[~measured[inner]], inner[measured[inner]]
        up_z[alone], up_P[alone] = sums[alone], sum_cov[alone]
        if both.size:
            gain = _right_solve(C[both], C[both] + sum_cov[both])  # C (C + S)^-1
            up_z[both] = z[both] + gain @ (sums[both] - z[both])
            up_P[both] = _symmetric(gain @ sum_cov[both])
        if d:
            np.add.at(sums, parent[levels[d]], up_z[levels[d]])
            np.add.at(sum_cov, parent[levels[d]], up_P[levels[d]])
    final_z, final_F = up_z.copy(), up_P.copy()
    for at in levels[1:]:
        p = parent[at]
        gain = _right_solve(up_P[at], sum_cov[p])  # P_c S^-1
        final_z[at] = up_z[at] + gain @ (final_z[p] - sums[p])
        spread = final_F[p] - sum_cov[p]  # F_c = P_c + K (F_p - S) K^T
        final_F[at] = _symmetric(up_P[at] + gain @ spread @ np.swapaxes(gain, -1, -2))
    return TreeEstimate(final_z if columns else final_z[..., 0], final_F)


@dataclass(frozen=True)
class SharedFit:
    """:func:`shared_gls`'s result: every unit's answers (units x r), and the factor f_v by which each of its
    answers' variance is its unit variance (the variance of that answer's local estimate at scale 1)."""

    answers: np.ndarray
    factors: np.ndarray

    def variances(self, unit_variances) -> np.ndarray:
        """Each answer's exact variance (units x r), from the r answers' variances at scale 1."""
        return self.factors[:, None] * np.asarray(unit_variances, dtype=np.float64)[None, :]


def shared_gls(hierarchy: Hierarchy, answers, scales, measured=None) -> SharedFit:
    """The hierarchical GLS of units whose local answers (units x r) have covariances ``scales[v]`` times one
    shared matrix (the same strategy and workload at every unit; ``scales``: each unit's noise variance factor)."""
    a = np.asarray(answers, dtype=np.float64)
    c = np.asarray(scales, dtype=np.float64)
    if a.ndim != 2 or c.shape != (a.shape[0],):
        raise ValueError(f"expected answers of shape (units, r) and one scale per unit, got {a.shape} and {c.shape}")
    valid = c[np.ones(c.size, bool) if measured is None else np.asarray(measured, bool)]
    if not np.all(np.isfinite(valid) & (valid > 0)):
        raise ValueError("every measured unit's scale must be a positive finite variance factor")
    fit = tree_gls(hierarchy, a[:, None, :], np.where(np.isfinite(c) & (c > 0), c, 1.0)[:, None, None], measured)
    return SharedFit(fit.estimates[:, 0, :], fit.covariances[:, 0, 0])


#: :func:`unit_weights` holds units x units numbers: up to 25 million (200 MB), past the 3,195 units of counties.
MAX_WEIGHTED_UNITS = 5000


def unit_weights(hierarchy: Hierarchy, scales, measured=None) -> np.ndarray:
    """G (units x units) of :func:`shared_gls`: unit v's estimate is sum_u G[v, u] z_u (an unmeasured unit's
    column is 0); the tree run on every unit's impulse."""
    if hierarchy.units > MAX_WEIGHTED_UNITS:
        raise ValueError(f"the weights of {hierarchy.units} units would hold {hierarchy.units**2:,} numbers, over "
                         f"{MAX_WEIGHTED_UNITS}^2")  # fmt: skip
    return shared_gls(hierarchy, np.eye(hierarchy.units), scales, measured).answers


def largest_shares(hierarchy: Hierarchy, scales, measured=None) -> np.ndarray:
    """For each unit v, the largest share of its estimate's variance that one unit's noise makes:
    max_u G_vu^2 c_u / sum_u G_vu^2 c_u (c: ``scales``; the sum is v's variance factor)."""
    G = unit_weights(hierarchy, scales, measured)
    parts = G**2 * np.asarray(scales, dtype=np.float64)[None, :]
    return parts.max(axis=1) / parts.sum(axis=1)


def _simplex_integers(target: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Non-negative integers near ``target`` (children x r) whose columns sum to ``totals`` (r, integers >= 0):
    the Euclidean projection onto {c >= 0, sum c = total}, then the largest remainders rounded up."""
    m = target.shape[0]
    ordered = -np.sort(-target, axis=0)
    shift = (np.cumsum(ordered, axis=0) - totals) / np.arange(1, m + 1)[:, None]
    active = np.sum(ordered - shift > 0, axis=0)  # at least 1 when total >= 0
    threshold = np.take_along_axis(shift, np.maximum(active - 1, 0)[None, :], axis=0)[0]
    projected = np.maximum(target - threshold, 0.0)
    base = np.floor(projected)
    short = (totals - base.sum(axis=0)).astype(np.int64)  # 0 <= short < m, up to rounding
    rank = np.argsort(np.argsort(-(projected - base), axis=0, kind="stable"), axis=0)
    return (base + (rank < short[None, :])).astype(np.int64)


def nonnegative_integers(hierarchy: Hierarchy, estimates) -> np.ndarray:
    """Post-processing (no privacy cost, biased): non-negative integers (units x r) near a consistent estimate,
    children still summing to their parent in every column. Top-down: the root rounded and clipped at 0, then
    each unit's children as the nearest non-negative reals with their parent's total, rounded by largest
    remainders. Each column is done on its own: integer answers of one unit are consistent with each other only
    when the columns are its cells."""
    x = np.asarray(estimates, dtype=np.float64)
    out = np.zeros(x.shape, dtype=np.int64)
    out[0] = np.maximum(np.rint(x[0]), 0)
    order = np.argsort(hierarchy.parent[1:], kind="stable") + 1  # children grouped by parent, parents first
    groups = np.split(order, np.flatnonzero(np.diff(hierarchy.parent[order])) + 1)
    for children in groups:
        out[children] = _simplex_integers(x[children], out[hierarchy.parent[children[0]]])
    return out
