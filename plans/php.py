"""PHP (Acs, Castelluccia and Chen 2012, P-HPartition; a DPBench algorithm): private recursive bisection
into nearly uniform intervals, one noisy count per interval, uniform expansion.

Each round asks the kernel's vetted ``split_points`` (docs/privacy/php.md) for one split in every current
interval of length >= 2; the intervals of a round are disjoint, so a round costs its epsilon once
(parallel composition), and ``depth`` rounds share selection_share * eps. The leaves are measured with the rest, and
least squares through the reduction spreads each leaf's count evenly (PHP's uniform expansion).

``depth``: DPBench runs PHP with int(log2 n) levels counting the whole domain as level 1, and never splits a
cluster of the last level: int(log2 n) - 1 rounds of bisection (the default). Like DPBench it stops splitting
once there are more than 2,000 intervals (its max_cl_num), splitting the intervals of the last round left to
right, as its breadth-first queue does. ``php_plus`` (catalog "PHP+", ours) uses ceil(log2 n / 2) rounds: fewer,
wider intervals and more budget per round, better at small scales and worse at large ones.

Not reproduced (the kernel's ``split_points`` offers neither): DPBench's PHP may also decline to split an
interval (score -dev(C) against -(dev(L) + dev(R)) - 1/eps_count for a split), and it spends half of its
selection budget on a final exponential mechanism that picks one of the intermediate partitions by
-(total deviation + 1/eps_count per interval); then it clips each interval's noisy mean at 0. Here every
round's intervals are split, the whole selection budget goes to the rounds, and nothing is clipped (clipping
without the final choice of few intervals adds a positive bias per interval that accumulates in prefix sums).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from ..operators.matrix import Identity, Matrix
from ..operators import measure
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.budget import Budget, epsilon_of
from .common import solved, split_budget


#: DPBench's PHP stops splitting once it holds more than max_cl_num = 2,000 intervals.
MAX_INTERVALS = 2001

#: Most rounds: a round then starts with at most 2^10 <= 2,000 intervals and can split at least one.
MAX_ROUNDS = 11


def php_partition(vector: Handle, epsilon: Fraction, depth: int) -> np.ndarray:
    """Group labels of the intervals after ``depth`` rounds of private bisection, epsilon / depth each,
    splitting left to right and never beyond ``MAX_INTERVALS`` intervals.

    With depth <= min(ceil(log2 n), MAX_ROUNDS), a round starts with at most 2^(depth-1) < n and <= 2,000
    intervals, so some interval can still be split and every round spends its share."""
    cuts = [0, vector.size]
    for _ in range(depth):
        room = MAX_INTERVALS - (len(cuts) - 1)
        intervals = [(a, b) for a, b in zip(cuts, cuts[1:]) if b - a >= 2][:room]
        cuts = sorted(cuts + vector.split_points(intervals, epsilon / depth))
    return np.repeat(np.arange(len(cuts) - 1), np.diff(cuts))


def php(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
        selection_share: float | Fraction | str = 0.5, depth: int | None = None) -> VectorEstimate:
    """PHP in 1-D as DPBench runs it, as far as the kernel allows (module docstring): bisect with
    selection_share * eps over ``depth`` rounds (default int(log2 n) - 1), measure the intervals with the rest."""
    return _php(source, workload, budget, shape, selection_share,
                lambda n: max(1, int(math.log2(n)) - 1) if depth is None else int(depth))


def php_plus(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
             selection_share: float | Fraction | str = 0.5) -> VectorEstimate:
    """PHP+ (ours): PHP with ceil(log2 n / 2) rounds, at most about sqrt(n) intervals and more budget per round.
    On DPBench's 1-D files at eps = 0.1 its error relative to Identity was 2-5x lower than that of PHP with
    ceil(log2 n) rounds at 1e3 records and 2-10x higher at 1e7 (benchmarks/bench_dpbench.py fidelity)."""
    return _php(source, workload, budget, shape, selection_share, lambda n: math.ceil(math.log2(n) / 2))


def _php(source: Handle, workload: Matrix, budget: Budget, shape: Sequence[int] | None,
         selection_share: float | Fraction | str, rounds: Callable[[int], int]) -> VectorEstimate:
    """PHP with ``rounds(n)`` rounds of bisection."""
    vector, dims = measure.data_vector(source, shape)
    if len(dims) != 1:
        raise ValueError(f"PHP partitions a 1-D histogram; got {len(dims)} dimensions")
    if vector.size < 2:
        raise ValueError("PHP needs at least 2 cells to split")
    most = min(math.ceil(math.log2(vector.size)), MAX_ROUNDS)
    depth = rounds(vector.size)
    if not 1 <= depth <= most:
        raise ValueError(f"depth must be between 1 and min(ceil(log2 n), {MAX_ROUNDS}) = {most} for n = {vector.size}; "
                         f"got {depth}")
    partition_epsilon, measure_epsilon = split_budget(epsilon_of(budget), selection_share, "selection_share")
    labels = php_partition(vector, partition_epsilon, depth)
    groups = vector.reduce_by_partition(labels)
    measured = measure.laplace(groups, Identity(groups.size), measure_epsilon)
    return solved([measured], vector.size, workload, chosen="the intervals")
