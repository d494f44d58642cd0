"""DAWA (ektelo plan 9; Li, Hay, Miklau and Wang 2014) and DAWA-Striped (ektelo plan 14).

DAWA spends selection_share * eps on a private partition of the cells into nearly uniform blocks, then
measures the reduced vector with GreedyH fit to the reduced workload W P^+ and (1 - selection_share) * eps,
and least squares through the reduction's lineage spreads each block evenly.

The private step is the kernel's vetted ``dyadic_deviations`` (docs/privacy/dawa.md): noisy
deviations of aligned dyadic blocks, which ``operators.partition.dawa_partition`` turns into the
cheapest partition (public post-processing). Restricting blocks to aligned dyadic intervals is what
makes the sensitivity small (a cell lies in one block per level); the reference code noised every
interval as if it were the only one. In 2-D the cells are first put in Hilbert-curve order (a
permutation: stability 1), so blocks are compact regions, and the estimate is truncated toward zero as DPBench's
2-D engine truncates it (it stores the estimate in an int32 array); that makes it 2-3x more accurate on sparse
tables (GOWALLA at 128 x 128) and its error bars are withheld.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from ..operators.matrix import Matrix, Product, Sparse
from ..operators import measure
from ..operators.client import Handle
from ..operators.measurement import Measurement
from ..operators.estimate import VectorEstimate
from ..operators.linalg import explicit_sparse
from ..operators.partition import Partition, dawa_partition, hilbert_order, stripe
from ..operators.selection.classic import EXPLICIT_NONZEROS, greedy_h
from ..operators.budget import Budget, epsilon_of
from .common import post_processed, solved, split_budget


def _permutation(order: np.ndarray) -> Sparse:
    """Pi with (Pi x)[t] = x[order[t]]."""
    n = order.size
    return Sparse(sp.csr_array((np.ones(n), (np.arange(n), order)), shape=(n, n)))


def dawa_measurement(vector: Handle, workload: Matrix, epsilon: Fraction,
                     selection_share: float | Fraction | str) -> Measurement:
    """DAWA on a 1-D vector handle whose cells ``workload`` covers: partition with selection_share * eps,
    then GreedyH(W P^+) on the reduced vector with the rest."""
    partition_epsilon, measure_epsilon = split_budget(epsilon, selection_share, "selection_share")
    costs = vector.dyadic_deviations(partition_epsilon).values
    partition = dawa_partition(costs, vector.size, float(measure_epsilon))
    groups = vector.reduce_by_partition(partition.labels)
    return measure.laplace(groups, greedy_h(partition.reduce(workload)).matrix, measure_epsilon)


#: DPBench's DAWA engines spend this share of eps on the partition: 1-D (dawa_engine) and 2-D (dawa2D_engine).
SELECTION_SHARE = {1: Fraction(1, 2), 2: Fraction(1, 4)}


def dawa(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
         selection_share: float | Fraction | str | None = None) -> VectorEstimate:
    """DAWA in 1-D, or in 2-D on a square power-of-two grid through the Hilbert ordering; ``selection_share``
    defaults to DPBench's (``SELECTION_SHARE``: a half in 1-D, a quarter in 2-D)."""
    vector, dims = measure.data_vector(source, shape)
    if selection_share is None:
        selection_share = SELECTION_SHARE.get(len(dims), SELECTION_SHARE[1])
    answered = workload
    if len(dims) == 2:
        if dims[0] != dims[1]:
            raise ValueError(f"2-D DAWA orders cells along a Hilbert curve, which needs a square grid; got {dims}")
        order = _permutation(hilbert_order(dims[0]))
        vector, workload = vector.transform(order), Product([workload, order.T])
    elif len(dims) != 1:
        raise ValueError(f"DAWA supports 1-D and 2-D domains, got {len(dims)} dimensions")
    measured = dawa_measurement(vector, workload, epsilon_of(budget), selection_share)
    if len(dims) == 1:
        return solved([measured], vector.size, answered, chosen="the partition")
    return post_processed([measured], vector.size, answered, np.trunc, chosen="the partition",
                          note="truncated toward zero, as DPBench's 2-D DAWA stores its estimate in an int32 array: "
                               "not least squares, so no error bars")


def dawa_striped(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
                 attribute: int = 0, selection_share: float | Fraction | str = 0.25) -> VectorEstimate:
    """DAWA on every 1-D stripe along ``attribute`` with the whole budget (parallel composition: the
    stripes are disjoint parts), each with GreedyH fit to the workload's columns on that stripe; one
    least squares over all of them."""
    vector, dims = measure.data_vector(source, shape)
    stripes = stripe(dims, attribute)
    epsilon = epsilon_of(budget)
    parts = vector.split_by_partition(stripes.labels)
    measurements = [
        dawa_measurement(part, columns, epsilon, selection_share)
        for part, columns in zip(parts, _stripe_workloads(workload, stripes))
    ]
    return solved(measurements, vector.size, workload, chosen="each stripe's partition")


def _stripe_workloads(workload: Matrix, stripes: Partition) -> Iterator[Matrix]:
    """W S_g^T for every stripe g: the workload's columns on the stripe's cells. When W is cheaply
    explicit these are column slices of one sparse copy (each stripe then costs its own columns, not
    a pass over all of W); else implicit products."""
    explicit = explicit_sparse(workload, EXPLICIT_NONZEROS)
    if explicit is None:
        yield from (Product([workload, stripes.selection(g).T]) for g in range(stripes.groups))
        return
    columns = sp.csc_array(explicit)
    cells = np.argsort(stripes.labels, kind="stable")
    for part in np.split(cells, np.cumsum(stripes.sizes)[:-1]):
        yield Sparse(columns[:, part])
