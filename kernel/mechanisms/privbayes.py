"""PrivBayes's network step (``privbayes_select``): one (child, parents) candidate by the exponential mechanism on
how far the child's counts are from independence of its parents.

Card
- Neighbours: one record of the table added or removed (the source is the table or a 1-stable where/project).
- Sensitivity: T = sum |c(x, p) - c(x) c(p) / n| moves by less than 4, plus twice its rounding, 2^-50 N
  (``sensitivity``).
- Cost: a histogram per candidate (its columns read over the rows, bounded by the scans limit) and 64 steps a cell
  (``cost``); the histograms' cells count as held memory.
- Reads data: the histograms and scores, once the charge is planned.
- May fail before the charge: unknown names, too many candidates (4,096), cells, passes, work or memory over the
  limits, an unsamplable rate. Nothing after; an empty table is scored by the same work.
- Proof: docs/privacy/privbayes.md#mechanism-and-guarantee
"""

from __future__ import annotations

import math

import numpy as np

from ..limits import OBJECT_STEPS, Cost


def cost(cells: list[int]) -> Cost:
    """Scoring the candidates' histograms of ``cells`` cells each: about 70 ns a cell measured, and each
    candidate's Python work."""
    return Cost(64 * sum(cells) + OBJECT_STEPS * len(cells), 8 * 4 * max(cells))


def score(counts: np.ndarray, child: int) -> float:
    """sum |c(x, pi) - c(x) c(pi) / n| of a child (axis) given its parents: float64 (counts and their sums exact)
    summed by fsum, the same work for any n, off by < 2^-50 n (docs/privacy/privbayes.md#arithmetic)."""
    c = np.moveaxis(counts, child, 0).reshape(counts.shape[child], -1).astype(np.float64)
    n = max(c.sum(), 1.0)  # an empty table: all zeros, scored 0 by the same work (its skip took 1/20 the time)
    return math.fsum(np.abs(c - np.outer(c.sum(1), c.sum(0)) / n).ravel())


def sensitivity(size: float) -> float:
    """4, plus twice the rounding of a score of at most size records."""
    return 4 + 2.0**-49 * size
