"""OPT_M: weighted-marginal strategies M(theta) for unions of Kronecker products (J sections 7, 8).

A subset a of the d attributes is an integer in [2^d] (attribute 1 = most significant bit);
here a vector over the lattice is an array of shape (2,) * d whose axis i is attribute i.
Every marginal Gram G(u) = sum_a u(a) H(a) has the same eigenspaces (J Thm 9); with
c(a) = prod_{i not in a} n_i and mult(a) = prod_{i in a} (n_i - 1) (ERRATUM 2: the printed
multiplicity prod n_i is wrong), the eigenvalue on space a is

    kappa_u(a) = (Y u)(a) = sum_{b superset of a} c(b) u(b)

so Y u is a superset-sum (zeta) transform and Y^{-1} the matching Moebius transform: O(d 2^d)
per product instead of the paper's dense O(4^d) triangular matrices. Then, exactly for any
conjunctive workload (its Gram's trace against every marginal Gram is that of its marginal
approximation G(w), J Thm 10):

    ||W M(theta)^+||_F^2 = sum_a mult(a) kappa_w(a) / kappa_theta(a),   kappa_theta = Y theta^2,

finite iff kappa_theta > 0 wherever mult * kappa_w > 0 (ERRATUM 1: the printed Thm 11 drops
the factor n = prod n_i of this sum). The gradient with respect to theta^2 is
-Y^T[mult kappa_w / kappa_theta^2], with Y^T r = c * (subset-sum of r). The pseudo-inverse
of G(u) is the eigen form G(Y^{-1} kappa_u^+) (ERRATUM 3: J Thm 8's generalized inverse is not one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import Bounds, minimize

from ....kernel.matrix.threads import single_threaded_blas
from .gram import Gram, Term, is_identity_or_total, product_terms
from ..strategy import Noise

MAXITER = 1000

#: Lattices up to this many attributes get the closed-form marginal SVD bound.
MAX_LATTICE_ATTRIBUTES = 26


class Lattice:
    """The 2^d marginals of a domain with attribute sizes n_1..n_d."""

    def __init__(self, sizes: Sequence[int]):
        self.sizes = tuple(int(n) for n in sizes)
        self.d = len(self.sizes)
        self.shape = (2,) * self.d
        self.c = _outer([(n, 1) for n in self.sizes])
        self.mult = _outer([(1, n - 1) for n in self.sizes])

    def Y(self, u: np.ndarray) -> np.ndarray:
        """Eigenvalues kappa_u = Y u of G(u)."""
        return superset_sum(self.c * u)

    def Y_inverse(self, kappa: np.ndarray) -> np.ndarray:
        return superset_moebius(kappa) / self.c

    def Y_transpose(self, r: np.ndarray) -> np.ndarray:
        return self.c * subset_sum(r)

    def subsets(self, index: tuple[int, ...]) -> tuple[int, ...]:
        """Attribute positions of the lattice point ``index``."""
        return tuple(i for i, bit in enumerate(index) if bit)


def _outer(pairs: Sequence[tuple[float, float]]) -> np.ndarray:
    out = np.ones(())
    for pair in pairs:
        out = np.multiply.outer(out, np.asarray(pair, dtype=np.float64))
    return out


def _along(f: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    view = f.reshape(2**axis, 2, -1)
    return view[:, 0], view[:, 1]


def superset_sum(f: np.ndarray) -> np.ndarray:
    """g(a) = sum over b containing a of f(b), one attribute at a time: O(d 2^d)."""
    g = np.array(f, dtype=np.float64)
    for axis in range(g.ndim):
        low, high = _along(g, axis)
        low += high
    return g


def superset_moebius(g: np.ndarray) -> np.ndarray:
    """The inverse of ``superset_sum``."""
    f = np.array(g, dtype=np.float64)
    for axis in range(f.ndim):
        low, high = _along(f, axis)
        low -= high
    return f


def subset_sum(f: np.ndarray) -> np.ndarray:
    """g(b) = sum over a contained in b of f(a) (the transpose of ``superset_sum``)."""
    g = np.array(f, dtype=np.float64)
    for axis in range(g.ndim):
        low, high = _along(g, axis)
        high += low
    return g


def marginal_approximation(terms: Sequence[Term], lattice: Lattice) -> np.ndarray:
    """The weights w with tr[G(u) W^T W] = tr[G(u) G(w)] for all u (J Thm 10).

    Each factor Gram V is replaced by b I + c 1 1^T with the same trace and sum; the
    Kronecker product of those expands into marginal weights. Only nonzero combinations are
    enumerated, so a marginal workload costs one entry per product.
    """
    w = np.zeros(lattice.shape)
    for weight, factors in terms:
        entries: dict[tuple[int, ...], float] = {(): weight**2}
        for factor, n in zip(factors, lattice.sizes):
            gram = Gram.of(factor)
            if n == 1:
                ones_part, identity_part = gram.trace, 0.0
            else:
                ones_part = (gram.total - gram.trace) / (n * n - n)
                identity_part = gram.trace / n - ones_part
            entries = {
                key + (bit,): value * part
                for key, value in entries.items()
                for bit, part in ((0, ones_part), (1, identity_part))
                if part != 0.0
            }
        for key, value in entries.items():
            w[key] += value
    return w


class MarginalObjective:
    """theta -> ||M(theta)||_K^2 ||W M(theta)^+||_F^2 and its gradient, for one workload.

    Only the eigenspaces with mult * kappa_w > 0 enter the sum (for low-order workloads a
    tiny fraction of the lattice), so beyond the two transforms the work is on those alone.
    """

    def __init__(self, kappa_w: np.ndarray, lattice: Lattice, noise: Noise):
        self.lattice, self.noise = lattice, noise
        weights = (lattice.mult * kappa_w).ravel()
        self.needed = np.flatnonzero(weights > 0)
        self.weights = weights[self.needed]

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        lattice = self.lattice
        kappa = lattice.Y(theta**2).ravel()[self.needed]
        if np.any(kappa <= 0):
            return math.inf, np.zeros_like(theta)
        trace = float(np.sum(self.weights / kappa))
        r = np.zeros(theta.size)
        r[self.needed] = self.weights / kappa**2
        d_trace = -2.0 * theta * lattice.Y_transpose(r.reshape(theta.shape))
        if self.noise == "laplace":
            total = float(theta.sum())
            return total**2 * trace, total**2 * d_trace + 2.0 * total * trace
        norm = float(np.sum(theta**2))
        return norm * trace, norm * d_trace + 2.0 * trace * theta


def gaussian_closed_form(kappa_w: np.ndarray, lattice: Lattice) -> tuple[np.ndarray, bool]:
    """theta = sqrt(Y^{-1} sqrt(Y w)) (J Thm 13), negative squares clipped; True if none were."""
    squares = lattice.Y_inverse(np.sqrt(np.maximum(kappa_w, 0.0)))
    scale = max(float(np.abs(squares).max()), 1e-300)
    valid = bool(squares.min() >= -1e-12 * scale)
    return np.sqrt(np.maximum(squares, 0.0)), valid


def marginal_svdb(W) -> float | None:
    """SVDB of a workload of identity and total blocks (a marginal workload) in closed form on any number of
    cells (J Thm 12, corrected multiplicities), or None for other workloads."""
    terms = product_terms(W)
    d = len(terms[0][1])
    if d > MAX_LATTICE_ATTRIBUTES or not all(is_identity_or_total(f) for _, fs in terms for f in fs):
        return None
    lattice = Lattice([f.shape[1] for f in terms[0][1]])
    return lattice_svdb(lattice.Y(marginal_approximation(terms, lattice)), lattice)


def lattice_svdb(kappa_w: np.ndarray, lattice: Lattice) -> float:
    """SVDB = (1/n) (sum_a mult(a) sqrt(kappa_w(a)))^2 (J Thm 12 with ERRATUM 2)."""
    n = math.prod(lattice.sizes)
    return float(np.sum(lattice.mult * np.sqrt(np.maximum(kappa_w, 0.0))) ** 2 / n)


def optimize_theta(
    kappa_w: np.ndarray,
    lattice: Lattice,
    noise: Noise,
    rng: np.random.Generator,
    restarts: int = 1,
) -> tuple[np.ndarray, float]:
    """Minimize the marginal loss over theta >= 0 (L-BFGS-B); returns (theta, loss).

    Gaussian starts from the closed form, optimal already when valid (the problem is convex
    in theta^2 on sum theta^2 = 1). The Laplace problem has many local minima: besides the
    closed form it tries ``restarts`` random points theta(a) = U(0, 1) / sqrt(c(a)), which
    give every marginal an equal share of the eigenvalues (c(a) theta(a)^2 ~ U^2); on the
    journal's Example 17 they reach the best optimum several times more often than U(0, 1).
    """
    objective = MarginalObjective(kappa_w, lattice, noise)
    start, valid = gaussian_closed_form(kappa_w, lattice)
    if noise == "gaussian" and valid:
        return start, objective(start)[0]
    starts = [start]
    if noise == "laplace":
        starts += [rng.uniform(0.0, 1.0, size=lattice.shape) / np.sqrt(lattice.c) for _ in range(restarts)]
    best, best_loss = start, objective(start)[0]
    with single_threaded_blas():
        for theta0 in starts:
            theta, loss = _minimize(theta0, objective)
            if loss < best_loss:
                best, best_loss = theta, loss
    return best, best_loss


def _minimize(theta0: np.ndarray, objective: MarginalObjective) -> tuple[np.ndarray, float]:
    shape = objective.lattice.shape

    def fun(flat):
        loss, grad = objective(flat.reshape(shape))
        return loss, grad.ravel()

    # 5 correction pairs: a random start on 2^20 points took 30 s instead of 45 s with 10, to a
    # slightly lower error; Example 17 reaches its optimum as often.
    result = minimize(fun, theta0.ravel(), jac=True, method="L-BFGS-B", bounds=Bounds(0.0, np.inf),
                      options={"maxiter": MAXITER, "ftol": 1e-12, "gtol": 1e-12, "maxcor": 5})
    theta = np.maximum(result.x.reshape(shape), 0.0)
    return theta, objective(theta)[0]


def apply_eigen(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum_a values(a) P_a x for x shaped like the domain, P_a the eigenprojector of space a.

    P_a = kron_i (mean over attribute i if a_i = 0, minus the mean if a_i = 1). One attribute
    at a time, branches whose eigenvalues are all zero are skipped, so a strategy supported on
    low-order marginals never builds high-order residuals.
    """
    return _apply_eigen(values, x, 0)


def _apply_eigen(values: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    if values.ndim == 0:
        return float(values) * x
    mean = x.mean(axis=axis, keepdims=True)
    out = np.zeros(x.shape)
    if values[0].any():
        out += _apply_eigen(values[0], mean, axis + 1)
    if values[1].any():
        out += _apply_eigen(values[1], x - mean, axis + 1)
    return out
