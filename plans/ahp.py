"""AHP (ektelo plan 8; Zhang, Chen, Xu, Meng and Xie): group cells with similar counts, then
measure one noisy count per group and spread it evenly.

The private partition is rebuilt from vetted pieces (ektelo notes: Identity -> Laplace ->
threshold -> public clustering): rho * eps buys a noisy histogram, small noisy counts are zeroed
(``ahp_threshold``), and ``ahp_cluster`` groups the thresholded values, sizing its error trade-off
for the (1 - rho) * eps that will measure the groups. The vector reduced by that partition is
measured with (1 - rho) * eps; least squares through the reduction's lineage returns the
minimum-norm solution, which is exactly AHP's uniform expansion within each group.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from kernel.matrix import Identity, Matrix
from operators import measure
from operators.client import Handle
from operators.inference import ahp_threshold, least_squares
from operators.partition import ahp_cluster
from plans.common import BudgetLike, data_vector, epsilon_of, split_budget


def ahp(source: Handle, workload: Matrix, budget: BudgetLike, shape: Sequence[int] | None = None,
        rho: float | Fraction | str = 0.85, eta: float = 0.35) -> np.ndarray:
    """AHP: noisy histogram (rho eps), threshold at eta ln(n) / (rho eps), cluster, measure the
    groups ((1 - rho) eps), least squares. Works on the flattened vector in any dimension."""
    vector, _ = data_vector(source, shape)
    partition_epsilon, group_epsilon = split_budget(epsilon_of(budget), rho, "rho")
    noisy = measure.laplace(vector, Identity(vector.size), partition_epsilon).answers
    partition = ahp_cluster(ahp_threshold(noisy, float(partition_epsilon), eta), float(group_epsilon))
    groups = vector.reduce_by_partition(partition.labels)
    return least_squares([measure.laplace(groups, Identity(partition.groups), group_epsilon)], size=vector.size)
