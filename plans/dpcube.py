"""DPCube (Xiao, Xiong, Fan, Goryczka and Li; a DPBench algorithm): a noisy histogram, a kd-tree
of nearly uniform boxes built from it, one noisy count per box, and one least squares over both.

1. ``selection_share`` * eps buys the noisy histogram: Laplace on every cell (Identity, sensitivity 1), noise
   scale b = 1 / (selection_share eps).
2. ``operators.partition.kd_partition`` splits the domain into boxes from those noisy counts
   alone: a box is split at the median of its noisy mass along its longest side until its
   counts look uniform (sample variance <= ``variance_factor`` * 2 b^2, the variance of the
   noise alone) or it is a single cell. This is post-processing of a kernel answer, so it needs
   no new kernel mechanism and costs no budget.
3. (1 - selection_share) * eps measures the boxes' counts: Laplace on their Ranges matrix; the boxes are
   disjoint, so its L1 sensitivity is 1.
4. Least squares over both measurements, each weighted by its noise, gives the estimate.

``selection_share`` = 0.5 (ours, an even split): both measurements enter the final estimate, and the
partition needs a histogram about as accurate as the box counts it decides.
``variance_factor`` = 2: under uniform counts the ratio of the sample variance to 2 b^2 has
mean 1 and standard deviation about sqrt(5 / m) for m cells (Laplace kurtosis 6); by simulation
a box of uniform counts is split with probability about 12% for 5 cells, 5% for 20 and 0.06%
for 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from kernel.matrix import Identity, Matrix
from operators import measure
from operators.client import Handle
from operators.estimate import VectorEstimate
from operators.partition import kd_partition
from plans.common import REUSED, BudgetLike, epsilon_of, solved, split_budget


def dpcube(source: Handle, workload: Matrix, budget: BudgetLike, *, shape: Sequence[int] | None = None,
           selection_share: float | Fraction | str = 0.5, variance_factor: float = 2.0) -> VectorEstimate:
    """DPCube: noisy cells (selection_share eps), kd-tree boxes from them, noisy box counts (the rest),
    least squares over cells and boxes. Any number of dimensions (DPBench runs 1-D and 2-D)."""
    vector, dims = measure.data_vector(source, shape)
    if not (np.isfinite(variance_factor) and variance_factor >= 0):
        raise ValueError(f"variance_factor must be a finite number >= 0, got {variance_factor!r}")
    cell_epsilon, box_epsilon = split_budget(epsilon_of(budget), selection_share, "selection_share")
    cells = measure.laplace(vector, Identity(vector.size), cell_epsilon)
    boxes = kd_partition(cells.answers.reshape(dims), 1.0 / float(cell_epsilon), variance_factor)
    return solved([cells, measure.laplace(vector, boxes, box_epsilon)], vector.size, workload, REUSED)
