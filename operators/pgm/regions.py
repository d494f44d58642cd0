"""The approximate method: pseudo-marginals on a region graph (McKenna et al., NeurIPS 2021, relaxed consistency).

When the junction tree's cliques are too big (all 2-way marginals of many attributes triangulate to the
complete graph), the marginals are relaxed to the *local polytope*: one table ``tau_r`` per region ``r`` (the
maximal measured cliques), each summing to the total, any two agreeing on every attribute set they share
(the pairwise intersections of regions, closed under the intersections that matter: two regions that share
``s`` agree on ``s`` through ``r ∩ r'``). (Accelerated) mirror descent runs on this polytope with the convex entropy
``sum_r H(tau_r)`` as mirror map: a step multiplies each table by ``exp(-alpha * grad)`` and then takes the
Bregman (KL) projection onto the local polytope. That projection is computed by cyclic projections onto
one separator's constraint at a time, each in closed form: every region holding ``s`` is rescaled to the
normalized geometric mean of their marginals on ``s`` (dual coordinate ascent, a convex form of generalized
belief propagation; it converges to the projection because the constraints are linear).

Limits: the model answers only marginals contained in one region (the measured cliques and their subsets);
the tables agree locally but need not be the marginals of any joint distribution; the fitted loss is at most
the exact method's (the relaxation is larger) and equals it where the regions form a junction tree. Synthetic
records keep every region's table within rounding where the matching converges (module ``matching``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from itertools import combinations

import numpy as np

from ...kernel.domain import Domain
from .loss import Term
from .model import Model
from .matching import match_regions, rounded_counts
from .tables import Clique, logsumexp, sample_conditional, shape_of, summed_axes

#: Projection sweeps per step at most, and the largest log-change of a separator marginal that ends them: loose
#: during descent (each step starts from consistent tables), tight for the tables the model keeps.
SWEEPS = 200
SWEEP_TOL = 1e-4
FINAL_TOL = 1e-10
#: Floor of a scaled table entry (keeps logs finite where a cell's probability underflows).
TINY = 1e-300


class Group:
    """Regions of one stored block that hold a sub-clique at the same axes: ``index`` into the block, ``axes``
    summed out (counted after the leading block axis), and (for loss terms) ``rows`` in the term's stack."""

    def __init__(self, block: int, index: list[int], axes: tuple[int, ...], rows: list[int] | None = None):
        self.block, self.index, self.axes = block, np.asarray(index), axes
        self.rows = None if rows is None else np.asarray(rows)
        self.unique = len(set(index)) == len(index)


def regions_of(cliques: Sequence[Clique], d: int) -> list[Clique]:
    """The maximal non-empty cliques, plus a singleton for every attribute no clique holds."""
    sets = sorted({c for c in cliques if c}, key=lambda c: (-len(c), c))
    top: list[Clique] = []
    for c in sets:
        if not any(set(c) <= set(t) for t in top):
            top.append(c)
    covered = {i for c in top for i in c}
    return sorted(top + [(i,) for i in range(d) if i not in covered])


def separators_of(regions: Sequence[Clique]) -> list[Clique]:
    """Every non-empty intersection of two regions (found through the regions holding each attribute)."""
    holding: dict[int, list[int]] = defaultdict(list)
    for k, r in enumerate(regions):
        for i in r:
            holding[i].append(k)
    found: set[Clique] = set()
    for members in holding.values():
        for a, b in combinations(members, 2):
            found.add(tuple(sorted(set(regions[a]) & set(regions[b]))))
    return sorted(found, key=lambda s: (len(s), s))


class RegionEngine:
    """Mirror-descent state: (log-tables, count tables), one stacked block per region shape."""

    def __init__(self, cliques: Sequence[Clique], sizes: Sequence[int], terms: Sequence[Term], total: float):
        self.sizes, self.terms, self.total = tuple(sizes), terms, total
        self.regions = regions_of(cliques, len(sizes))
        shapes = sorted({shape_of(r, sizes) for r in self.regions})
        self.shapes = shapes
        self.where: list[tuple[int, int]] = []  # region -> (block, position in block)
        counts = [0] * len(shapes)
        for r in self.regions:
            b = shapes.index(shape_of(r, sizes))
            self.where.append((b, counts[b]))
            counts[b] += 1
        self.block_sizes = counts
        holding: dict[int, list[int]] = defaultdict(list)
        for k, r in enumerate(self.regions):
            for i in r:
                holding[i].append(k)
        self._holding = holding
        self.separators = []
        for s in separators_of(self.regions):
            holders = self._holders(s)
            self.separators.append((s, self._group(holders, [s] * len(holders))))
        self.term_groups = []
        for term in terms:
            rows = [row for row, c in enumerate(term.cliques) if c]  # the total is fixed: no region moves with it
            cliques = [term.cliques[row] for row in rows]
            self.term_groups.append(self._group([self.home(c) for c in cliques], cliques, rows))

    def _holders(self, attrs: Clique) -> list[int]:
        candidates = set(self._holding[attrs[0]])
        for i in attrs[1:]:
            candidates &= set(self._holding[i])
        return sorted(candidates)

    def home(self, attrs: Clique) -> int | None:
        """The smallest region holding ``attrs`` (None if none does)."""
        holders = self._holders(attrs) if attrs else list(range(len(self.regions)))
        return min(holders, key=lambda k: math.prod(shape_of(self.regions[k], self.sizes))) if holders else None

    def _group(self, regions: list[int], cliques: Sequence[Clique], rows: list[int] | None = None) -> list[Group]:
        """Regions ``regions[j]`` holding ``cliques[j]`` (at ``rows[j]`` of a term's stack), grouped by block and axes."""
        members: dict[tuple, list[int]] = defaultdict(list)
        for j, (k, c) in enumerate(zip(regions, cliques)):
            members[(self.where[k][0], summed_axes(self.regions[k], c, 1))].append(j)
        return [Group(b, [self.where[regions[j]][1] for j in js], axes, None if rows is None else [rows[j] for j in js])
                for (b, axes), js in members.items()]

    def start(self):
        logs = [np.zeros((n,) + shape) for n, shape in zip(self.block_sizes, self.shapes)]
        return self._finish(logs)

    def _finish(self, logs: list[np.ndarray]):
        """Normalize every table to the total, project onto the local polytope, and keep the counts too."""
        log_total = math.log(self.total)
        for lb in logs:
            lb -= logsumexp(lb, tuple(range(1, lb.ndim)), keepdims=True) - log_total
        self.project(logs)
        return logs, [np.exp(lb) for lb in logs]

    def project(self, logs: list[np.ndarray], sweeps: int = SWEEPS, tol: float = SWEEP_TOL) -> int:
        """Cyclic KL projections onto each separator's agreement constraint, in place; returns the sweeps run.

        Works on ``exp(log - region max)`` (tables scaled per region, the scale kept aside), so each projection is
        a sum, a log of the small separator table and a multiplication.
        """
        log_total = math.log(self.total)
        scales = [lb.max(axis=tuple(range(1, lb.ndim)), keepdims=True) for lb in logs]
        tables = [np.exp(lb - scale) for lb, scale in zip(logs, scales)]
        sweep = 0
        for sweep in range(1, sweeps + 1):
            largest = 0.0
            for s, groups in self.separators:
                shape = shape_of(s, self.sizes)
                parts = [np.log(np.maximum(tables[g.block][g.index].sum(axis=g.axes, keepdims=True), TINY))
                         + scales[g.block][g.index] for g in groups]
                mean = sum(p.reshape((-1,) + shape).sum(axis=0) for p in parts) / sum(p.shape[0] for p in parts)
                mean -= logsumexp(mean, tuple(range(mean.ndim))) - log_total
                for g, p in zip(groups, parts):
                    change = mean.reshape(p.shape[1:]) - p
                    largest = max(largest, float(np.abs(change).max()))
                    tables[g.block][g.index] *= np.exp(change)
            if largest <= tol:
                break
        for lb, table, scale in zip(logs, tables, scales):
            np.log(np.maximum(table, TINY), out=lb)
            lb += scale
        return sweep

    def final(self, state):
        """The state's tables projected onto the local polytope to ``FINAL_TOL``."""
        logs = [lb.copy() for lb in state[0]]
        self.project(logs, sweeps=100 * SWEEPS, tol=FINAL_TOL)
        return logs, [np.exp(lb) for lb in logs]

    def marginals(self, state) -> list[np.ndarray]:
        counts = state[1]
        out = []
        for term, groups in zip(self.terms, self.term_groups):
            stack = np.full((len(term.cliques), term.matrix.shape[1]), self.total)
            for g in groups:
                stack[g.rows] = counts[g.block][g.index].sum(axis=g.axes).reshape(len(g.rows), -1)
            out.append(stack)
        return out

    def mix(self, a, b, weight: float):
        """The state (1 - weight) a + weight b: on the polytope when both are (its constraints are linear)."""
        counts = [(1.0 - weight) * p + weight * q for p, q in zip(a[1], b[1])]
        return [np.log(np.maximum(c, TINY)) for c in counts], counts

    def divergence(self, a, b) -> float:
        """The Bregman distance of the mirror map sum_r H(tau_r): sum over regions of KL(a_r || b_r), unnormalized."""
        return float(sum((ca * (la - lb) - ca + cb).sum() for la, ca, lb, cb in zip(*a, *b)))

    def direction(self, gradients: Sequence[np.ndarray]) -> list[tuple[Group, np.ndarray]]:
        """Each group's gradients, shaped to broadcast onto its regions' tables."""
        out = []
        for groups, gradient in zip(self.term_groups, gradients):
            for g in groups:
                shape = [1 if a in g.axes else n for a, n in enumerate((0,) + self.shapes[g.block])][1:]
                out.append((g, gradient[g.rows].reshape([len(g.rows)] + shape)))
        return out

    def move(self, state, direction: list[tuple[Group, np.ndarray]], alpha: float):
        logs = [lb.copy() for lb in state[0]]
        for g, gradient in direction:
            if g.unique:
                logs[g.block][g.index] -= alpha * gradient
            else:  # one clique measured twice with the same matrix: the same region appears twice
                np.subtract.at(logs[g.block], g.index, alpha * gradient)
        return self._finish(logs)


class RegionGraphModel(Model):
    """Pseudo-marginals on the regions (``regions``: the maximal measured cliques). See the module's limits."""

    method = "approximate"

    def __init__(self, domain: Domain, engine: RegionEngine, state, total: float, history: list[float],
                 measured: list[Clique]):
        super().__init__(domain, total, history, measured)
        self._engine = engine
        self._counts = engine.final(state)[1]
        self.regions = engine.regions

    def _table(self, k: int) -> np.ndarray:
        b, position = self._engine.where[k]
        return self._counts[b][position]

    def _marginal(self, subset: Clique) -> np.ndarray:
        k = self._engine.home(subset)
        if k is None:
            raise ValueError(f"the approximate model answers marginals inside one region only; attributes "
                             f"{subset} are in none of its regions (the measured cliques): measure that marginal, "
                             f"or fit with method='exact' if the junction tree is small enough")
        return self._table(k).sum(axis=summed_axes(self.regions[k], subset))

    def _sample(self, n_rows: int, rng: np.random.Generator) -> np.ndarray:
        """Records whose every region's counts are its table scaled to ``n_rows`` (within rounding, once the
        matching converges; module ``matching``), started from draws in order (:meth:`_draw_in_order`)."""
        records = self._draw_in_order(n_rows, rng)
        targets = [rounded_counts(self._table(k), n_rows, rng) for k in range(len(self.regions))]
        match_regions(records, self.regions, targets, self._engine.sizes, rng)
        return records

    def _draw_in_order(self, n_rows: int, rng: np.random.Generator) -> np.ndarray:
        """Attributes drawn one at a time, each from the region that holds it together with the most attributes
        already drawn, conditioned on those: exact draws where the regions form a tree, elsewhere only a start."""
        sizes = self._engine.sizes
        records = np.zeros((n_rows, len(sizes)), dtype=np.int64)
        drawn: set[int] = set()
        holding = self._engine._holding
        while len(drawn) < len(sizes):
            a, k = max(((a, k) for a in range(len(sizes)) if a not in drawn for k in holding[a]),
                       key=lambda ak: (len(drawn & set(self.regions[ak[1]])), -ak[0]))
            given = tuple(i for i in self.regions[k] if i in drawn)
            scope = tuple(sorted(given + (a,)))
            table = self._table(k).sum(axis=summed_axes(self.regions[k], scope))
            table = np.moveaxis(table, scope.index(a), -1).reshape(-1, sizes[a])
            index = (np.ravel_multi_index(tuple(records[:, i] for i in given), shape_of(given, sizes)) if given
                     else np.zeros(n_rows, dtype=np.int64))
            records[:, a] = sample_conditional(table, index, rng)
            drawn.add(a)
        return records
