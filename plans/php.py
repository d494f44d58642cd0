"""PHP (Acs, Castelluccia and Chen 2012, P-HPartition; a DPBench algorithm): private recursive bisection
into nearly uniform intervals, one noisy count per interval, uniform expansion.

Each round asks the kernel's vetted ``split_points`` (docs/privacy/php.md) for one split in every current
interval of length >= 2; the intervals of a round are disjoint, so a round costs its epsilon once
(parallel composition), and ``depth`` rounds share selection_share * eps. The leaves are measured with the rest, and
least squares through the reduction spreads each leaf's count evenly (PHP's uniform expansion).

``depth``: DPBench runs PHP with ceil(log2 n) rounds (the default), so that intervals can go down to
single cells. ``php_plus`` (catalog "PHP+", ours) uses half as many rounds: fewer, wider intervals and
twice the budget per round, better at small scales and worse at large ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from kernel.matrix import Identity, Matrix
from operators import measure
from operators.client import Handle
from operators.estimate import VectorEstimate
from plans.common import CONDITIONAL, BudgetLike, epsilon_of, solved, split_budget


def php_partition(vector: Handle, epsilon: Fraction, depth: int) -> np.ndarray:
    """Group labels of the intervals after ``depth`` rounds of private bisection, epsilon / depth each.

    With depth <= ceil(log2 n), a round starts with at most 2^(depth-1) < n intervals, so some interval
    can still be split and every round spends its share."""
    cuts = [0, vector.size]
    for _ in range(depth):
        intervals = [(a, b) for a, b in zip(cuts, cuts[1:]) if b - a >= 2]
        cuts = sorted(cuts + vector.split_points(intervals, epsilon / depth))
    return np.repeat(np.arange(len(cuts) - 1), np.diff(cuts))


def php(source: Handle, workload: Matrix, budget: BudgetLike, *, shape: Sequence[int] | None = None,
        selection_share: float | Fraction | str = 0.5, depth: int | None = None) -> VectorEstimate:
    """PHP in 1-D as DPBench runs it: bisect with selection_share * eps over ``depth`` rounds (default
    ceil(log2 n)), measure the intervals with the rest."""
    return _php(source, workload, budget, shape, selection_share, lambda most: most if depth is None else int(depth))


def php_plus(source: Handle, workload: Matrix, budget: BudgetLike, *, shape: Sequence[int] | None = None,
             selection_share: float | Fraction | str = 0.5) -> VectorEstimate:
    """PHP+ (ours): PHP with ceil(log2 n / 2) rounds, at most about sqrt(n) intervals and twice the budget per
    round. On DPBench's 1-D files at eps = 0.1 its error relative to Identity is 2-5x lower than PHP's at
    1e3 records and 2-10x higher at 1e7 (benchmarks/bench_dpbench.py fidelity)."""
    return _php(source, workload, budget, shape, selection_share, lambda most: math.ceil(most / 2))


def _php(source: Handle, workload: Matrix, budget: BudgetLike, shape: Sequence[int] | None,
         selection_share: float | Fraction | str, rounds: Callable[[int], int]) -> VectorEstimate:
    """PHP with ``rounds(ceil(log2 n))`` rounds of bisection."""
    vector, dims = measure.data_vector(source, shape)
    if len(dims) != 1:
        raise ValueError(f"PHP partitions a 1-D histogram; got {len(dims)} dimensions")
    if vector.size < 2:
        raise ValueError("PHP needs at least 2 cells to split")
    most = math.ceil(math.log2(vector.size))
    depth = rounds(most)
    if not 1 <= depth <= most:
        raise ValueError(f"depth must be between 1 and ceil(log2 n) = {most} for n = {vector.size}; got {depth}")
    partition_epsilon, measure_epsilon = split_budget(epsilon_of(budget), selection_share, "selection_share")
    labels = php_partition(vector, partition_epsilon, depth)
    groups = vector.reduce_by_partition(labels)
    measured = measure.laplace(groups, Identity(groups.size), measure_epsilon)
    return solved([measured], vector.size, workload, CONDITIONAL.format("the intervals"))
