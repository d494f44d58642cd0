"""ResidualPlanner: optimal Gaussian measurement of marginal workloads (Xiao et al., 2023).

For a workload of marginals, the optimal linear Gaussian mechanism (for any regular loss)
measures the residual ``R_A`` of every set ``A`` in the closure of the workload with noise
``N(0, s_A Sigma_A)`` (see :mod:`operators.residual`). Selection only chooses the scales
``s_A``; the privacy cost is ``pcost = sum_A p_A / s_A`` and every cell of the marginal on
``W`` has variance ``Var(W) = sum_{A subset W} C_{W,A} s_A`` with
``C_{W,A} = p_A prod_{j in W \\ A} n_j^-2``.

Weight convention (one for every loss): the weight ``w_W`` of a workload marginal
*multiplies* its cell variance, so a larger weight asks for more accuracy.

- ``loss="sum"``: minimise ``sum_W w_W #cells(W) Var(W)`` (weighted total squared error),
  closed form.
- ``loss="max"``: minimise ``max_W w_W Var(W)`` (weighted maximum cell variance), solved
  exactly (to ~1e-9 relative duality gap) by a projected Newton method, see
  :func:`solve_max_variance`.
- ``loss=callable``: any convex, non-decreasing function of the vector of per-cell
  variances of the workload marginals (in workload order): ``f(v) -> (value, gradient)``,
  minimised at pcost 1 with L-BFGS over ``log s``. Weights are not used (put them in ``f``).

Selection takes no budget: every figure a strategy reports (error, variances, scales) is at unit noise,
pcost 1 (``rho``-zCDP with ``rho = pcost / 2 = 1/2``), and ``at(budget)`` gives them at a budget
(``operators.budget``: a ``ZCDP``, or an ``ApproxDP`` read as the rho that implies it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from functools import cached_property
from typing import Literal, Union

import numpy as np
import scipy.optimize
import scipy.sparse as sp

from ...kernel.domain import Domain
from .. import measure
from ..budget import Budget, for_noise
from ..domains import DomainLike, as_domain
from ..linalg import preconditioned_cg
from ..marginal_estimate import MarginalEstimate
from ..measurement import Measurement
from ..residual import (
    ResidualReconstruction,
    Subset,
    SubsetFamily,
    SubsetNormalizer,
    cell_covariance,
    cell_variance,
    normalize_subset,
)
from . import residual_hosts as hosting
from .strategy import Strategy

LossFunction = Callable[[np.ndarray], tuple[float, np.ndarray]]
Loss = Union[Literal["sum", "max"], LossFunction]
MarginalSpec = Union[Iterable[Union[str, int]], str, int]


# ---------------------------------------------------------------------------------------
# The problem: closure, p_A, and the variance map of the workload
# ---------------------------------------------------------------------------------------
class ResidualProblem:
    """A marginal workload over a domain: its closure, ``p_A``, #cells, and the variance map.

    ``workload_ids[k]`` is the closure id of the k-th workload marginal (duplicates allowed);
    ``variances(s)`` gives every closure member's cell variance for scales ``s``.
    """

    def __init__(self, domain: Domain, marginals: Iterable[MarginalSpec]):
        self.domain = domain
        self.sizes = domain.sizes
        groups = _workload_rows(domain, marginals)
        self.family = SubsetFamily.closure_of_rows({r: rows for r, (_, rows) in groups.items()}, len(domain))
        self.workload_ids = np.empty(sum(len(where) for where, _ in groups.values()), dtype=np.int64)
        for where, rows in groups.values():
            self.workload_ids[where] = self.family.ids(rows)
        self.p = self.family.pcosts(self.sizes)
        self.cells = self.family.cells(self.sizes)
        self.incidence = self.family.incidence(self.sizes)

    @cached_property
    def workload(self) -> tuple[Subset, ...]:
        sets = self.family.sets
        return tuple(sets[i] for i in self.workload_ids)

    @cached_property
    def variance_matrix(self) -> sp.csr_matrix:
        """``V[W, A] = prod_{j in W \\ A} n_j^-2`` over the closure: ``Var = V @ (p * s)``."""
        return self.incidence.variance_matrix()

    def variances(self, scales: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
        """Cell variance of closure members ``ids`` (default: all) under the scales."""
        matrix = self.variance_matrix if ids is None else self.variance_matrix[ids]
        return matrix @ (self.p * scales)


def _workload_rows(domain: Domain, marginals: Iterable[MarginalSpec]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Workload marginals grouped by size: ``{r: (positions in the workload, (k_r, r) sorted rows)}``.

    Attributes given by position are checked and sorted with numpy (workloads can have
    millions of marginals); names, and domains with size-1 attributes (dropped from every
    marginal), take the per-marginal path through :func:`normalize_subset`.
    """
    items = [(m,) if isinstance(m, (str, int, np.integer)) else m for m in marginals]
    if not items:
        raise ValueError("the workload needs at least one marginal")
    d = len(domain)
    trivial = any(n == 1 for n in domain.sizes)
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    subsets: dict[int, list[tuple[int, Subset]]] = {}
    groups: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in np.unique(lengths).tolist():
        where = np.flatnonzero(lengths == r)
        rows = np.array([items[i] for i in where]).reshape(len(where), r)
        if r == 0:
            groups[0] = (where, np.zeros((len(where), 0), dtype=np.int64))
        elif rows.dtype.kind in "iu" and not trivial:
            rows = np.sort(rows.astype(np.int64), axis=1)
            if rows.size and (rows.min() < 0 or rows.max() >= d):
                bad = rows[np.any((rows < 0) | (rows >= d), axis=1)][0]
                raise ValueError(f"attribute position out of range 0..{d - 1} in marginal {tuple(bad.tolist())}")
            if r > 1 and np.any(rows[:, 1:] == rows[:, :-1]):
                bad = rows[np.any(rows[:, 1:] == rows[:, :-1], axis=1)][0]
                raise ValueError(f"attributes repeated in marginal {tuple(bad.tolist())}")
            groups[r] = (where, rows)
        else:
            normalize = SubsetNormalizer(domain)
            for i in where.tolist():
                subset = normalize(items[i])
                subsets.setdefault(len(subset), []).append((i, subset))
    for r, members in subsets.items():
        where = np.array([i for i, _ in members], dtype=np.int64)
        rows = np.array([subset for _, subset in members], dtype=np.int64).reshape(len(members), r)
        if r in groups:
            where, rows = np.concatenate([groups[r][0], where]), np.concatenate([groups[r][1], rows])
        groups[r] = (where, rows)
    return groups


# ---------------------------------------------------------------------------------------
# Selection: weighted sum of variances (closed form)
# ---------------------------------------------------------------------------------------
def _select_sum(problem: ResidualProblem, weights: np.ndarray) -> np.ndarray:
    """Scales minimising ``sum_W w_W #cells(W) Var(W)`` at pcost 1.

    With ``v_A = sum_{W superset A} w_W #cells(W) C_{W,A}`` the loss is ``sum_A v_A s_A`` and
    the cost ``sum_A p_A / s_A``; Lagrange gives ``s_A = S sqrt(p_A / v_A)`` with
    ``S = sum_A sqrt(v_A p_A)`` and optimal loss ``S^2``.
    """
    u = np.zeros(len(problem.family))
    np.add.at(u, problem.workload_ids, weights * problem.cells[problem.workload_ids])
    v = problem.p * (problem.variance_matrix.T @ u)
    total = np.sum(np.sqrt(v * problem.p))
    return total * np.sqrt(problem.p / v)


# ---------------------------------------------------------------------------------------
# Selection: weighted max variance (utility-constrained convex program)
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MaxVarianceSolution:
    """Result of :func:`solve_max_variance`.

    ``scales`` are at pcost 1 and ``value`` = ``max_W Var(W) / b_W`` at those scales (the
    optimal pcost of the utility-constrained program ``Var(W) <= b_W``). ``multipliers`` are
    the dual variables ``lambda_W >= 0`` per constrained closure id (``bound_ids``) and
    ``lower_bound`` the dual value they certify: ``lower_bound <= optimum <= value``.
    """

    scales: np.ndarray
    value: float
    lower_bound: float
    multipliers: np.ndarray
    iterations: int


def solve_max_variance(
    problem: ResidualProblem, bound_ids: np.ndarray, bounds: np.ndarray, tol: float = 1e-10, max_iter: int = 200
) -> MaxVarianceSolution:
    """Solve ``min sum_A p_A / s_A  s.t.  Var(W) <= b_W (W in bound_ids)``.

    Substituting ``t_A = s_A p_A / phi_A`` (``phi_A = prod_{i in A} n_i^-2``) turns the
    constraints into ``y_W = sum_{A subset W} t_A <= b_W / phi_W`` and the objective into
    ``sum_A a_A / t_A`` with ``a_A = p_A^2 / phi_A``. Over the closure, ``y = Z t`` with the
    0/1 subset (zeta) matrix, which Mobius inversion undoes: ``t = M y``. In the variables
    ``y`` the program is a smooth convex minimisation under *simple upper bounds*
    ``y_W <= beta_W`` (other closure members free), solved by Bertsekas' projected Newton
    method: variables at their bound with a gradient pushing outward are fixed, the Newton
    system on the others is solved by Jacobi-preconditioned conjugate gradients (Hessian
    ``M^T diag(2a/t^3) M`` applied with sparse products), and a projected Armijo search keeps
    ``t > 0``. Stops when the duality gap certified by ``lambda = max(0, -grad_y)`` on the
    tight bounds is below ``tol`` (relative), or when the objective stalls.

    The start is feasible and already has most bounds tight: the weighted-sum solution
    (weights ``1/beta``) shrunk to fit, then either every bound raised at once (valid, and
    optimal, for e.g. unweighted downward-closed workloads: one iteration) or each ``t_A``
    repeatedly scaled up by the least slack among its supersets. Typical runs take 5-15
    iterations, also with weights spread over many orders of magnitude.
    """
    bound_ids = np.asarray(bound_ids, dtype=np.int64)
    bounds = np.asarray(bounds, dtype=np.float64)
    m = len(problem.family)
    inv_n2 = 1.0 / np.asarray(problem.sizes, dtype=np.float64) ** 2
    phi = problem.family.product_over(inv_n2)
    a = problem.p**2 / phi
    beta = bounds / phi[bound_ids]
    zeta = problem.incidence.zeta()
    zeta_t = zeta.T.tocsr()
    mobius = problem.incidence.mobius()
    mobius_t = mobius.T.tocsr()
    bounded = np.zeros(m, dtype=bool)
    bounded[bound_ids] = True
    if not np.all(bounds > 0) or not np.all(np.isfinite(bounds)):
        raise ValueError("variance bounds must be positive and finite")
    if not np.all(zeta_t @ bounded.astype(np.float64) > 0):
        raise ValueError("every closure member must lie under a bounded marginal (else the program is unbounded)")

    # feasible start (see the docstring)
    u = np.zeros(m)
    u[bound_ids] = 1.0 / beta
    t = np.sqrt(a / (zeta_t @ u))
    y = zeta @ t
    t *= np.min(beta / y[bound_ids])
    y = zeta @ t
    raised = y.copy()
    raised[bound_ids] = beta
    t_raised = mobius @ raised
    if np.all(t_raised > 0) and np.sum(a / t_raised) < np.sum(a / t):
        y, t = raised, t_raised
    else:
        t = _raise_to_bounds(t, zeta, zeta_t, bound_ids, beta)
        y = zeta @ t
    scale = y.copy()  # z = y / scale: bounded z <= 1, everything O(1)
    scale[bound_ids] = beta
    z = y / scale
    f = np.sum(a / t)

    def lower_bound(grad_y: np.ndarray, tight: np.ndarray) -> tuple[float, np.ndarray]:
        """Dual value of ``lambda_W = max(0, -d f / d y_W)`` on the tight bounds, 0 elsewhere
        (valid for any ``lambda >= 0``; at the optimum the loose bounds have ``lambda = 0``)."""
        lam = np.where(tight[bound_ids], np.maximum(0.0, -grad_y[bound_ids]), 0.0)
        lam_full = np.zeros(m)
        lam_full[bound_ids] = lam
        g = zeta_t @ lam_full
        return 2.0 * np.sum(np.sqrt(a * g)) - beta @ lam, lam

    iterations = 0
    for iterations in range(1, max_iter + 1):
        grad_y = -(mobius_t @ (a / t**2))
        grad = grad_y * scale
        step = z - np.where(bounded, np.minimum(z - grad, 1.0), z - grad)
        eps = min(1e-3, float(np.max(np.abs(step))))
        fixed = bounded & (z >= 1.0 - eps) & (grad < 0)
        free = ~fixed
        lower, lam = lower_bound(grad_y, fixed)
        if f - lower <= tol * f:
            break
        curv = 2.0 * a / t**3
        diag = scale**2 * (zeta_t @ curv)  # diag(M^T D M) = |M|^T D = Z^T D

        def hess(v: np.ndarray) -> np.ndarray:
            full = np.zeros(m)
            full[free] = v
            return (scale * (mobius_t @ (curv * (mobius @ (scale * full)))))[free]

        direction = np.zeros(m)
        direction[fixed] = -grad[fixed] / diag[fixed]
        if np.any(free):
            forcing = min(0.1, math.sqrt(max((f - lower) / f, 0.0)))
            direction[free] = preconditioned_cg(hess, -grad[free], 1.0 / diag[free], forcing, max_iter=500)
        alpha, accepted = 1.0, False
        for _ in range(60):
            z_new = z + alpha * direction
            z_new[bounded] = np.minimum(z_new[bounded], 1.0)
            t_new = mobius @ (scale * z_new)
            if np.all(t_new > 0):
                f_new = np.sum(a / t_new)
                if f_new <= f + 1e-4 * (grad @ (z_new - z)):
                    accepted = True
                    break
            alpha *= 0.5
        if not accepted or f - f_new <= 1e-15 * f:
            if accepted:
                z, t, f = z_new, t_new, f_new
            break
        z, t, f = z_new, t_new, f_new

    s = t * phi / problem.p
    value = f
    return MaxVarianceSolution(
        scales=s * value, value=value, lower_bound=lower, multipliers=lam, iterations=iterations
    )


def _raise_to_bounds(
    t: np.ndarray, zeta: sp.csr_matrix, zeta_t: sp.csr_matrix, bound_ids: np.ndarray, beta: np.ndarray, rounds: int = 30
) -> np.ndarray:
    """Improve a feasible ``t`` by scaling each ``t_A`` with the least slack ``beta_W / y_W``
    among its bounded supersets ``W``: every ``y_W`` stays within its bound (each term of the
    sum grows by at most ``beta_W / y_W``) and the objective ``sum a / t`` decreases."""
    ratio = np.full(zeta.shape[0], np.inf)
    starts = zeta_t.indptr[:-1]  # row A of zeta_t lists the supersets W of A (A itself included)
    for _ in range(rounds):
        y = zeta @ t
        ratio[bound_ids] = beta / y[bound_ids]
        factor = np.minimum.reduceat(ratio[zeta_t.indices], starts)
        if np.max(factor) < 1 + 1e-3:
            break
        t = t * np.maximum(factor, 1.0)
    return t


def _select_max(problem: ResidualProblem, weights: np.ndarray) -> np.ndarray:
    """Scales minimising ``max_W w_W Var(W)`` at pcost 1 (bounds ``Var(W) <= 1 / w_W``)."""
    bound = np.full(len(problem.family), np.inf)
    np.minimum.at(bound, problem.workload_ids, 1.0 / weights)
    ids = np.flatnonzero(np.isfinite(bound))
    solution = solve_max_variance(problem, ids, bound[ids])
    if solution.value - solution.lower_bound > 1e-6 * solution.value:
        raise RuntimeError(
            f"max-variance selection did not converge: value {solution.value}, dual bound {solution.lower_bound}"
        )
    return solution.scales


# ---------------------------------------------------------------------------------------
# Selection: a general convex loss of the workload variances
# ---------------------------------------------------------------------------------------
def _select_convex(problem: ResidualProblem, loss: LossFunction, start: np.ndarray) -> np.ndarray:
    """Scales minimising ``loss(Var(W) for W in workload)`` subject to pcost 1.

    Parametrised by ``u = log s`` and normalised to pcost 1 (``s = e^u sum_A p_A e^-u_A``), so
    the problem is unconstrained; solved by L-BFGS from the weighted-sum solution.
    """
    rows = problem.variance_matrix[problem.workload_ids]
    p = problem.p

    def fun(u: np.ndarray) -> tuple[float, np.ndarray]:
        e = np.exp(u - u.max())
        total = np.sum(p / e)
        s = e * total
        value, grad_v = loss(rows @ (p * s))
        h = p * (rows.T @ np.asarray(grad_v, dtype=np.float64))
        return float(value), h * s - (p / e) * (h @ e)

    result = scipy.optimize.minimize(
        fun, np.log(start), jac=True, method="L-BFGS-B", options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-12}
    )
    e = np.exp(result.x - result.x.max())
    return e * np.sum(p / e)


# ---------------------------------------------------------------------------------------
# The strategy
# ---------------------------------------------------------------------------------------
class ResidualPlannerStrategy(Strategy):
    """The selected plan: a noise scale ``s_A`` for the residual of every closure set ``A``.

    All figures are at unit noise: measuring ``R_A x + N(0, s_A Sigma_A)`` for every ``A`` costs pcost 1
    (rho = 1/2); at a budget of pcost ``c`` every variance is divided by ``c`` (``at``).
    """

    noise = "gaussian"

    def __init__(
        self,
        problem: ResidualProblem,
        weights: np.ndarray,
        scales: np.ndarray,
        loss: Loss,
    ):
        self._problem = problem
        self.domain: Domain = problem.domain
        self.weights = weights
        self.loss = loss
        self._scales = scales  # at pcost 1

    @property
    def workload(self) -> tuple[Subset, ...]:
        """The workload marginals as sorted position tuples, in the order given."""
        return self._problem.workload

    # ---- Strategy -------------------------------------------------------------------
    @property
    def num_queries(self) -> int:
        """Total number of cells of the workload marginals."""
        return int(round(float(np.sum(self._problem.cells[self._problem.workload_ids]))))

    def workload_variances(self) -> np.ndarray:
        """Per-cell variance of each workload marginal, in workload order."""
        return self._problem.variances(self._scales, self._problem.workload_ids)

    def expected_error(self) -> float:
        """Weighted total squared error ``sum_W w_W #cells(W) Var(W)`` (plain total if unweighted)."""
        cells = self._problem.cells[self._problem.workload_ids]
        return float(np.sum(self.weights * cells * self.workload_variances()))

    def max_variance(self) -> float:
        """Largest per-cell variance over the workload marginals (unweighted)."""
        return float(np.max(self.workload_variances()))

    def objective(self) -> float:
        """Value of the selection loss: weighted sum, weighted max, or the callable's value."""
        if self.loss == "sum":
            return self.expected_error()
        if self.loss == "max":
            return float(np.max(self.weights * self.workload_variances()))
        return float(self.loss(self.workload_variances())[0])

    # ---- noise scales and budget ------------------------------------------------------
    @property
    def residual_sets(self) -> tuple[Subset, ...]:
        """The closure of the workload: every set whose residual is measured."""
        return self._problem.family.sets

    def noise_scales(self) -> dict[Subset, float]:
        """``{A: s_A}`` at pcost 1: the variance multiplier of ``M_A`` (noise ``N(0, s_A Sigma_A)``), inversely
        proportional to the budget."""
        return dict(zip(self._problem.family.sets, self._scales.tolist()))

    def pcost(self) -> float:
        """``sum_A p_A / s_A`` at these scales: 1, up to rounding (a check on the selection)."""
        return float(np.sum(self._problem.p / self._scales))

    # ---- one marginal ---------------------------------------------------------------
    def _locate(self, marginal: MarginalSpec) -> tuple[int, Subset]:
        subset = normalize_subset(self.domain, marginal)
        return self._problem.family.index(subset), subset

    def variance(self, marginal: MarginalSpec) -> float:
        """Per-cell variance of the reconstructed marginal (any set in the closure)."""
        i, _ = self._locate(marginal)
        return float(self._problem.variances(self._scales, np.array([i]))[0])

    def covariance(self, marginal: MarginalSpec) -> np.ndarray:
        """Covariance matrix of the reconstructed marginal's cells (dense; small marginals).

        Cells in C order with axes in domain order (size-1 attributes included).
        """
        _, subset = self._locate(marginal)
        family = self._problem.family
        scales = {}
        for mask in range(1 << len(subset)):
            keep = tuple(j for j in range(len(subset)) if mask >> j & 1)
            scales[keep] = float(self._scales[family.index(tuple(subset[j] for j in keep))])
        return cell_covariance([self.domain.sizes[i] for i in subset], scales)

    # ---- measurement and reconstruction ------------------------------------------------
    def variances(self, W=None) -> np.ndarray:
        """Per-cell variances of the workload marginals' cells at unit noise (pcost 1), in workload order
        (``W``: attribute sets of the closure instead)."""
        subsets = self.workload if W is None else [normalize_subset(self.domain, m) for m in W]
        cells = [math.prod(self.domain.sizes[i] for i in a) for a in subsets]
        return np.repeat([self.variance(a) for a in subsets], cells)

    def hosts(self, max_host_cells: int = hosting.DEFAULT_HOST_CELLS) -> list[hosting.Host]:
        """The marginals the kernel vectorizes and the residuals each carries."""
        return hosting.plan_hosts(self.domain.sizes, self._problem.family, max_host_cells)

    def measure(self, source, budget: Budget, *, max_host_cells: int = hosting.DEFAULT_HOST_CELLS) -> list:
        """Count the host marginals of ``source`` (a table handle) and measure every residual on them with
        exactly ``budget``: one Gaussian Measurement per host, in host order."""
        rho = measure.table_and_rho(source, budget, "ResidualPlanner")
        hosts = self.hosts(max_host_cells)
        vectors = hosting.count_hosts(source, hosts)
        return hosting.measure_hosts(vectors, hosts, self.noise_scales(), self.domain.sizes, rho)

    def reconstruct(self, measurements: Sequence) -> ResidualPlannerEstimate:
        """Every marginal of the closure (Algorithm 2) from this strategy's host measurements, with variances
        at the noise each measurement actually had."""
        measurements = list(measurements)
        omegas, applied = hosting.decode(measurements, self._problem.family, self.noise_scales(), self.domain.sizes)
        return ResidualPlannerEstimate(self, omegas, applied, measurements)

    def simulate(self, data, budget: Budget, seed=None) -> ResidualPlannerEstimate:
        """``measure`` and ``reconstruct`` with numpy noise at ``budget`` on ``data`` (the full data vector of a
        small domain, or a function giving the marginal tensor of sorted positions); never the kernel."""
        rng = np.random.default_rng(seed)
        full = None if callable(data) else np.asarray(data, dtype=np.float64).reshape(self.domain.sizes)
        weights = {a: 1.0 / math.sqrt(s) for a, s in self.noise_scales().items()}
        sd = math.sqrt(1 / (2 * float(for_noise(budget, "gaussian").rho)))  # every host's rows, as measure's split
        measurements = []
        for host in self.hosts():
            h = host.attributes
            marginal = data(h) if full is None else full.sum(axis=tuple(i for i in range(full.ndim) if i not in h))
            matrix = hosting.host_matrix(self.domain.sizes, host, weights)
            exact = matrix @ np.asarray(marginal, dtype=np.float64).ravel()
            noisy = exact + sd * rng.standard_normal(exact.size)
            measurements.append(Measurement(matrix, noisy, sd, "gaussian", None, h))
        estimate = self.reconstruct(measurements)
        estimate.note = "simulated (numpy noise); " + estimate.note
        return estimate


class ResidualPlannerEstimate(ResidualReconstruction, MarginalEstimate):
    """The strategy's reconstruction (Algorithm 2) with error bars at the noise actually applied.

    ``.marginal(A)`` / ``.marginals([...])``: any marginal of the workload's closure (names or
    positions; tensors with one axis per attribute, in the order given), all mutually consistent, unbiased,
    possibly negative. ``.variance(A)`` / ``.covariance(A)``: their per-cell variance / covariance.
    ``answer(W)`` / ``variances(W)`` / ``intervals(W, level)``: the Estimate interface (workload items as
    in ``operators.marginal_estimate``; default the plan's marginals). ``.noise_scales``: ``{A: s_A}`` as
    applied (the plan's ``s_A`` times each host's noise scale squared, within ~2^-19 of the plan).
    ``.strategy``: the plan. ``.measurements``: one per host.
    """

    note = "ResidualPlanner: unbiased, Gaussian noise; intervals exact"

    def __init__(self, strategy: ResidualPlannerStrategy, omegas: Mapping[Subset, np.ndarray],
                 noise_scales: Mapping[Subset, float], measurements: Sequence):
        super().__init__(strategy.domain, strategy._problem.family, omegas)
        self.strategy = strategy
        self.noise_scales = dict(noise_scales)
        self.measurements = list(measurements)
        self._applied: np.ndarray | None = None  # the noise scales in closure order, for batched variances

    def _scales_within(self, attributes) -> tuple[list[int], dict[tuple[int, ...], float]]:
        subset = self._normalize(attributes)
        sizes = [self.domain.sizes[i] for i in subset]
        scales = {}
        for r in range(len(subset) + 1):
            for keep in combinations(range(len(subset)), r):
                scales[keep] = self.noise_scales[tuple(subset[j] for j in keep)]
        return sizes, scales

    def variance(self, attributes) -> float:
        """Per-cell variance of the reconstructed marginal on ``attributes``."""
        return cell_variance(*self._scales_within(attributes))

    def covariance(self, attributes) -> np.ndarray:
        """Covariance of the reconstructed marginal's cells (dense, C order; small marginals)."""
        return cell_covariance(*self._scales_within(attributes))

    def cell_variance(self, subset: tuple[int, ...]) -> float:
        return self.variance(subset)

    def answer(self, W=None) -> np.ndarray:
        items = self._items(W)
        if any(Q is not None for _, _, Q, _ in items):
            return super().answer(W)
        tensors = self.marginals([subset for subset, _, _, _ in items])  # batched by shape
        return np.concatenate([
            weight * tensors[subset].transpose([subset.index(i) for i in given]).ravel()
            for subset, given, _, weight in items
        ]) if items else np.empty(0)

    def variances(self, W=None) -> np.ndarray:
        items = self._items(W)
        if any(Q is not None for _, _, Q, _ in items):
            return super().variances(W)
        family = self.strategy._problem.family
        if self._applied is None:
            self._applied = np.array([self.noise_scales[a] for a in family.sets])
        ids = np.array([family.index(subset) for subset, _, _, _ in items], dtype=np.int64)
        per_cell = self.strategy._problem.variances(self._applied, ids) * np.array([w * w for *_, w in items])
        cells = [math.prod(self.domain.sizes[i] for i in subset) for subset, _, _, _ in items]
        return np.repeat(per_cell, cells)

    def cell_covariance(self, subset: tuple[int, ...]) -> np.ndarray:
        return self.covariance(subset)

    def default_workload(self) -> list:
        return list(self.strategy.workload)


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------
def residual_planner(
    domain: DomainLike,
    marginals: Iterable[MarginalSpec],
    *,
    loss: Loss = "sum",
    weights: Sequence[float] | np.ndarray | None = None,
) -> ResidualPlannerStrategy:
    """Select the optimal residual measurements for a marginal workload.

    ``domain``: a Domain or a list of attribute sizes. ``marginals``: attribute tuples (names
    or positions; ``()`` is the total). ``loss``: ``"sum"`` (weighted total variance),
    ``"max"`` (weighted max cell variance) or a convex callable of the per-marginal cell
    variances returning ``(value, gradient)``. ``weights`` (positive, one per marginal)
    multiply each marginal's cell variance in the loss. The strategy is at unit noise (pcost 1);
    ``.at(budget)`` gives its errors at a budget.
    """
    problem = ResidualProblem(as_domain(domain), marginals)
    k = len(problem.workload_ids)
    if weights is None:
        w = np.ones(k)
    else:
        w = np.asarray(weights, dtype=np.float64).ravel()
        if w.shape != (k,):
            raise ValueError(f"{w.size} weights for {k} marginals")
        if not np.all(np.isfinite(w) & (w > 0)):
            raise ValueError("weights must be positive and finite")
    if loss == "sum":
        scales = _select_sum(problem, w)
    elif loss == "max":
        scales = _select_max(problem, w)
    elif callable(loss):
        if weights is not None:
            raise ValueError("weights apply to 'sum' and 'max'; put them inside a callable loss")
        scales = _select_convex(problem, loss, _select_sum(problem, w))
    else:
        raise ValueError(f"loss must be 'sum', 'max' or a callable, got {loss!r}")
    return ResidualPlannerStrategy(problem, w, scales, loss)
