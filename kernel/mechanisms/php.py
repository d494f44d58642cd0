"""PHP's private bisection: one split point in each of several disjoint intervals, or none (``split_points``);
and its final choice of one partition from a public chain of refinements (``choose_partition``).

Card
- Neighbours: one record added or removed; the vector moves by 1 in one cell, which lies in one interval at most
  (parallel composition: one charge of eps).
- Sensitivity: a split score -(dev(left) + dev(right)), a whole interval's b - dev(C) and a partition's
  -(sum of dev(C) + b |P|) each move by at most 2 (b public), plus twice their rounding: 12 gamma_{2L+5} N for an
  interval of L cells, 2 u (3 N + b) more with a split penalty b (``sensitivity``); 4 gamma_{n+1} N +
  u (3 N + b n) for a partition of n cells (``chain_sensitivity``).
- Cost: 4 L^2 steps per interval of L cells, and ``OBJECT_STEPS`` for its Python work (about 77 us measured:
  its scores, sensitivity and draw) (``check``); a chain, 4 steps a cell of the vector and of each interval a
  step cuts, and ``OBJECT_STEPS`` a step (``chain_check``).
- Reads data: the scores, once the charge is planned.
- May fail before the charge: intervals that are not sorted, disjoint, inside the vector and of 2..QUADRATIC_LIMIT
  cells; cuts outside the vector or already made; the work limit; an unsamplable rate. Nothing after.
- Proof: docs/privacy/php.md#mechanism-and-guarantee
"""

from __future__ import annotations

import bisect
from fractions import Fraction

import numpy as np

from ..limits import OBJECT_STEPS, Cost, Work
from ..matrix.rounding import UNIT, gamma

QUADRATIC_LIMIT = 8192
"""Longest interval the quadratic-cost selections (PHP, StructureFirst) accept."""
SENSITIVITY = 2.0
"""A unit change lies on one side of a split, and moves its deviation by at most 2 (docs/privacy/php.md)."""


def check(intervals: list[tuple[int, int]], n: int) -> Cost:
    """Refuse intervals that are not sorted, disjoint, inside the n cells and of 2..QUADRATIC_LIMIT cells; their
    cost."""
    previous_stop = 0
    for start, stop in intervals:
        if not (previous_stop <= start and start + 2 <= stop <= min(n, start + QUADRATIC_LIMIT)):
            raise ValueError(
                f"interval [{start}, {stop}) is not of length 2..{QUADRATIC_LIMIT} inside the {n} cells, "
                "after and disjoint from the ones before it: give sorted, disjoint intervals"
            )
        previous_stop = stop
    steps = sum(4 * (stop - start) ** 2 for start, stop in intervals) + OBJECT_STEPS * len(intervals)
    return Cost(steps, 8 * 2 * 256 * QUADRATIC_LIMIT)


def sensitivity(length: int, size: float, penalty: float | None = None) -> float:
    """2 (a unit change lies on one side; docs/privacy/php.md), plus twice the float error of a score on ``length``
    cells of at most ``size`` records: 12 gamma_{2 length + 5} size (two sums of |x_i - mean|, means from a cumsum
    and a division); with a split ``penalty`` b, twice u (3 size + b) more (the whole interval's b - dev(C) rounded
    once)."""
    extra = 0.0 if penalty is None else 2 * UNIT * (3 * size + penalty) * (1 + 4 * UNIT)
    return SENSITIVITY + 2 * 12 * gamma(2 * length + 5) * size + extra


def scores(x: np.ndarray, work: Work, penalty: float | None = None, chunk: int = 256) -> np.ndarray:
    """PHP's split quality -(dev(x[:k]) + dev(x[k:])) for k = 1 .. len - 1, dev(B) = sum_i |x_i - mean_B|; with a
    split ``penalty`` b, first the score b - dev(x) of keeping the interval whole (the same law as DPBench's
    -dev(x) against -(dev(x[:k]) + dev(x[k:]) + b))."""

    def prefix_deviations(v: np.ndarray) -> np.ndarray:  # dev(v[:m]) for m = 1 .. len
        means = np.cumsum(v) / np.arange(1, v.size + 1)
        out = np.empty(v.size)
        for lo in range(0, v.size, chunk):  # O(len^2) in cache-sized row blocks, one block held at a time
            m = np.arange(lo, min(lo + chunk, v.size))
            work.step(2 * m.size * v.size)
            spread = np.subtract(v[None, :], means[m, None])
            np.abs(spread, out=spread)
            spread[np.arange(v.size)[None, :] > m[:, None]] = 0.0
            out[m] = spread.sum(axis=1)
            del spread
        return out

    forward, backward = prefix_deviations(x), prefix_deviations(x[::-1])[::-1]
    split = -(forward[:-1] + backward[1:])
    return split if penalty is None else np.r_[penalty - forward[-1], split]


def chain_check(cuts: list[int | None], n: int) -> tuple[list[tuple[int, int, int] | None], Cost]:
    """Refuse cuts outside 1..n-1 or already made; each step's (start, cut, stop), None for a step that keeps the
    partition; the cost."""
    made, steps = [0, n], []
    for cut in cuts:
        if cut is None:
            steps.append(None)
            continue
        place = bisect.bisect_left(made, cut)
        if not 0 < cut < n or made[place] == cut:  # out of range first: a cut past n has no place in made
            raise ValueError(
                f"cut {cut} is not a new cut inside the {n} cells: give each cut once, between 1 and {n - 1}"
            )
        steps.append((made[place - 1], cut, made[place]))
        made.insert(place, cut)
    cells = n + sum(stop - start for start, _, stop in filter(None, steps))
    return steps, Cost(4 * cells + OBJECT_STEPS * (len(cuts) + 1), 8 * 2 * n)


def chain_sensitivity(n: int, size: float, penalty: float) -> float:
    """2 (a unit change lies in one interval of each partition), plus twice a score's rounding on counts of L1 norm
    at most ``size``: each interval's deviation within 4 gamma_{L+1} of its records, summed exactly, and the
    score -(sum + b |P|) rounded once, u (3 size + b n) (docs/privacy/php.md#floats)."""
    rounding = 4 * gamma(n + 1) * size + UNIT * (3 * size + penalty * n)
    return SENSITIVITY + 2 * rounding * (1 + 4 * UNIT)


def chain_scores(x: np.ndarray, steps: list[tuple[int, int, int] | None], penalty: float, work: Work) -> np.ndarray:
    """-(sum_{C in P_i} dev(C) + b |P_i|) for the whole vector P_0 and the partition after each step, the sums kept
    exact (as rationals) and each score rounded once."""
    spread = np.empty(x.size)  # the one working array: with x, the 16 n bytes chain_check declares

    def deviation(start: int, stop: int) -> Fraction:
        work.step(4 * (stop - start))
        part, buffer = x[start:stop], spread[: stop - start]
        np.subtract(part, part.sum() / part.size, out=buffer)
        return Fraction(float(np.abs(buffer, out=buffer).sum()))

    whole = {(0, x.size): deviation(0, x.size)}  # each interval's deviation, computed once
    total = whole[0, x.size]
    out = [-float(total + Fraction(penalty))]
    for step in steps:
        work.step(OBJECT_STEPS)
        if step is not None:
            start, cut, stop = step
            whole[start, cut], whole[cut, stop] = deviation(start, cut), deviation(cut, stop)
            total += whole[start, cut] + whole[cut, stop] - whole.pop((start, stop))
        out.append(-float(total + Fraction(penalty) * len(whole)))
    return np.array(out)
