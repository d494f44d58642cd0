"""PHP's private bisection: one split point in each of several disjoint intervals (``split_points``).

Card
- Neighbours: one record added or removed; the vector moves by 1 in one cell, which lies in one interval at most
  (parallel composition: one charge of eps).
- Sensitivity: a score -(dev(left) + dev(right)) moves by at most 2, plus twice its rounding, 12 gamma_{2L+5} N
  for an interval of L cells (``sensitivity``).
- Cost: 4 L^2 steps per interval of L cells, and ``OBJECT_STEPS`` for its Python work (about 77 us measured:
  its scores, sensitivity and draw) (``check``).
- Reads data: the scores, once the charge is planned.
- May fail before the charge: intervals that are not sorted, disjoint, inside the vector and of 2..QUADRATIC_LIMIT
  cells; the work limit; an unsamplable rate. Nothing after.
- Proof: docs/privacy/php.md#mechanism-and-guarantee
"""

from __future__ import annotations

import numpy as np

from ..limits import OBJECT_STEPS, Cost, Work
from ..matrix.rounding import gamma

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


def sensitivity(length: int, size: float) -> float:
    """2 (a unit change lies on one side; docs/privacy/php.md), plus twice the float error of a score on ``length``
    cells of at most ``size`` records: 12 gamma_{2 length + 5} size (two sums of |x_i - mean|, means from a cumsum
    and a division)."""
    return SENSITIVITY + 2 * 12 * gamma(2 * length + 5) * size


def scores(x: np.ndarray, work: Work, chunk: int = 256) -> np.ndarray:
    """PHP's split quality -(dev(x[:k]) + dev(x[k:])) for k = 1 .. len - 1, dev(B) = sum_i |x_i - mean_B|."""

    def prefix_deviations(v: np.ndarray) -> np.ndarray:  # dev(v[:m]) for m = 1 .. len
        means = np.cumsum(v) / np.arange(1, v.size + 1)
        out = np.empty(v.size)
        for lo in range(0, v.size, chunk):  # O(len^2) in cache-sized row blocks
            m = np.arange(lo, min(lo + chunk, v.size))
            work.step(2 * m.size * v.size)
            spread = np.abs(v[None, :] - means[m, None])
            spread[np.arange(v.size)[None, :] > m[:, None]] = 0.0
            out[m] = spread.sum(axis=1)
        return out

    return -(prefix_deviations(x)[:-1] + prefix_deviations(x[::-1])[::-1][1:])
