"""ResidualPlanner measured, then one graphical model fitted to the measurements (Private-PGM).

The measurements are ResidualPlanner's (optimal Gaussian noise for the workload's marginals, measured on host
marginals through the kernel); ``operators.pgm.fit`` turns them into one model of the whole table: consistent,
non-negative marginals for any attribute set the model covers, and synthetic records. The fit is
post-processing: the budget is spent by the measurements alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ..operators import pgm
from ..operators.budget import Budget
from ..operators.client import Handle
from ..operators.matrices import MarginalStack
from ..operators.selection.residual_hosts import DEFAULT_HOST_CELLS
from .residual_planner import measured


def residual_planner_pgm(source: Handle, workload: MarginalStack | Iterable, budget: Budget, *,
                         shape: Sequence[int] | None = None, loss: str = "sum", iterations: int = pgm.ITERATIONS,
                         method: str = "auto",
                         max_host_cells: int = DEFAULT_HOST_CELLS,
                         callback: Callable[[int, float], object] | None = None) -> pgm.Model:
    """Measure ``workload``'s marginals with ResidualPlanner under ``budget`` (all of it), then fit a graphical
    model to those measurements.

    ``source``: the table handle; ``workload``: attribute sets or a ``MarginalStack`` matrix; ``shape``: unused
    (the table's domain is the shape). ``loss``: ResidualPlanner's (``"sum"`` or ``"max"``). ``iterations``,
    ``method``, ``callback``: the fit's (``operators.pgm.fit``). Returns the model: ``marginal(A)``,
    ``answer(items)``, ``synthetic(n_rows, seed)``, ``history`` (the fit's loss per iteration).
    """
    _, measurements = measured(source, workload, budget, loss, None, max_host_cells, "ResidualPlanner+PGM")
    model = pgm.fit(source.domain, measurements, method=method, iterations=iterations, callback=callback)
    model.note = (f"a graphical model fitted to {len(measurements)} ResidualPlanner measurements "
                  f"({type(model).__name__}): consistent and non-negative, no error bars (post-processing)")
    return model
