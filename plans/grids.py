"""Qardaji, Yang and Li's grids for 2-D data (ektelo plans 11 and 12).

Both size their cells from the record count N, which their paper treats as public: pass it as
``records``; with ``records=None`` the plan first spends ``total_share`` of the budget (default 5%)
on a noisy total, sizes the grids from that, uses the rest for the grids, and keeps the noisy
total as one more measurement in the final least squares.

- ``uniform_grid``: at least N eps / c square cells (c = 10), one noisy count each, least squares
  (each cell's count spread evenly over it).
- ``adaptive_grid``: a coarse grid for m1 x m1 cells measured with alpha eps; each coarse cell is cut
  again according to its noisy count (c2 = 5) and the sub-cells measured with (1 - alpha) eps; one
  least squares over both levels (ektelo's plan 12). It is the paper's constrained inference done
  exactly: the coarse count and the sum of its sub-cells averaged by their variances, the rest spread
  evenly over the sub-cells. DPBench weights the sub-cells' sum as if there were m2^2 of them; there can
  be more (see below), and then it trusts the coarse count too much.

The cell sizes follow DPBench (``operators.selection.classic``): cells floor(side / m) wide, so the
grids have at least the cells the paper asks for, the last along each side cut short. AGrid+ (ours)
cuts AdaptiveGrid's levels evenly into exactly the m x m cells the paper asks for (m rounded up): on
four DPBench 2-D datasets at 128 x 128 and eps 0.1 its error is 0.7-0.9 of AGrid's at 1e3-1e7 records.
UniformGrid cut that way (ceil) was worse: 11x at 1e6, where DPBench's rule gives the identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction


from ..operators.matrix import Matrix
from ..operators import measure
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.selection import classic
from ..operators.budget import Budget, epsilon_of
from .common import records_or_noisy_total, solved, split_budget


def _two_dimensional(source: Handle, shape: Sequence[int] | None) -> tuple[Handle, tuple[int, ...]]:
    vector, dims = measure.data_vector(source, shape)
    if len(dims) != 2:
        raise ValueError(f"the grid plans are for 2-D domains, got shape {dims}")
    return vector, dims


def uniform_grid(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
                 records: float | None = None, total_share: float | Fraction | str = 0.05,
                 c: float = 10.0) -> VectorEstimate:
    """UniformGrid: one noisy count per cell of a grid sized from N and eps, least squares."""
    vector, dims = _two_dimensional(source, shape)
    count = records_or_noisy_total(vector, epsilon_of(budget), records, total_share)
    cells = classic.uniform_grid(dims, count.value, float(count.remaining), c=c).matrix
    measured = [*count.measurements, measure.laplace(vector, cells, count.remaining)]
    return solved(measured, vector.size, workload, chosen="the grid" if count.measurements else "",
                  reused=count.measurements)


def adaptive_grid(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
                  records: float | None = None, total_share: float | Fraction | str = 0.05,
                  alpha: float | Fraction | str = 0.5, c: float = 10.0, c2: float = 5.0,
                  layout: classic.GridLayout = "dpbench") -> VectorEstimate:
    """AdaptiveGrid: coarse grid (alpha eps), then each coarse cell split by its noisy count
    ((1 - alpha) eps), least squares over both levels. ``layout``: how the cells are cut
    (``classic.GridLayout``): as DPBench does (AGrid), or evenly as the paper sizes them (AGrid+)."""
    vector, dims = _two_dimensional(source, shape)
    count = records_or_noisy_total(vector, epsilon_of(budget), records, total_share)
    first_epsilon, second_epsilon = split_budget(count.remaining, alpha, "alpha")
    level1 = classic.adaptive_grid_level1(dims, count.value, float(count.remaining), c, layout=layout)
    first = measure.laplace(vector, level1, first_epsilon)
    level2 = classic.adaptive_grid_level2(level1, first.answers, float(second_epsilon), c2, layout=layout)
    second = measure.laplace(vector, level2, second_epsilon)
    return solved([*count.measurements, first, second], vector.size, workload, chosen="the grid",
                  reused=[*count.measurements, first])
