"""QuerySmasher end to end: select the strategy for linear queries on marginals (no data), measure every
subworkload through the kernel on a few host marginals, answer the workload and stitch marginals
(``operators.selection.query_smasher``; the measurement is explained in its ``hosts`` module).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..operators import measure
from ..operators.budget import Budget
from ..operators.client import Handle
from ..operators.selection.query_smasher import QuerySmasherEstimate, Weights, query_smasher as select
from ..operators.selection.query_smasher.decompose import QueryMatrix
from ..operators.selection.query_smasher.select import Solver
from ..operators.selection.residual_hosts import DEFAULT_HOST_CELLS

Queries = Iterable[tuple[Iterable[str | int] | str | int, QueryMatrix]]


def query_smasher(source: Handle, workload: Queries, budget: Budget, *, shape: Sequence[int] | None = None,
                  weights: Sequence[Weights] | None = None, solver: Solver = "exact",
                  max_host_cells: int = DEFAULT_HOST_CELLS, tol: float = 1e-8,
                  workers: int | None = None) -> QuerySmasherEstimate:
    """Answer linear queries on marginals with Gaussian noise, spending exactly ``budget`` (a ``ZCDP``, or an
    ``ApproxDP`` read as the rho that implies it; a ``PureDP`` is refused).

    ``source``: the table handle. ``workload``: ``[(attributes, matrix)]``; ``weights``, ``solver``,
    ``tol``, ``workers``: as for :func:`operators.selection.query_smasher.query_smasher`. ``shape``:
    unused (the table's domain is the shape), accepted as every plan does. ``max_host_cells``: the
    largest marginal the kernel vectorizes to carry several measurements (1 gives one host per maximal
    measured set). Returns a :class:`QuerySmasherEstimate`.
    """
    measure.table_and_rho(source, budget, "QuerySmasher")  # refused before the selection's work
    strategy = select(source.domain, workload, weights=weights, solver=solver, tol=tol, workers=workers)
    return strategy.reconstruct(strategy.measure(source, budget, max_host_cells=max_host_cells))
