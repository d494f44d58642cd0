"""StructureFirst (Xu, Zhang, Xiao, Yang and Yu 2013; a DPBench algorithm): choose a v-optimal-like bucket
structure privately, then measure one noisy count per bucket and spread it evenly.

The boundaries come from the kernel's vetted ``structure_first`` (docs/privacy/structure-first.md): a
dynamic program over SSE costs of the counts clipped to a public bound F, sampled boundary by boundary with
the exponential mechanism (score sensitivity 2 F + 1). StructureFirst needs F; the paper takes it as known.
Here it is ``bound=`` when the analyst knows one, otherwise 4 N / n (ours: four times the mean count), with
N the public ``scale=`` or a noisy total bought with ``total_share`` of the budget (the catalog labels the
plan as using the record count). Clipping only shapes the structure; the buckets are measured unclipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from kernel.matrix import Identity, Matrix
from operators import measure
from operators.client import Handle
from operators.estimate import VectorEstimate
from plans.common import (
    CONDITIONAL, BudgetLike, ScaleEstimate, epsilon_of, scale_or_noisy_total, solved, split_budget,
)


def structure_first(source: Handle, workload: Matrix, budget: BudgetLike, *, shape: Sequence[int] | None = None,
                    buckets: int = 32, selection_share: float | Fraction | str = 0.3, bound: float | None = None,
                    scale: float | None = None, total_share: float | Fraction | str = 0.05) -> VectorEstimate:
    """StructureFirst in 1-D: ``buckets`` intervals chosen with selection_share * eps, measured with the rest."""
    vector, dims = measure.data_vector(source, shape)
    if len(dims) != 1:
        raise ValueError(f"StructureFirst buckets a 1-D histogram; got {len(dims)} dimensions")
    if not 2 <= int(buckets) <= vector.size:
        raise ValueError(f"buckets must be between 2 and the {vector.size} cells; got {buckets}")
    if bound is None:
        known = scale_or_noisy_total(vector, budget, scale, total_share)
        bound = max(1.0, 4.0 * known.value / vector.size)
    else:
        known = ScaleEstimate(float("nan"), epsilon_of(budget), ())
    structure_epsilon, measure_epsilon = split_budget(known.remaining, selection_share, "selection_share")
    cuts = [0, *vector.structure_first(int(buckets), float(bound), structure_epsilon), vector.size]
    groups = vector.reduce_by_partition(np.repeat(np.arange(len(cuts) - 1), np.diff(cuts)))
    bucket_counts = measure.laplace(groups, Identity(groups.size), measure_epsilon)
    return solved([bucket_counts, *known.measurements], vector.size, workload, CONDITIONAL.format("the buckets"))
