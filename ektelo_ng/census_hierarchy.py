"""A consistent release over a geography (nation > states > counties) through the existing kernel operations.

The data vector is the histogram of a table whose first attribute is the county (the geography's counties, in its
order) and whose other attributes are the cells every unit shares (the Person domain, or a small one). Each level
of the geography has a public share of the budget (:func:`level_budgets`); every unit of a level is measured with
one strategy, chosen without data, at that level's budget (:func:`measure_levels`):

- the nation: the vector reduced to the shared cells (``reduce_by_partition``), measured once;
- each other level: the vector reduced to (unit, cell) and split by unit (``split_by_partition``; the counties
  split the vector itself), each part measured: with Gaussian noise all of a level's parts in one request
  (``gaussian_batch``: the strategy travels once), with Laplace noise one request a part.

The parts of one split are disjoint, so the kernel charges a level the largest of its units' charges (parallel
composition), and the levels add (sequential composition).

Each unit's measurement gives its local least-squares answers to the workload, and the hierarchical estimate
(``operators.hierarchy.shared_gls``: every unit has the same strategy, so their covariances share one shape) makes
them consistent and combines what every level saw. Every answer comes with its exact variance and an interval:
exact (normal) for Gaussian noise; for Laplace noise a sound bound (``operators.confidence.bound_halfwidths``),
wider than exact, tightened by each answer's largest Laplace term's share of its variance. That share is exact:
answer j of unit v mixes the noise of every unit u's strategy row k with coefficient G_vu Q_jk (G: the units'
weights, ``hierarchy.unit_weights``; Q = W A^+), so its largest term is the product of the largest unit part and the
largest row part. This is the path for small tables: at county scale the whole vector (3,143 x 500,480 cells for
SF1) is over what one request may build, and docs/census-counties.md says what a kernel path streamed by state adds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ektelo_ng.operators.algebra import pinv
from ektelo_ng.operators.budget import Budget, accounted, for_noise
from ektelo_ng.operators.census import write_release
from ektelo_ng.operators.client import Handle, NoisyAnswer
from ektelo_ng.operators.confidence import bound_halfwidths, check_level, normal_halfwidths
from ektelo_ng.operators.error import noise_constant
from ektelo_ng.operators.geography import Geography
from ektelo_ng.operators.hierarchy import MAX_WEIGHTED_UNITS, SharedFit, largest_shares, shared_gls
from ektelo_ng.operators.matrix import Matrix, Product
from ektelo_ng.operators.matrix.base import BLOCK_ENTRIES
from ektelo_ng.operators.privacy import PureDP, ZCDP, split_amount
from ektelo_ng.operators.selection.linear import LinearStrategy


class CountingTransport:
    """A session's transport that counts its requests and the bytes of JSON each way (what a release asks of the
    kernel: ``session.transport = CountingTransport(session.transport)``)."""

    def __init__(self, transport):
        self.transport, self.requests, self.sent, self.received = transport, 0, 0, 0
        self.largest_sent = self.largest_received = 0

    def __call__(self, text: str) -> str:
        reply = self.transport(text)
        self.requests += 1
        self.sent, self.received = self.sent + len(text), self.received + len(reply)
        self.largest_sent, self.largest_received = max(self.largest_sent, len(text)), max(self.largest_received, len(reply))
        return reply


def level_budgets(budget: Budget, shares: Sequence[float]) -> list[PureDP | ZCDP | None]:
    """``budget`` split across the levels, top down, in proportion to the public ``shares`` (>= 0; a level with
    share 0 is not measured, None), so that the levels' budgets add up to it exactly."""
    total = accounted(budget)
    weights = [Fraction(str(s)) if isinstance(s, float) else Fraction(s) for s in shares]  # 0.2 as 1/5
    if not weights or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"shares must be one number >= 0 per level with a positive sum, got {list(shares)}")
    kind = type(total)
    return [kind(part) if weight > 0 else None for weight, part in zip(weights, split_amount(total, weights))]


@dataclass
class LevelMeasurements:
    """Every unit's local answers to the workload (units x r), the noise variance of its measurement (its scale),
    which units were measured, the noise, each answer's variance at scale 1 (the same for every unit), and each
    answer's largest share of it from one strategy row's noise (1 where W A^+ is too large to hold)."""

    answers: np.ndarray
    scales: np.ndarray
    measured: np.ndarray
    noise: str
    unit_variances: np.ndarray
    answer_shares: np.ndarray


def _leaf_groups(geography: Geography) -> tuple[np.ndarray, np.ndarray]:
    """The leaves (counties, in order) and, for each depth, each leaf's ancestor there."""
    tree = geography.hierarchy
    leaves = np.flatnonzero(tree.children == 0)
    if np.unique(tree.depth[leaves]).size != 1:
        raise ValueError("every leaf of the geography must be at the same depth (counties)")
    ancestors = np.empty((int(tree.depth[leaves[0]]) + 1, leaves.size), dtype=np.int64)
    ancestors[-1] = leaves
    for d in reversed(range(ancestors.shape[0] - 1)):
        ancestors[d] = tree.parent[ancestors[d + 1]]
    return leaves, ancestors


def measure_levels(vector: Handle, geography: Geography, strategy: LinearStrategy, workload: Matrix,
                   budgets: Sequence[PureDP | ZCDP | None]) -> LevelMeasurements:
    """Measure ``strategy`` on every unit of every level of ``geography`` whose budget is not None (top down),
    from ``vector``: the histogram with the counties first (leaves x the strategy's cells)."""
    tree = geography.hierarchy
    leaves, ancestors = _leaf_groups(geography)
    cells = strategy.matrix.shape[1]
    if vector.size != leaves.size * cells or len(budgets) != ancestors.shape[0]:
        raise ValueError(f"expected a vector of {leaves.size} counties x {cells} cells = {leaves.size * cells} and "
                         f"{ancestors.shape[0]} level budgets, got {vector.size} cells and {len(budgets)}")  # fmt: skip
    if workload.shape[1] != cells:
        raise ValueError(f"the workload has {workload.shape[1]} columns but the strategy {cells}")
    _check_affordable(vector, [for_noise(b, strategy.noise) for b in budgets if b is not None])  # before any spend
    local = Product([workload, pinv(strategy.matrix)])  # each unit's least-squares answers: W A^+ y
    constant, norm = noise_constant(strategy.noise)  # each answer's variance at noise variance 1 a strategy row
    unit_variances = strategy.variances(workload) / (constant * strategy.matrix.sensitivity(norm) ** 2)
    answer_shares = np.ones(workload.shape[0])
    if local.shape[0] * local.shape[1] <= BLOCK_ENTRIES:
        squares = local.dense() ** 2
        answer_shares = squares.max(axis=1) / np.maximum(squares.sum(axis=1), np.finfo(float).tiny)
    answers = np.zeros((tree.units, workload.shape[0]))
    scales, measured = np.ones(tree.units), np.zeros(tree.units, dtype=bool)
    cell = np.tile(np.arange(cells), leaves.size)
    for depth, budget in enumerate(budgets):
        if budget is None:
            continue
        units, group = np.unique(ancestors[depth], return_inverse=True)  # the level's units, in order
        per_cell = np.repeat(group, cells)
        if depth == ancestors.shape[0] - 1:
            parts = vector.split_by_partition(per_cell)
        else:
            reduced = vector.reduce_by_partition(per_cell * cells + cell)
            parts = [reduced] if units.size == 1 else reduced.split_by_partition(np.repeat(np.arange(units.size), cells))
        noisy = _measure(parts, strategy, budget)
        answers[units] = (local @ np.column_stack([n.values for n in noisy])).T
        scales[units], measured[units] = [n.variance for n in noisy], True
    return LevelMeasurements(answers, scales, measured, strategy.noise, unit_variances, answer_shares)


def _check_affordable(vector: Handle, spends: list[PureDP | ZCDP]) -> None:
    """Refuse levels that together spend more than the session has left (in its currency: a Laplace epsilon costs
    a zCDP session epsilon^2 / 2), so that no level is measured before a later one is refused."""
    left = vector.session.budget.remaining
    if isinstance(left, ZCDP):
        needed = sum((s.rho if isinstance(s, ZCDP) else s.epsilon**2 / 2 for s in spends), Fraction(0))
        if needed > left.rho:
            raise ValueError(f"the levels spend rho = {float(needed):.4g} but the session has {float(left.rho):.4g} left")
    elif sum((s.epsilon for s in spends), Fraction(0)) > left.epsilon:
        raise ValueError(f"the levels spend epsilon = {float(sum(s.epsilon for s in spends)):.4g} but the session "
                         f"has {float(left.epsilon):.4g} left")  # fmt: skip


def _measure(parts: list[Handle], strategy: LinearStrategy, budget: PureDP | ZCDP) -> list[NoisyAnswer]:
    """The strategy measured on each part at ``budget``: Gaussian noise in one request (the matrix sent once),
    Laplace noise one request a part."""
    spent = for_noise(budget, strategy.noise)
    if isinstance(spent, ZCDP):
        return parts[0].session.gaussian_batch(parts, [strategy.matrix] * len(parts), rho=[spent.rho] * len(parts))
    return [part.laplace(strategy.matrix, spent.epsilon) for part in parts]


@dataclass
class HierarchicalRelease:
    """Every unit's consistent answers (units x r) with their exact variances and intervals at ``level``."""

    geography: Geography
    fit: SharedFit
    variances: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float
    method: str

    @property
    def answers(self) -> np.ndarray:
        return self.fit.answers

    def columns(self, labels: Mapping[str, Sequence[str]] | None = None) -> dict[str, np.ndarray]:
        """One row per unit and answer: level, fips, name, the answer's labels (columns of one label per answer,
        e.g. ``{"table": W.table, "line": W.line}`` of a ``CensusWorkload``; default ``query``: its row number),
        answer, std, lower, upper, method."""
        units, r = self.answers.shape
        labels = {"query": [str(j) for j in range(r)]} if labels is None else labels
        for key, values in labels.items():
            if len(values) != r:
                raise ValueError(f"{len(values)} {key} labels for {r} answers per unit")
        level, fips, name = (np.repeat(np.asarray(v), r) for v in (self.geography.level, self.geography.fips,
                                                                     self.geography.name))  # fmt: skip
        return {"level": level, "fips": fips, "name": name,
                **{key: np.tile(np.asarray(values), units) for key, values in labels.items()},
                "answer": self.answers.ravel(), "std": np.sqrt(self.variances).ravel(),
                "lower": self.lower.ravel(), "upper": self.upper.ravel(),
                "method": np.full(units * r, self.method)}  # fmt: skip

    def write(self, path, labels: Mapping[str, Sequence[str]] | None = None):
        """The release as CSV or Parquet (``census.write_release``), with :meth:`columns`' labels."""
        return write_release(self.columns(labels), path)


def estimate_levels(geography: Geography, measured: LevelMeasurements, level: float = 0.95) -> HierarchicalRelease:
    """The hierarchical estimate of every unit from the levels' measurements, with its error bars."""
    level = check_level(level)
    fit = shared_gls(geography.hierarchy, measured.answers, measured.scales, measured.measured)
    variances = fit.variances(measured.unit_variances)
    if measured.noise == "gaussian":
        half, method = normal_halfwidths(variances, level), "exact (normal)"
    elif geography.hierarchy.units <= MAX_WEIGHTED_UNITS:
        shares = largest_shares(geography.hierarchy, measured.scales, measured.measured)[:, None] * measured.answer_shares
        half, method = bound_halfwidths(variances, level, shares), "bound (Laplace combination, sound)"
    else:
        half, method = bound_halfwidths(variances, level), "bound (Laplace combination, sound)"
    return HierarchicalRelease(geography, fit, variances, fit.answers - half, fit.answers + half, level, method)


def release_levels(vector: Handle, geography: Geography, strategy: LinearStrategy, workload: Matrix, budget: Budget,
                   shares: Sequence[float], level: float = 0.95) -> HierarchicalRelease:
    """Measure every level with its share of ``budget`` and release the consistent estimate (module docstring)."""
    level = check_level(level)
    return estimate_levels(geography, measure_levels(vector, geography, strategy, workload,
                                                     level_budgets(budget, shares)), level)  # fmt: skip
