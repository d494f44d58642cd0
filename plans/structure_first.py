"""StructureFirst (Xu, Zhang, Xiao, Yang and Yu 2013; a DPBench algorithm): choose a v-optimal-like bucket
structure privately, then measure the cells of each bucket.

The boundaries come from the kernel's vetted ``structure_first`` (docs/privacy/structure-first.md): a
dynamic program over SSE costs of the counts clipped to a public bound F, sampled boundary by boundary with
the exponential mechanism (score sensitivity 2 F + 1). Both plans need the record count N: the public
``records=``, or a noisy total bought with ``total_share`` of the budget (kept as one more measurement).

- ``structure_first`` (catalog "SF") runs the algorithm as DPBench ran the authors' code: k = ceil(n / 10)
  buckets, F = 10,000 N / n (in effect no clipping), the structure's epsilon from the authors' grid rule
  (:func:`structure_epsilon`; about eps / 20 in DPBench's settings), and each bucket measured with the rest
  as a binary tree over its cells ("boost": Hay et al.'s hierarchy, ceil(log2 L) + 1 levels of Laplace
  noise at levels / eps for a bucket of L cells), one least squares over all of them.
- ``structure_first_plus`` (catalog "SF+", ours): fewer buckets (32), a tight bound F = 4 N / n that makes
  the structure step informative, and one noisy count per bucket spread evenly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..operators.matrix import Identity, Intervals, Matrix, VStack, Weighted
from ..operators import measure
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.budget import Budget, epsilon_of
from .common import RecordCount, records_or_noisy_total, solved, split_budget

#: The authors' fractions: buckets per cell, and the clipping bound over the mean count.
BUCKETS_PER_CELL, BOUND_OVER_MEAN, EPSILON_STEPS = 0.1, 10_000, 20


def structure_epsilon(n: int, buckets: int, epsilon: Fraction, bound: float, steps: int = EPSILON_STEPS) -> Fraction:
    """The structure step's share of ``epsilon`` by the authors' rule: the first of eps * i / steps
    (i = 1 .. steps - 1) minimising their error estimate

        v(e1) = 8 (k-1)^2 (2F+1)^2 / (e1 (8 (k-1) (2F+1) - e1 n F^2)) + 2 k / (eps - e1)^2

    (k buckets, F the bound). The first term is negative beyond its pole, so with DPBench's huge F the rule
    picks the smallest step, eps / steps. Public arithmetic on public values."""
    k, f, eps = buckets, float(bound), float(epsilon)
    shares = [epsilon * i / steps for i in range(1, steps)]
    e1 = np.array([float(s) for s in shares])
    with np.errstate(divide="ignore", invalid="ignore"):
        structure = 8 * (k - 1) ** 2 * (2 * f + 1) ** 2 / (e1 * (8 * (k - 1) * (2 * f + 1) - e1 * n * f * f))
    values = np.nan_to_num(structure, nan=np.inf) + 2 * k / (eps - e1) ** 2
    return shares[int(np.argmin(values))]


def bucket_trees(cuts: Sequence[int]) -> Matrix:
    """Every bucket [cuts[i], cuts[i+1]) as a binary tree over its cells, padded to a power of two (nodes over
    the padding alone dropped), each row scaled by 1 / (the bucket's levels): one Laplace measurement at eps
    then gives every node of a bucket with h levels noise of scale h / eps, as the authors' per-bucket trees
    at eps each (the buckets are disjoint)."""
    by_levels: dict[int, tuple[list[int], list[int]]] = {}
    for start, stop in zip(cuts, cuts[1:]):
        levels = math.ceil(math.log2(stop - start)) + 1
        lo, hi = by_levels.setdefault(levels, ([], []))
        for level in range(levels):
            starts = np.arange(start, stop, 2**level)
            lo.extend(starts)
            hi.extend(np.minimum(starts + 2**level, stop) - 1)
    n = cuts[-1]
    return VStack([Weighted(Intervals(n, lo, hi), 1 / levels) for levels, (lo, hi) in sorted(by_levels.items())])


def structure_first(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
                    records: float | None = None, total_share: float | Fraction | str = 0.05) -> VectorEstimate:
    """StructureFirst in 1-D as DPBench ran it: ceil(n / 10) private buckets, a binary tree of noisy counts
    in each, least squares."""
    vector, n = _one_dimensional(source, shape)
    known = records_or_noisy_total(vector, epsilon_of(budget), records, total_share)
    buckets = math.ceil(BUCKETS_PER_CELL * n)
    cuts, measure_epsilon = [0, n], known.remaining
    if buckets >= 2:
        bound = BOUND_OVER_MEAN * known.value / n
        structure = structure_epsilon(n, buckets, known.remaining, bound)
        cuts = [0, *vector.structure_first(buckets, bound, structure), n]
        measure_epsilon = known.remaining - structure
    trees = measure.laplace(vector, bucket_trees(cuts), measure_epsilon)
    return solved([trees, *known.measurements], n, workload, chosen="the buckets", reused=known.measurements)


def structure_first_plus(source: Handle, workload: Matrix, budget: Budget, *,
                         shape: Sequence[int] | None = None, buckets: int = 32,
                         selection_share: float | Fraction | str = 0.3, bound: float | None = None,
                         records: float | None = None, total_share: float | Fraction | str = 0.05) -> VectorEstimate:
    """SF+ (ours): ``buckets`` intervals chosen with selection_share * eps from counts clipped to ``bound``
    (default 4 N / n, four times the mean count), one noisy count each with the rest, spread evenly."""
    vector, n = _one_dimensional(source, shape)
    if not 2 <= int(buckets) <= n:
        raise ValueError(f"buckets must be between 2 and the {n} cells; got {buckets}")
    if bound is None:
        known = records_or_noisy_total(vector, epsilon_of(budget), records, total_share)
        bound = max(1.0, 4.0 * known.value / n)
    else:
        known = RecordCount(float("nan"), epsilon_of(budget), ())
    select_epsilon, measure_epsilon = split_budget(known.remaining, selection_share, "selection_share")
    cuts = [0, *vector.structure_first(int(buckets), float(bound), select_epsilon), n]
    groups = vector.reduce_by_partition(np.repeat(np.arange(len(cuts) - 1), np.diff(cuts)))
    bucket_counts = measure.laplace(groups, Identity(groups.size), measure_epsilon)
    return solved([bucket_counts, *known.measurements], n, workload, chosen="the buckets",
                  reused=known.measurements)


def _one_dimensional(source: Handle, shape: Sequence[int] | None) -> tuple[Handle, int]:
    vector, dims = measure.data_vector(source, shape)
    if len(dims) != 1:
        raise ValueError(f"StructureFirst buckets a 1-D histogram; got {len(dims)} dimensions")
    return vector, vector.size
