"""The selectors an advice compares, when each applies, and what each costs to measure.

A :class:`Candidate` names one selector with one setting (a classic strategy, an HDMM template,
ResidualPlanner under one loss, QuerySmasher with one solver) and one noise. :func:`select` builds its
strategy, the same way every time (seeded), so a saved advice rebuilds exactly what was advised;
:func:`evaluate` adds the unit-noise error, the max variance and the measurement cost, and is what the
advisor runs in its worker process under the time limit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from decimal import Decimal

from ..matrix import Identity, Kronecker
from ..selection import classic
from ..selection.hdmm.bound import svd_bound
from ..selection.hdmm.select import OPT0_MAX_CELLS, OPT_PLUS_MAX_PRODUCTS, OPTIMIZERS, default_optimizers
from ..selection.hdmm.marginals import MAX_LATTICE_ATTRIBUTES
from ..selection.hdmm.strategies import UnionStrategy
from ..selection.linear import LinearStrategy
from ..selection.query_smasher import query_smasher
from ..selection.query_smasher.hosts import measured_hosts
from ..selection.residual_hosts import COUNT_BATCH, MEASURE_ROWS
from ..selection.residual_planner import residual_planner
from ..selection.strategy import Noise, Strategy
from .workload import QueryWorkload

#: Largest work (queries times the cells each reads) spent on per-query variances for the max variance.
MAX_VARIANCE_WORK = 10**9

CLASSIC = {"Identity": classic.identity, "H2": classic.h2, "HB": classic.hb, "Privelet": classic.privelet,
           "GreedyH": None, "QuadTree": classic.quadtree}
HDMM_TEMPLATES = {"opt_0": "OPT_0", "opt_kron": "OPT_kron", "opt_plus": "OPT_+", "opt_marginals": "OPT_M"}
#: Each selector family's settings (classic strategy, HDMM template, loss, solver) and the noises it adds.
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[Noise, ...]]] = {
    "classic": (tuple(CLASSIC), ("laplace", "gaussian")),
    "residual-planner": (("sum", "max"), ("gaussian",)),
    "query-smasher": (("wff", "exact"), ("gaussian",)),
    "hdmm": (tuple(HDMM_TEMPLATES), ("laplace", "gaussian")),
}


@dataclass(frozen=True)
class Candidate:
    """One selector with one setting: ``family`` (classic, hdmm, residual-planner, query-smasher), ``option``
    (the classic strategy, HDMM template, loss or solver) and ``noise``."""

    family: str
    option: str
    noise: Noise

    @property
    def name(self) -> str:
        label = {"classic": self.option, "hdmm": f"HDMM {HDMM_TEMPLATES.get(self.option, self.option)}",
                 "residual-planner": f"ResidualPlanner ({self.option} loss)",
                 "query-smasher": f"QuerySmasher ({self.option})"}[self.family]
        return f"{label}, {self.noise}"


@dataclass(frozen=True)
class Cost:
    """What measuring and reconstructing a strategy takes: cells the kernel counts, kernel requests, noisy
    answers, an estimate of the reconstruction's working memory, and whether it needs the full data vector."""

    cells: int
    requests: int
    answers: int
    memory_bytes: int
    full_vector: bool


@dataclass
class Evaluation:
    """A selected strategy with its error at unit noise (eps = 1, or pcost 1), its cost and selection seconds (its
    max variance is a later job of its own);
    ``upper_bound``: the error is its optimizer's bound, above what its reconstruction delivers (OPT_+)."""

    candidate: Candidate
    strategy: Strategy
    expected_error: float
    num_queries: int
    cost: Cost
    seconds: float
    upper_bound: bool = False


def candidates(workload: QueryWorkload, noises: tuple[Noise, ...], max_cells: int) -> list[tuple[Candidate, str]]:
    """Every candidate for these noises, cheapest first, each with '' or the reason it does not apply."""
    vector = _vector_reason(workload, max_cells)
    hdmm_runs = () if vector else default_optimizers(workload.matrix)  # once: it unfolds the whole workload
    out = []
    for noise in noises:
        out += [(Candidate("classic", name, noise), _classic_reason(name, workload, vector)) for name in CLASSIC]
    for loss in FAMILIES["residual-planner"][0]:
        out.append((Candidate("residual-planner", loss, "gaussian"),
                    _gaussian_reason(noises) or ("" if workload.marginals is not None else
                                                 "takes marginals only: the workload has other queries")))
    for solver in FAMILIES["query-smasher"][0]:
        out.append((Candidate("query-smasher", solver, "gaussian"),
                    _gaussian_reason(noises) or ("" if workload.queries is not None else
                                                 "takes queries on marginals: the workload matrix is not a union of "
                                                 "products over the attributes")))
    for noise in noises:
        out += [(Candidate("hdmm", name, noise), _hdmm_reason(name, workload, vector, hdmm_runs))
                for name in HDMM_TEMPLATES]
    return out


def _gaussian_reason(noises: tuple[Noise, ...]) -> str:
    return "" if "gaussian" in noises else "adds Gaussian noise, which cannot give pure epsilon-DP"


def _vector_reason(workload: QueryWorkload, max_cells: int) -> str:
    """Why a strategy over the full data vector does not apply; the size first, as embedding the workload in
    the full vector, to see whether it can be, takes long on many items."""
    if workload.cells > max_cells:
        cells = workload.cells if workload.cells < 10**300 else Decimal(workload.cells)  # beyond a float's range
        return f"measures the full data vector of {cells:.3g} cells (max_cells = {max_cells:,})"
    if not workload.has_matrix:
        return "needs the workload as products of per-attribute queries (QuerySmasher takes the others)"
    return ""


def _classic_reason(name: str, workload: QueryWorkload, vector_reason: str) -> str:
    sizes = workload.domain.sizes
    if name == "Privelet" and any(n & (n - 1) for n in sizes):
        return "needs power-of-two attribute sizes"
    if name == "GreedyH" and len(sizes) != 1:
        return "1-D workloads only"
    if name == "QuadTree" and len(sizes) != 2:
        return "2-D domains only"
    return vector_reason


def _hdmm_reason(name: str, workload: QueryWorkload, vector_reason: str, runs: tuple[str, ...]) -> str:
    """Why a template does not apply: the full vector's reason, or one HDMM's ``default_optimizers`` (``runs``)
    skips it for."""
    if vector_reason or name in runs:
        return vector_reason
    if len(workload.domain) == 1:
        return "on one attribute HDMM (default_optimizers) runs OPT_0 alone"
    return {"opt_0": f"an explicit strategy over all cells: {OPT0_MAX_CELLS:,} cells at most",
            "opt_plus": f"needs a union of 2 to {OPT_PLUS_MAX_PRODUCTS} products",
            "opt_marginals": f"needs at most {MAX_LATTICE_ATTRIBUTES} attributes"}[name]


def select(candidate: Candidate, workload: QueryWorkload, *, seed: int = 0, restarts: int = 3) -> Strategy:
    """The candidate's strategy for the workload, at unit noise; deterministic for a given seed."""
    family, option, noise = candidate.family, candidate.option, candidate.noise
    if family == "classic":
        W, sizes = workload.matrix, workload.domain.sizes
        if option == "Identity" and len(sizes) > 1:  # the same matrix, with the structure its covariance uses
            matrix = Kronecker([Identity(n) for n in sizes])
        else:
            matrix = (classic.greedy_h(W) if option == "GreedyH" else CLASSIC[option](sizes)).matrix
        return LinearStrategy(matrix, W, noise, name=option)
    if family == "hdmm":
        return OPTIMIZERS[option](workload.matrix, noise=noise, restarts=restarts, seed=seed)
    if family == "residual-planner":
        subsets, weights = workload.marginals
        return residual_planner(workload.domain, subsets, loss=option, weights=weights)
    if family == "query-smasher":
        return query_smasher(workload.domain, workload.queries, weights=workload.weights, solver=option)
    raise ValueError(f"unknown selector family {family!r}")


#: Most random starts per HDMM template an advice (or a saved one, rebuilt without a time limit) may ask for.
MAX_RESTARTS = 100
def whole_number(value, least: int) -> bool:
    """A Python int (not a bool) of at least ``least``: what seeds, restarts and cell limits must be."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


#: What the worker process holds between jobs: the workload (sent once per worker) and the strategies selected.
_HELD: dict = {}


def hold(workload: QueryWorkload) -> None:
    """Keep ``workload`` in this (worker) process for the jobs that follow (it is sent once, not with each job)."""
    _HELD.clear()
    _HELD["workload"] = workload


def evaluate(candidate: Candidate, seed: int = 0, restarts: int = 3) -> Evaluation:
    """Select on the held workload, then the strategy's error at unit noise and its cost (run by the advisor's
    worker, which keeps the strategy for :func:`max_variance`)."""
    workload = _HELD["workload"]
    start = time.perf_counter()
    strategy = select(candidate, workload, seed=seed, restarts=restarts)
    seconds = time.perf_counter() - start
    _HELD[candidate] = strategy
    return Evaluation(candidate, strategy, float(strategy.expected_error()), int(strategy.num_queries),
                      cost(strategy, workload), seconds, isinstance(strategy, UnionStrategy))


def max_variance(candidate: Candidate) -> float | None:
    """The max variance of a strategy :func:`evaluate` selected in this worker (a job of its own: it can take far
    longer than the selection, and must not cost the selection its row)."""
    if candidate not in _HELD:
        raise LookupError("the worker was restarted since the selection: its strategy is gone")
    return _max_variance(_HELD[candidate], _HELD["workload"])


def held_svd_bound(noise: Noise) -> float:
    """The SVD lower bound on the total squared error of any strategy at unit noise, for the held workload."""
    return svd_bound(_HELD["workload"].matrix, noise)


def _max_variance(strategy: Strategy, workload: QueryWorkload) -> float | None:
    """The largest variance of any workload query as asked (item weights weigh the objective, not the answers)
    at unit noise; None when that is not computable cheaply (a QuerySmasher workload reading too many cells, or a
    least-squares covariance without usable structure)."""
    if hasattr(strategy, "max_variance"):
        return float(strategy.max_variance())
    if hasattr(strategy, "solution"):  # QuerySmasher: per query, over the dense rows of its marginal
        work = sum(e.matrix.shape[0] * e.matrix.shape[1] for e in strategy.entries)
        if work > MAX_VARIANCE_WORK:
            return None
    try:
        if isinstance(strategy, LinearStrategy):  # its workload is the weighted one it was selected for
            return float(strategy.variances(workload.answers).max())
        return float(strategy.variances().max())
    except ValueError:  # the covariance refuses work it cannot structure (operators.covariance)
        return None


def cost(strategy: Strategy, workload: QueryWorkload) -> Cost:
    """Measurement and reconstruction cost: one full-vector request for a linear strategy, host marginals for
    ResidualPlanner's and QuerySmasher's (docs/advice.md says how these are counted)."""
    if isinstance(strategy, LinearStrategy):
        cells, answers = workload.cells, strategy.matrix.shape[0]
        return Cost(cells, 2, answers, 8 * (2 * cells + answers), True)
    hosts = strategy.hosts() if hasattr(strategy, "hosts") else measured_hosts(strategy)
    sizes = workload.domain.sizes
    cells = sum(math.prod(sizes[a] for a in host.attributes) for host in hosts)
    rows = (lambda a: strategy.solution(a).num_rows) if hasattr(strategy, "solution") else (
        lambda a: math.prod(sizes[i] - 1 for i in a))
    answers = sum(rows(residual) for host in hosts for residual in host.residuals)
    requests = -(-len(hosts) // COUNT_BATCH) + -(-answers // MEASURE_ROWS)
    return Cost(cells, requests, answers, 8 * (cells + 2 * answers), False)
