"""PHP (Acs, Castelluccia and Chen 2012, P-HPartition; a DPBench algorithm): private recursive bisection
into nearly uniform intervals, a private choice among the partitions it went through, one noisy count per
interval, uniform expansion.

``php`` is DPBench's engine (``Clustering(eps / 2, eps / 2, 1, int(log2 n), 2000)``), step for step:

- Bisection. Clusters are taken level by level, left to right (DPBench's queue), the whole vector being level 1.
  Each is split at one point, or kept whole, by the exponential mechanism on -(dev(left) + dev(right) + b)
  against -dev(C) (dev the L1 deviation from the mean, b = 1 / eps_count), with eps_cluster / (2 max_depth);
  clusters of level max_depth = int(log2 n) and single cells are never split. The clusters of a level are
  disjoint, so one kernel request (``split_points`` with ``split_penalty`` b) decides a whole level for one charge.
  Splitting stops once there are more than 2,000 clusters or n of them: the decisions are replayed in DPBench's
  order and those past that point are dropped.
- Final choice. Every decision gives the next partition of a chain (a split, its refinement; a kept cluster, the
  same partition again, unless no cluster is left to decide), which starts with the whole vector. One partition is
  chosen by the kernel's ``choose_partition`` on -(sum of dev(C) + b |P|) with eps_cluster / 2.
- Counts. Each interval of the chosen partition gets one Laplace count with eps_count, spread evenly, its mean
  clipped at 0 (DPBench's max(0, mean + noise)).

DPBench leaves one level's share unspent (its clusters of the last level are never split); here that share, and
the shares of levels the process never reaches, go to the counts so that the plan spends exactly eps (at
n = 256 to 4,096, 4-6% less noise on the counts). DPBench's queue can go on splitting below max_depth once every cluster
is decided (it then splits the last cluster it holds again, spending past its budget); that is not reproduced.

``php_plus`` (catalog "PHP+", ours) bisects every interval of ceil(log2 n / 2) rounds with the whole selection
budget, takes the last partition and measures it (no final choice, no clipping): fewer, wider intervals and more
budget per round, better at small scales and worse at large ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..operators.matrix import Identity, Matrix
from ..operators import measure
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.budget import Budget, epsilon_of
from .common import post_processed, solved, split_budget


#: DPBench's PHP stops splitting once it holds more than max_cl_num = 2,000 intervals.
MAX_INTERVALS = 2001

#: Most rounds of PHP+: a round then starts with at most 2^10 <= 2,000 intervals and can split at least one.
MAX_ROUNDS = 11


def dpbench_chain(vector: Handle, epsilon: Fraction, rounds: int, penalty: float) -> tuple[list[int | None], int]:
    """DPBench's bisection (module docstring): up to ``rounds`` levels decided with ``epsilon`` each, a split
    costing ``penalty``. Returns the chain of its decisions (a cut, or None for the partition again) and the number
    of levels it paid for."""
    level, clusters, chain = [(0, vector.size)], 1, []
    for round_ in range(rounds):
        if not level:
            return chain, round_
        decisions = vector.split_points(level, epsilon, split_penalty=penalty)
        children: list[tuple[int, int]] = []
        for done, ((start, stop), cut) in enumerate(zip(level, decisions), start=1):
            if clusters >= min(vector.size, MAX_INTERVALS):
                return chain, round_ + 1
            if cut is None:
                if len(level) - done + len(children):  # some cluster is left to decide
                    chain.append(None)
                continue
            chain.append(cut)
            clusters += 1
            if round_ < rounds - 1:
                children += [part for part in ((start, cut), (cut, stop)) if part[1] - part[0] >= 2]
        level = children
    return chain, rounds


def php(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
        selection_share: float | Fraction | str = 0.5, depth: int | None = None) -> VectorEstimate:
    """PHP in 1-D as DPBench runs it (module docstring): ``depth`` levels of bisection (default int(log2 n) - 1)
    and a final choice with selection_share * eps, the intervals measured with the rest."""
    vector = _vector(source, shape)
    rounds = max(1, int(math.log2(vector.size)) - 1) if depth is None else int(depth)
    if not 1 <= rounds <= math.ceil(math.log2(vector.size)):
        raise ValueError(f"depth must be between 1 and ceil(log2 n) = {math.ceil(math.log2(vector.size))} "
                         f"for n = {vector.size}; got {rounds}")
    epsilon = epsilon_of(budget)
    cluster_epsilon, count_epsilon = split_budget(epsilon, selection_share, "selection_share")
    penalty = float(1 / count_epsilon)  # DPBench's b = sensitivity / eps_count, a public cost per interval
    per_level = cluster_epsilon / (2 * (rounds + 1))
    chain, levels = dpbench_chain(vector, per_level, rounds, penalty)
    chosen = vector.choose_partition(chain, penalty, cluster_epsilon / 2) if chain else 0
    spent = levels * per_level + (cluster_epsilon / 2 if chain else 0)
    cuts = sorted({0, vector.size} | {cut for cut in chain[:chosen] if cut is not None})
    groups = vector.reduce_by_partition(np.repeat(np.arange(len(cuts) - 1), np.diff(cuts)))
    measured = measure.laplace(groups, Identity(groups.size), epsilon - spent)  # eps_count and what DPBench leaves
    return post_processed([measured], vector.size, workload, lambda means: np.maximum(means, 0.0),
                          chosen="the intervals", note="each interval's noisy mean clipped at 0, as DPBench's PHP: "
                          "not least squares, so no error bars (PHP+ keeps them)")


def php_plus(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
             selection_share: float | Fraction | str = 0.5) -> VectorEstimate:
    """PHP+ (ours): every interval bisected for ceil(log2 n / 2) rounds with selection_share * eps, at most about
    sqrt(n) intervals, measured with the rest. On DPBench's 1-D files at eps = 0.1 its error relative to Identity
    was 2-5x lower than that of PHP with ceil(log2 n) rounds at 1e3 records and 2-10x higher at 1e7
    (benchmarks/bench_dpbench.py fidelity)."""
    vector = _vector(source, shape)
    depth = math.ceil(math.log2(vector.size) / 2)
    partition_epsilon, measure_epsilon = split_budget(epsilon_of(budget), selection_share, "selection_share")
    cuts = [0, vector.size]
    for _ in range(depth):
        room = MAX_INTERVALS - (len(cuts) - 1)
        intervals = [(a, b) for a, b in zip(cuts, cuts[1:]) if b - a >= 2][:room]
        cuts = sorted(cuts + vector.split_points(intervals, partition_epsilon / depth))
    groups = vector.reduce_by_partition(np.repeat(np.arange(len(cuts) - 1), np.diff(cuts)))
    measured = measure.laplace(groups, Identity(groups.size), measure_epsilon)
    return solved([measured], vector.size, workload, chosen="the intervals")


def _vector(source: Handle, shape: Sequence[int] | None) -> Handle:
    """The 1-D data vector PHP partitions."""
    vector, dims = measure.data_vector(source, shape)
    if len(dims) != 1:
        raise ValueError(f"PHP partitions a 1-D histogram; got {len(dims)} dimensions")
    if vector.size < 2:
        raise ValueError("PHP needs at least 2 cells to split")
    return vector
