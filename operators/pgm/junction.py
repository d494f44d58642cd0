"""Junction trees: triangulation, sum-product message passing in log space, marginals and forward sampling.

The measured cliques define a graph on the attributes (an edge between two attributes measured together).
Eliminating its vertices greedily (fewest fill-in edges, then fewest cells) triangulates it; the maximal
elimination cliques, joined by a maximum-weight spanning tree of their intersection sizes, form a junction
tree (every clique's attributes stay connected). Its largest clique bounds the cost of exact inference.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations

import networkx as nx
import numpy as np

from .tables import Clique, expand, log_marginal, logsumexp, sample_conditional, shape_of

#: Largest table variable elimination builds for a marginal outside every junction-tree clique.
ELIMINATION_CELLS = 1 << 27


class TooLarge(ValueError):
    """The triangulated graph has a clique of more cells than allowed (``cells``: the first one met)."""

    def __init__(self, cells: int, limit: int):
        super().__init__(f"the junction tree needs a clique of {cells:.3g} cells, more than {limit:.3g}")
        self.cells = cells


def triangulate(cliques: Sequence[Clique], sizes: Sequence[int], max_cells: float) -> list[Clique]:
    """The maximal cliques of a greedy min-fill triangulation of the cliques' graph (sorted positions).

    Raises :class:`TooLarge` as soon as an elimination clique exceeds ``max_cells`` cells.
    """
    adjacent: dict[int, set[int]] = {v: set() for v in range(len(sizes))}
    for clique in cliques:
        for a, b in combinations(clique, 2):
            adjacent[a].add(b)
            adjacent[b].add(a)

    def cost(v: int) -> tuple[int, int]:
        fill = sum(1 for a, b in combinations(adjacent[v], 2) if b not in adjacent[a])
        return fill, math.prod(sizes[u] for u in adjacent[v] | {v})

    # a heap of (cost, vertex), stale entries skipped: an elimination changes the cost of its clique's members
    # and their neighbours only, so the others are not rescanned
    current = {v: cost(v) for v in adjacent}
    heap = [(c, v) for v, c in current.items()]
    heapq.heapify(heap)
    eliminated: list[Clique] = []
    while adjacent:
        c, v = heapq.heappop(heap)
        if v not in adjacent or current[v] != c:
            continue
        members = adjacent.pop(v) | {v}
        cells = math.prod(sizes[u] for u in members)
        if cells > max_cells:
            raise TooLarge(cells, int(max_cells))
        for a in members - {v}:
            adjacent[a] |= members - {a, v}
            adjacent[a].discard(v)
        for u in set().union(*(adjacent[a] for a in members - {v}), members - {v}):
            current[u] = cost(u)
            heapq.heappush(heap, (current[u], u))
        eliminated.append(tuple(sorted(members)))
    sets = [set(c) for c in eliminated]
    holding: dict[int, list[int]] = defaultdict(list)
    for k, c in enumerate(eliminated):
        for i in c:
            holding[i].append(k)
    return [c for k, c in enumerate(eliminated)  # a clique's supersets hold its first attribute
            if not any(sets[k] < sets[j] or (sets[k] == sets[j] and j < k) for j in holding[c[0]])]


@dataclass(frozen=True)
class JunctionTree:
    """Cliques (sorted positions), each one's parent (-1 at the root) and an order with parents first."""

    cliques: tuple[Clique, ...]
    parent: tuple[int, ...]
    order: tuple[int, ...]
    sizes: tuple[int, ...]

    def separator(self, j: int) -> Clique:
        """The attributes clique ``j`` shares with its parent."""
        return tuple(i for i in self.cliques[j] if i in self.cliques[self.parent[j]]) if self.parent[j] >= 0 else ()

    @cached_property
    def _holding(self) -> dict[int, set[int]]:
        """The cliques holding each attribute."""
        holding: dict[int, set[int]] = defaultdict(set)
        for j, c in enumerate(self.cliques):
            for i in c:
                holding[i].add(j)
        return holding

    def home(self, attrs: Clique) -> int | None:
        """The smallest clique containing ``attrs``, or None (found through the cliques holding each attribute)."""
        fits = set.intersection(*(self._holding[i] for i in attrs)) if attrs else range(len(self.cliques))
        return min(fits, key=lambda j: (math.prod(shape_of(self.cliques[j], self.sizes)), j)) if fits else None


def junction_tree(cliques: Sequence[Clique], sizes: Sequence[int], max_cells: float) -> JunctionTree:
    """A junction tree over every attribute covering ``cliques`` (raises :class:`TooLarge` past ``max_cells``)."""
    nodes = triangulate(cliques, sizes, max_cells)
    holding: dict[int, list[int]] = defaultdict(list)
    for k, c in enumerate(nodes):
        for i in c:
            holding[i].append(k)
    graph = nx.Graph()
    graph.add_nodes_from(range(len(nodes)))
    for members in holding.values():  # only cliques that share attributes: no all-pairs graph
        for a, b in combinations(members, 2):
            graph.add_edge(a, b, weight=len(set(nodes[a]) & set(nodes[b])))
    forest = nx.maximum_spanning_tree(graph)
    parent = [-1] * len(nodes)
    order: list[int] = []
    for component in sorted(nx.connected_components(forest), key=min):  # each joins clique 0 by an empty separator
        root = min(component)
        parent[root] = 0 if root else -1
        order.append(root)
        for a, b in nx.bfs_edges(forest, root):
            parent[b] = a
            order.append(b)
    return JunctionTree(tuple(nodes), tuple(parent), tuple(order), tuple(sizes))


def calibrate(tree: JunctionTree, potentials: Sequence[np.ndarray], total: float = 1.0) -> list[np.ndarray]:
    """Sum-product in log space: every clique's table of probabilities times ``total`` from log-potentials (one
    per clique). The messages stay in log space; each belief is exponentiated once, at the end (exp is most of
    the cost), and scaled in place."""
    cliques, sizes = tree.cliques, tree.sizes
    upward: dict[int, np.ndarray] = {}
    gathered = list(potentials)  # entries are replaced, never changed in place
    for j in reversed(tree.order):  # leaves to root
        p = tree.parent[j]
        if p >= 0:
            message = log_marginal(gathered[j], cliques[j], tree.separator(j))
            upward[j] = message - message.max()
            gathered[p] = gathered[p] + expand(upward[j], tree.separator(j), cliques[p], sizes)
    beliefs = list(gathered)
    for j in tree.order:  # root to leaves: a child's belief adds its parent's belief without the child's message
        p = tree.parent[j]
        if p >= 0:
            separator = tree.separator(j)
            message = log_marginal(beliefs[p], cliques[p], separator) - upward[j]
            beliefs[j] = gathered[j] + expand(message - message.max(), separator, cliques[j], sizes)
    tables = []
    for b in beliefs:
        p = b - b.max()
        np.exp(p, out=p)
        p *= total / p.sum()
        tables.append(p)
    return tables


def marginal(tree: JunctionTree, log_probabilities: Sequence[np.ndarray], attrs: Clique) -> np.ndarray:
    """The log-probability table over ``attrs`` (sorted positions) of a calibrated tree, by variable elimination
    on the smallest subtree that covers them (the joint is prod(clique tables) / prod(separator tables))."""
    home = tree.home(attrs)
    if home is not None:
        return log_marginal(log_probabilities[home], tree.cliques[home], attrs)
    keep = set(range(len(tree.cliques)))
    pruned = True
    while pruned:  # drop leaves that hold no target attribute beyond their separator
        pruned = False
        for j in list(keep):
            links = [k for k in keep if k != j and (tree.parent[j] == k or tree.parent[k] == j)]
            if len(links) <= 1 and len(keep) > 1:
                shared = set(tree.cliques[j]) & set(tree.cliques[links[0]]) if links else set()
                if set(attrs) & set(tree.cliques[j]) <= shared:
                    keep.discard(j)
                    pruned = True
    factors = [(tree.cliques[j], log_probabilities[j]) for j in keep]
    for j in keep:
        if tree.parent[j] in keep:
            separator = tree.separator(j)
            factors.append((separator, -log_marginal(log_probabilities[j], tree.cliques[j], separator)))
    return eliminate(factors, attrs, tree.sizes)


def eliminate(factors: list[tuple[Clique, np.ndarray]], attrs: Clique, sizes: Sequence[int]) -> np.ndarray:
    """log sum over every attribute outside ``attrs`` of the sum of log-factors (greedy smallest-table order)."""
    factors = list(factors)
    while True:
        hidden = {i for scope, _ in factors for i in scope} - set(attrs)
        if not hidden:
            break
        v = min(hidden, key=lambda u: math.prod(
            sizes[i] for i in set().union(*(s for s, _ in factors if u in s))))
        scope, table = _join([f for f in factors if v in f[0]], sizes)
        rest = tuple(i for i in scope if i != v)
        factors = [f for f in factors if v not in f[0]] + [(rest, log_marginal(table, scope, rest))]
    factors.append((tuple(attrs), np.zeros(shape_of(attrs, sizes))))
    scope, table = _join(factors, sizes)
    return table - logsumexp(table, tuple(range(table.ndim)))


def _join(factors: list[tuple[Clique, np.ndarray]], sizes: Sequence[int]) -> tuple[Clique, np.ndarray]:
    scope = tuple(sorted(set().union(*(s for s, _ in factors))))
    cells = math.prod(shape_of(scope, sizes))
    if cells > ELIMINATION_CELLS:
        raise ValueError(f"this marginal needs a table of {cells:.3g} cells; ask for fewer attributes")
    table = np.zeros(shape_of(scope, sizes))
    for s, t in factors:
        table = table + expand(t, s, scope, sizes)
    return scope, table


def forward_sample(tree: JunctionTree, probabilities: Sequence[np.ndarray], n_rows: int,
                   rng: np.random.Generator) -> np.ndarray:
    """``n_rows`` records (rows x attributes, int64) drawn from the tree's distribution: the root clique
    first, then each clique's new attributes given its separator's sampled values."""
    sizes = tree.sizes
    records = np.zeros((n_rows, len(sizes)), dtype=np.int64)
    for j in tree.order:
        clique, separator = tree.cliques[j], tree.separator(j)
        new = tuple(i for i in clique if i not in separator)
        if not new:
            continue
        axes = [clique.index(i) for i in separator] + [clique.index(i) for i in new]
        table = np.transpose(probabilities[j], axes).reshape(math.prod(shape_of(separator, sizes)), -1)
        given = (np.ravel_multi_index(tuple(records[:, i] for i in separator), shape_of(separator, sizes))
                 if separator else np.zeros(n_rows, dtype=np.int64))
        drawn = sample_conditional(table, given, rng)
        records[:, list(new)] = np.stack(np.unravel_index(drawn, shape_of(new, sizes)), axis=1)
    return records
