"""The QuerySmasher plan: per-subworkload strategies, the noise allocation, variances, reconstruction.

Subworkload ``A'`` is measured as ``omega_A' = B_A' x_A' + N(0, sigma^2_A' I)`` where
``B_A'`` has ``max diag(B^T B) = 1`` and loss ``L_A'`` (weighted total variance at
``sigma = 1``). Minimising ``sum sigma^2 L`` at total privacy cost
``sum 1/sigma^2 = beta`` gives (Sec. 6.4) ``sigma^2_A' = gamma / sqrt(L_A')`` with
``gamma = sum sqrt(L) / beta`` and total weighted variance ``(sum sqrt(L_A'))^2 / beta``.
A query on ``A`` is answered as ``sum_{A' subset A} q=>A' . B^+ omega_A'`` with variance
``sum sigma^2_A' |q=>A' B^+|^2``. The estimates ``B^+ omega_A'`` are centred tensors, so they
also stitch into marginals exactly as ResidualPlanner's residuals do, and every query is
answered from the reconstructed (pseudo-)marginal of its attributes: ``q . x_hat_A``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ....kernel.domain import Domain
from ...matrix import Matrix
from ... import measure
from ...marginal_estimate import MarginalEstimate
from ...measurement import Measurement
from ...residual import ResidualReconstruction, SubsetFamily, SubsetNormalizer, residual_answers
from . import hosts as hosting
from ..residual_hosts import count_hosts
from .decompose import Entry, Subset, subqueries
from .solutions import SubSolution
from ...budget import Budget, for_noise
from ..strategy import Strategy

#: Dense query rows materialised at once (float64 entries) when computing variances.
_CHUNK_ENTRIES = 1 << 22


class QuerySmasherStrategy(Strategy):
    """The selected plan; every figure is at unit noise (pcost 1, rho = 1/2); ``at(budget)`` for a budget."""

    noise = "gaussian"

    def __init__(
        self,
        domain: Domain,
        entries: Sequence[Entry],
        solutions: Mapping[Subset, SubSolution],
        solver: str,
    ):
        self.domain = domain
        self.entries = list(entries)
        self.solver = solver
        self._solutions = dict(sorted(solutions.items(), key=lambda item: (len(item[0]), item[0])))
        roots = {a: math.sqrt(s.loss) for a, s in self._solutions.items()}
        gamma = sum(roots.values())  # at pcost 1
        self._sigma2 = {a: gamma / root for a, root in roots.items()}
        self._normalize = SubsetNormalizer(domain)

    # ---- Strategy -------------------------------------------------------------------
    @property
    def num_queries(self) -> int:
        return sum(e.rows for e in self.entries)

    def expected_error(self) -> float:
        """Weighted total variance ``sum_q w_q Var(q) = (sum sqrt(L_A'))^2`` at pcost 1."""
        return sum(math.sqrt(s.loss) for s in self._solutions.values()) ** 2

    def error_bounds(self) -> tuple[float, float]:
        """``(certified lower bound on the optimal QuerySmasher error, achieved error)`` (exact solver)."""
        lowers = [s.lower for s in self._solutions.values()]
        if any(v is None for v in lowers):
            raise ValueError(f"the {self.solver!r} solver gives no certificate; use solver='exact'")
        return sum(math.sqrt(v) for v in lowers) ** 2, self.expected_error()

    # ---- the plan -------------------------------------------------------------------
    @property
    def residual_sets(self) -> tuple[Subset, ...]:
        """The sets ``A'`` with a non-zero subworkload: the measurements of the plan."""
        return tuple(self._solutions)

    def solution(self, subset: Iterable[str | int]) -> SubSolution:
        """The strategy ``B_A'`` (at ``sigma = 1``) of one residual set."""
        key = self._normalize(subset)
        if key not in self._solutions:
            raise KeyError(f"no subworkload on {key}: no query of the workload reads it")
        return self._solutions[key]

    def strategy_matrix(self, subset: Iterable[str | int]) -> Matrix:
        """``B_A'`` as an implicit matrix over the marginal on ``A'`` (measure with ``noise_scales()[A']``)."""
        return self.solution(subset).matrix()

    def subworkload_losses(self) -> dict[Subset, float]:
        """``L_A'``: weighted total variance of each subworkload at ``sigma = 1`` (pcost 1 each)."""
        return {a: s.loss for a, s in self._solutions.items()}

    def lower_bounds(self) -> dict[Subset, float | None]:
        """Certified lower bounds on each subworkload's optimal loss (``None`` without a certificate)."""
        return {a: s.lower for a, s in self._solutions.items()}

    def noise_scales(self) -> dict[Subset, float]:
        """``{A': sigma^2_A'}``: noise variance per measurement at pcost 1 (inversely proportional to the budget)."""
        return dict(self._sigma2)

    def allocation(self) -> dict[Subset, float]:
        """``{A': 1/sigma^2_A'}``: the share of the privacy cost spent on each measurement (sums to 1)."""
        return {a: 1.0 / v for a, v in self._sigma2.items()}

    def with_noise(self, noise_scales: Mapping[Subset, float]) -> QuerySmasherStrategy:
        """The same plan measured with the noise variances ``{A': sigma^2_A'}`` given (e.g. as a kernel
        applied them), for its variances."""
        missing = set(self._solutions) - set(noise_scales)
        if missing:
            raise KeyError(f"no noise variance for residual set(s) {sorted(missing)[:5]}")
        plan = QuerySmasherStrategy(self.domain, self.entries, self._solutions, self.solver)
        plan._sigma2 = {a: float(noise_scales[a]) for a in self._solutions}
        return plan

    # ---- variances ------------------------------------------------------------------
    def variance(self, index: int | None = None) -> np.ndarray:
        """Per-query variances (unweighted) of workload item ``index``, or of every query in order."""
        if index is None:
            return np.concatenate([self._entry_variance(e) for e in self.entries])
        return self._entry_variance(self.entries[index])

    def _entry_variance(self, entry: Entry) -> np.ndarray:
        out = np.zeros(entry.rows)
        chunk = max(1, _CHUNK_ENTRIES // max(1, math.prod(entry.sizes)))
        for start in range(0, entry.rows, chunk):
            stop = min(entry.rows, start + chunk)
            rows = entry.dense_rows(start, stop)
            for subset, keep in _residual_subsets(self.domain, entry.subset):
                if subset in self._solutions:
                    q = subqueries(rows, keep).reshape(stop - start, -1)
                    out[start:stop] += self._sigma2[subset] * self._solutions[subset].variances(q)
        return out

    # ---- Strategy: measurement through the kernel, reconstruction, simulation ---------
    def variances(self, W=None) -> np.ndarray:
        """Per-query variances at unit noise (pcost 1) of every workload query, or of item ``W`` (an index)."""
        return self.variance(W)

    def measure(self, source, budget: Budget, *, max_host_cells: int = hosting.DEFAULT_HOST_CELLS) -> list:
        """Count the host marginals of ``source`` (a table handle) and measure every subworkload on them with
        exactly ``budget`` (a ZCDP or ApproxDP): one Gaussian Measurement per host."""
        rho = measure.table_and_rho(source, budget, "QuerySmasher")
        hosts = hosting.measured_hosts(self, max_host_cells)
        return hosting.measure_hosts(count_hosts(source, hosts), hosts, self, rho)

    def reconstruct(self, measurements: Sequence) -> QuerySmasherEstimate:
        """Answers to every workload query, and marginals, from this strategy's host measurements."""
        measurements = list(measurements)
        omegas, applied = hosting.decode(measurements, self)
        return QuerySmasherEstimate(self, omegas, applied, measurements)

    def simulate(self, data: np.ndarray | Callable[[Subset], np.ndarray], budget: Budget,
                 seed=None) -> QuerySmasherEstimate:
        """``measure`` and ``reconstruct`` with numpy noise at ``budget`` on ``data`` (the full data vector of
        a small domain, or a function giving the marginal tensor of sorted positions); never the kernel."""
        rng = np.random.default_rng(seed)
        full = None if callable(data) else np.asarray(data, dtype=np.float64).reshape(self.domain.sizes)
        weights = {a: 1.0 / math.sqrt(s) for a, s in self.noise_scales().items()}
        sd = math.sqrt(1 / (2 * float(for_noise(budget, "gaussian").rho)))
        measurements = []
        for host in hosting.measured_hosts(self):
            h = host.attributes
            marginal = data(h) if full is None else full.sum(axis=tuple(i for i in range(full.ndim) if i not in h))
            matrix = hosting.host_matrix(self, host, weights)
            exact = matrix @ np.asarray(marginal, dtype=np.float64).ravel()
            measurements.append(Measurement(matrix, exact + sd * rng.standard_normal(exact.size), sd, "gaussian",
                                            None, h))
        estimate = self.reconstruct(measurements)
        estimate.note = "simulated (numpy noise); " + estimate.note
        return estimate


def _residual_subsets(domain: Domain, subset: Subset) -> list[tuple[Subset, tuple[bool, ...]]]:
    """Every ``A'`` of ``subset`` without size-1 attributes, with its keep-mask over ``subset``."""
    nontrivial = [a for a in subset if domain.sizes[a] > 1]
    out = []
    for mask in range(1 << len(nontrivial)):
        kept = {a for j, a in enumerate(nontrivial) if mask >> j & 1}
        out.append((tuple(sorted(kept)), tuple(a in kept for a in subset)))
    return out


class QueryReconstruction:
    """Estimates from one set of measurements: workload answers and marginals.

    ``x_hat_A' = B^+ omega_A'`` for every measured ``A'``; unmeasured sets (no query reads
    them) contribute 0 to answers. A marginal is available when every ``A' subset A`` was
    measured with full rank (``prod (d_i - 1)`` measurements), else only its projection
    onto what the workload reads is known and :meth:`marginal` refuses it.
    """

    def __init__(self, strategy: QuerySmasherStrategy, measurements: Mapping[Iterable[str | int], np.ndarray]):
        self.strategy = strategy
        domain = strategy.domain
        normalize = SubsetNormalizer(domain)
        answers: dict[Subset, np.ndarray] = {}
        self._complete: set[Subset] = set()
        for key, omega in measurements.items():
            subset = normalize(key)
            sol = strategy.solution(subset)
            omega = np.asarray(omega, dtype=np.float64).ravel()
            if omega.shape != (sol.num_rows,):
                raise ValueError(f"measurement on {subset} has {omega.size} values; expected {sol.num_rows}")
            answers[subset] = residual_answers(sol.backward(omega[None])[0], sol.shape)
            if sol.num_rows == math.prod(n - 1 for n in sol.shape):
                self._complete.add(subset)
        missing = sorted(set(strategy.residual_sets) - set(answers))
        if missing:
            raise KeyError(f"no measurement for residual set(s) {missing[:5]}")
        family = SubsetFamily.closure([normalize(e.subset) for e in strategy.entries], len(domain))
        for subset in family.sets:
            if subset not in answers:
                answers[subset] = np.zeros(math.prod(domain.sizes[a] - 1 for a in subset))
        self._normalize = normalize
        self._marginals = ResidualReconstruction(domain, family, answers)

    def answers(self, index: int | None = None) -> np.ndarray:
        """Estimated answers of workload item ``index``, or of every query in workload order."""
        entries = self.strategy.entries if index is None else [self.strategy.entries[index]]
        tensors = self._marginals.marginals([e.subset for e in entries])
        out = []
        for e in entries:
            x = tensors[e.subset].reshape([self.strategy.domain.sizes[a] for a in e.subset])
            out.append(np.asarray(e.matrix @ x.transpose(np.argsort(e.order)).ravel(), dtype=np.float64))
        return np.concatenate(out)

    def marginal(self, attributes: Iterable[str | int] | str | int) -> np.ndarray:
        """The marginal on ``attributes`` (axes in the order given), if the plan determines it."""
        subset = self._normalize(attributes)
        for sub, _ in _residual_subsets(self.strategy.domain, subset):
            if sub not in self._complete:
                raise ValueError(
                    f"the workload does not determine the marginal on {subset}: the residual on {sub} is "
                    "measured only where the queries need it"
                )
        return self._marginals.marginal(attributes)


class QuerySmasherEstimate(QueryReconstruction, MarginalEstimate):
    """The reconstruction from the kernel's measurements, with variances at the noise actually applied.

    ``answer()`` / ``variances()`` / ``intervals()``: every workload query in order (or item ``W``, an
    index; or marginal items as in ``operators.marginal_estimate``, answered from marginals the plan
    determines, without variances). ``.answers(i)`` / ``.variance(i)``: per item. ``.marginal(A)``: a
    marginal the plan determines (axes in the order of A). ``.noise_scales``: ``{A': sigma^2_A'}`` as
    applied. ``.strategy``: the selected plan. ``.measurements``: one per host.
    """

    note = "QuerySmasher: unbiased, Gaussian noise; intervals exact"

    def __init__(self, strategy: QuerySmasherStrategy, omegas: Mapping[Subset, np.ndarray],
                 noise_scales: Mapping[Subset, float], measurements: Sequence):
        super().__init__(strategy, omegas)
        self.domain = strategy.domain
        self.noise_scales = dict(noise_scales)
        self.measurements = list(measurements)
        self._applied = strategy.with_noise(noise_scales)

    def variance(self, index: int | None = None) -> np.ndarray:
        """Per-query variances (unweighted) of workload item ``index``, or of every query in order."""
        return self._applied.variance(index)

    def _own(self, W) -> bool:
        return W is None or isinstance(W, (int, np.integer))

    def answer(self, W=None) -> np.ndarray:
        return self.answers(W) if self._own(W) else super().answer(W)

    def variances(self, W=None) -> np.ndarray:
        return self.variance(W) if self._own(W) else super().variances(W)

    def labels(self, W=None) -> list[str]:
        if not self._own(W):
            return super().labels(W)
        entries = self.strategy.entries if W is None else [self.strategy.entries[W]]
        names = self.domain.names
        return [f"{','.join(names[i] for i in e.attributes) or 'total'} query {k}" for e in entries for k in range(e.rows)]

    def cell_covariance(self, subset: tuple[int, ...]) -> None:
        return None

    def default_workload(self) -> list:
        return []
