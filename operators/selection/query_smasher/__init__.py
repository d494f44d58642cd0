"""QuerySmasher (He et al.): optimal Gaussian strategies for linear queries on marginals.

``query_smasher(domain, queries)`` splits every query on the marginal of ``A`` into
orthogonal subqueries on each ``A' subset A`` (:mod:`.decompose`), solves each distinct
subworkload once, exactly (:mod:`.exact`, certified), with the Fourier heuristic WFF
(:mod:`.wff`) or with ResidualPlanner's basis, and allocates the privacy budget across
subworkloads in closed form (:mod:`.strategy`). Query classes of the paper: :mod:`.classes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Union

import numpy as np

from ...domains import DomainLike, as_domain
from .classes import (
    CLASSES,
    QueryClass,
    abs_queries,
    affine_queries,
    circular_ranges,
    class_queries,
    query_class_workload,
    random_queries,
)
from .decompose import GramStore, QueryMatrix, as_entry, decompose
from ....kernel.matrix.threads import single_threaded_blas
from .select import Solver, select_solutions
from .strategy import QueryReconstruction, QuerySmasherEstimate, QuerySmasherStrategy

__all__ = [
    "CLASSES", "QueryClass", "QueryReconstruction", "QuerySmasherEstimate", "QuerySmasherStrategy", "abs_queries", "affine_queries",
    "circular_ranges", "class_queries", "query_class_workload", "query_smasher", "random_queries",
]

Weights = Union[float, Sequence[float], np.ndarray]


def query_smasher(
    domain: DomainLike,
    queries: Iterable[tuple[Iterable[str | int] | str | int, QueryMatrix]],
    *,
    weights: Sequence[Weights] | None = None,
    solver: Solver = "exact",
    tol: float = 1e-8,
    workers: int | None = None,
) -> QuerySmasherStrategy:
    """Select the QuerySmasher plan for linear queries on marginals.

    ``queries``: ``[(attributes, matrix)]``; the matrix's columns are the cells of the
    marginal on ``attributes`` in the order given (C order), as a ``kernel.matrix`` Matrix
    (Kronecker products, stacks and weights are recognised) or a dense array. ``weights``:
    one per item, a scalar or one per query; a weight multiplies its query's variance in the
    objective (default 1). ``solver``: ``"exact"`` (optimal, certified to relative ``tol``),
    ``"wff"`` (Fourier basis) or ``"residual"`` (ResidualPlanner's basis). The strategy is at unit noise
    (pcost 1); ``.at(budget)`` gives its errors at a budget. ``workers``: processes for the exact
    solves (default: 2 when there are many distinct solves, else serial).
    """
    domain = as_domain(domain)
    items = list(queries)
    if not items:
        raise ValueError("the workload needs at least one (attributes, matrix) item")
    if weights is None:
        weights = [1.0] * len(items)
    elif len(weights) != len(items):
        raise ValueError(f"{len(weights)} weights for {len(items)} workload items")
    entries = [as_entry(domain, attributes, matrix, w) for (attributes, matrix), w in zip(items, weights)]
    store = GramStore()
    with single_threaded_blas():  # small dense algebra throughout: threads only add synchronisation
        solutions = select_solutions(decompose(domain, entries, store), store, solver, tol, workers)
    return QuerySmasherStrategy(domain, entries, solutions, solver)
