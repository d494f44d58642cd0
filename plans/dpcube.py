"""DPCube (Xiao, Xiong, Fan, Goryczka and Li; a DPBench algorithm): a coarse noisy histogram, a kd-tree
of nearly uniform boxes built from it, one noisy count per box.

``dpcube`` (catalog "DPCube") is the algorithm as DPBench runs it (1-D and 2-D engines alike):

1. ``alpha`` * eps buys a noisy grid: one Laplace count per block of ``gz`` cells along every side (the last
   block along a side may be smaller), spread evenly over the block's cells. The blocks are disjoint, so
   the L1 sensitivity is 1.
2. ``operators.partition.sse_kd_partition`` cuts the domain into boxes from that grid alone (post-processing):
   a box is cut at the cut that lowers the squared error of the grid's values the most, while the cut
   lowers it by more than 1 / ((1 - alpha) eps).
3. (1 - alpha) * eps measures the boxes' counts (disjoint, L1 sensitivity 1); the estimate spreads each
   box's noisy count evenly over its cells. The grid of step 1 is not used again.

DPBench's defaults: gz = 11, alpha = 0.5. A box inside one block has constant grid values, so it is never
cut: boxes are unions of whole blocks (or cover parts of several), and when the data vary within blocks of
11 cells the estimate keeps that bias however many records there are.

``dpcube_plus`` (catalog "DPCube+", ours): the noisy histogram is at full resolution, a box is kept once its
noisy counts look uniform against the noise (``operators.partition.kd_partition``), and one least squares
over the cells and the boxes gives the estimate. It has no floor of bias, so it is far better than DPCube at
large scales; DPCube is better at small ones (docs/dpbench.md).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..operators.matrix import Identity, Matrix
from ..operators import measure
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.partition import grid, kd_partition, sse_kd_partition
from ..operators.budget import Budget, epsilon_of
from .common import solved, split_budget


def dpcube(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
           gz: int = 11, alpha: float | Fraction | str = 0.5) -> VectorEstimate:
    """DPCube as DPBench runs it: a noisy grid of gz-cell blocks (alpha eps), kd-tree boxes cut where they
    lower the grid's squared error by more than 1 / eps_2, noisy box counts (eps_2 = (1 - alpha) eps) spread
    evenly. Any number of dimensions (DPBench runs 1-D and 2-D)."""
    vector, dims = measure.data_vector(source, shape)
    if isinstance(gz, bool) or not isinstance(gz, numbers.Integral) or gz < 1:
        raise ValueError(f"gz must be a whole number of cells >= 1, got {gz!r}")
    grid_epsilon, box_epsilon = split_budget(epsilon_of(budget), alpha, "alpha")
    blocks = grid(dims, int(gz))
    coarse = measure.laplace(vector, blocks.matrix(), grid_epsilon).answers
    spread = (coarse[blocks.labels] / blocks.sizes[blocks.labels]).reshape(dims)
    boxes = sse_kd_partition(spread, 1.0 / float(box_epsilon))
    return solved([measure.laplace(vector, boxes, box_epsilon)], vector.size, workload, chosen="the boxes")


def dpcube_plus(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
                selection_share: float | Fraction | str = 0.5, variance_factor: float = 2.0) -> VectorEstimate:
    """DPCube+ (ours): noisy cells (selection_share eps), kd-tree boxes from them, noisy box counts (the rest),
    least squares over cells and boxes.

    Its kd-tree splits a box at the median of its noisy mass until its counts look uniform: sample variance
    <= ``variance_factor`` * 2 b^2, the variance of the noise alone (b = 1 / (selection_share eps)). With
    ``variance_factor`` = 2 and m cells the ratio to 2 b^2 has mean 1 and standard deviation about
    sqrt(5 / m) under uniform counts (Laplace kurtosis 6): by simulation a uniform box is split with
    probability about 12% for 5 cells, 5% for 20 and 0.06% for 100."""
    vector, dims = measure.data_vector(source, shape)
    if not (np.isfinite(variance_factor) and variance_factor >= 0):
        raise ValueError(f"variance_factor must be a finite number >= 0, got {variance_factor!r}")
    cell_epsilon, box_epsilon = split_budget(epsilon_of(budget), selection_share, "selection_share")
    cells = measure.laplace(vector, Identity(vector.size), cell_epsilon)
    boxes = kd_partition(cells.answers.reshape(dims), 1.0 / float(cell_epsilon), variance_factor)
    return solved([cells, measure.laplace(vector, boxes, box_epsilon)], vector.size, workload, chosen="the boxes",
                  reused=[cells])
