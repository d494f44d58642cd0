"""ResidualPlanner end to end: select noise scales for a marginal workload (no data), measure every residual
through the kernel on a few host marginals, reconstruct every marginal of the workload's closure
(``operators.selection.residual_planner``; the measurement is explained in ``operators.selection.residual_hosts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..operators.matrix import Matrix
from ..operators import measure
from ..operators.budget import Budget
from ..operators.client import Handle
from ..operators.matrices import MarginalStack
from ..operators.selection.residual_hosts import DEFAULT_HOST_CELLS
from ..operators.selection.residual_planner import ResidualPlannerEstimate, residual_planner as select


def residual_planner(source: Handle, workload: MarginalStack | Iterable, budget: Budget, *,
                     shape: Sequence[int] | None = None, loss: str = "sum", weights: Sequence[float] | None = None,
                     max_host_cells: int = DEFAULT_HOST_CELLS) -> ResidualPlannerEstimate:
    """Answer a marginal workload with Gaussian noise, spending exactly ``budget`` (a ``ZCDP``, or an ``ApproxDP``
    read as the rho that implies it; a ``PureDP`` is refused: Gaussian noise cannot give pure DP).

    ``source``: the table handle. ``workload``: attribute tuples (names or positions, ``()`` the
    total) or a ``MarginalStack`` matrix (its subsets; row weights ``w`` become variance weights ``w^2``).
    ``shape``: unused (the table's domain is the shape), accepted as every plan does. ``loss`` /
    ``weights``: as for :func:`operators.selection.residual_planner`. ``max_host_cells``: the largest
    marginal the kernel vectorizes to carry several residuals (1 gives one host per maximal workload
    marginal). Returns a :class:`ResidualPlannerEstimate`: every marginal of the closure with its
    variance, ``answer`` / ``intervals`` over the workload.
    """
    strategy, measurements = measured(source, workload, budget, loss, weights, max_host_cells, "ResidualPlanner")
    return strategy.reconstruct(measurements)


def measured(source: Handle, workload: MarginalStack | Iterable, budget: Budget, loss: str, weights, max_host_cells: int,
             who: str) -> tuple:
    """ResidualPlanner's strategy for the workload's marginals and its measurements of ``source`` with all of
    ``budget`` (``who``: the plan named in a refusal)."""
    measure.table_and_rho(source, budget, who)  # refused before the selection's work
    subsets, weights = _subsets_and_weights(workload, weights)
    strategy = select(source.domain, subsets, loss=loss, weights=weights)
    return strategy, strategy.measure(source, budget, max_host_cells=max_host_cells)


def _subsets_and_weights(marginals: MarginalStack | Iterable, weights) -> tuple[list, object]:
    """Attribute subsets of the workload; a weighted MarginalStack's row weight w counts as w^2 on variance."""
    if marginals is None or (isinstance(marginals, Matrix) and not isinstance(marginals, MarginalStack)):
        raise ValueError("a marginal plan needs its marginals: attribute sets or a MarginalStack "
                         "(from the command line: --workload kway:K, upto:K or attribute sets such as a,b;b,c)")
    if not isinstance(marginals, MarginalStack):
        return [m if isinstance(m, (str, int)) else tuple(m) for m in marginals], weights
    if weights is None and any(w != 1.0 for w in marginals.weights.values()):
        weights = [w * w for w in marginals.weights.values()]
    return marginals.subsets, weights
