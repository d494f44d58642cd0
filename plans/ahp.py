"""AHP (ektelo plan 8; Zhang, Chen, Xu, Meng and Xie): group cells with similar counts, then
measure one noisy count per group and spread it evenly.

The private partition is rebuilt from vetted pieces (ektelo notes: Identity -> Laplace ->
threshold -> public clustering): selection_share * eps buys a noisy histogram, small noisy counts are zeroed
(``ahp_threshold``), and ``ahp_cluster`` groups the thresholded values, sizing its error trade-off
for the (1 - selection_share) * eps that will measure the groups. The vector reduced by that partition is
measured with (1 - selection_share) * eps; least squares through the reduction's lineage returns the
minimum-norm solution, which is exactly AHP's uniform expansion within each group.

``ahp_star`` is DPBench's AHP*: selection_share and eta read from DPBench's tuned table of the signal strength
eps * N (``AHP_STAR_PARAMETERS``). AHP itself does not need N; AHP* takes it as ``records``, or
spends ``total_share`` of the budget on a noisy total (kept as one more measurement).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction


from ..operators.matrix import Identity, Matrix
from ..operators import measure
from ..operators.client import Handle
from ..operators.measurement import Measurement
from ..operators.estimate import VectorEstimate
from ..operators.inference import ahp_threshold
from ..operators.partition import ahp_cluster
from ..operators.budget import Budget, epsilon_of
from .common import by_signal, records_or_noisy_total, signal_table, solved, split_budget


def ahp(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
        selection_share: float | Fraction | str = 0.85, eta: float = 0.35) -> VectorEstimate:
    """AHP: noisy histogram (selection_share eps), threshold at eta ln(n) / (selection_share eps), cluster, measure the
    groups ((1 - selection_share) eps), least squares. Works on the flattened vector in any dimension."""
    vector, _ = measure.data_vector(source, shape)
    return _ahp(vector, workload, epsilon_of(budget), selection_share, eta)


def _ahp(vector: Handle, workload: Matrix, epsilon: Fraction, selection_share: float | Fraction | str, eta: float,
         known: Sequence[Measurement] = ()) -> VectorEstimate:
    """AHP on a vector handle with ``epsilon``; ``known`` measurements join the final least squares."""
    partition_epsilon, group_epsilon = split_budget(epsilon, selection_share, "selection_share")
    noisy = measure.laplace(vector, Identity(vector.size), partition_epsilon).answers
    partition = ahp_cluster(ahp_threshold(noisy, float(partition_epsilon), eta), float(group_epsilon))
    groups = vector.reduce_by_partition(partition.labels)
    measured = measure.laplace(groups, Identity(partition.groups), group_epsilon)
    return solved([*known, measured], vector.size, workload, chosen="the clusters", reused=known)


#: AHP*'s (selection_share, eta) by signal strength eps * N (eps: the whole budget; N: the public record count, or
#: the noisy total), for 1-D and 2-D domains: DPBench's tuned tables (its ahpND_adaptive_engine, 'DEFALUT1D' and
#: 'DEFALUT2D'), rows (signal, (selection_share, eta)), read as DPBench reads them (linear interpolation).
AHP_STAR_PARAMETERS: dict[int, tuple[tuple[float, tuple[float, float]], ...]] = {
    1: ((0, (0.7, 0.2)), (50, (0.7, 0.2)), (100, (0.7, 0.1)), (500, (0.9, 0.2)), (1e3, (0.9, 0.1)),
        (1e4, (0.8, 0.1)), (5e5, (0.7, 0.3)), (1e6, (0.5, 0.1)), (5e6, (0.5, 0.2)), (1e7, (0.3, 0.1)),
        (1e8, (0.3, 0.3)), (1e20, (0.3, 0.3))),
    2: ((0, (0.9, 0.5)), (500, (0.9, 0.5)), (1e3, (0.9, 0.1)), (5e3, (0.9, 0.1)), (1e4, (0.9, 0.1)),
        (1e5, (0.9, 0.3)), (5e5, (0.9, 0.7)), (1e6, (0.7, 0.1)), (5e6, (0.5, 0.1)), (1e7, (0.7, 0.9)),
        (1e8, (0.5, 0.1)), (1e20, (0.5, 0.1))),
}


def _check_share_eta(value) -> None:
    try:
        share, eta = value
        eta = float(eta)
    except (TypeError, ValueError):
        raise ValueError(f"AHP* table values must be pairs (selection_share, eta), got {value!r}") from None
    split_budget(Fraction(1), share, "selection_share")
    if not (math.isfinite(eta) and eta >= 0):
        raise ValueError(f"eta must be a finite number >= 0, got {eta!r}")


def ahp_star(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
             records: float | None = None, total_share: float | Fraction | str = 0.05,
             table: Sequence[tuple[float, tuple[float, float]]] | None = None) -> VectorEstimate:
    """AHP*: AHP with (selection_share, eta) = ``by_signal(table, eps * N)``, N public (``records``) or the noisy
    total bought with ``total_share`` of the budget; AHP runs on the rest. ``table`` defaults to DPBench's for the
    domain's dimensions (``AHP_STAR_PARAMETERS``)."""
    vector, dims = measure.data_vector(source, shape)
    rows = signal_table(AHP_STAR_PARAMETERS[min(len(dims), 2)] if table is None else table, "table", _check_share_eta)
    epsilon = epsilon_of(budget)
    count = records_or_noisy_total(vector, epsilon, records, total_share)
    share, eta = by_signal(rows, float(epsilon) * count.value)
    return _ahp(vector, workload, count.remaining, share, eta, count.measurements)
