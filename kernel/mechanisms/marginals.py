"""Marginal selection (``marginal_select``): one attribute set by the exponential mechanism on how badly a public
estimate fits the table's marginal on it, ``w_r ||M_r(x) - e_r||_1 - o_r`` (MST's and AIM's selection step).

Card
- Neighbours: one record of the table added or removed (the source is the table or a 1-stable where/project); a
  public recoding of values maps that record to one record, so each marginal moves by 1 in one cell.
- Sensitivity: a score moves by at most its weight, plus twice its rounding: 4.01 u w (B + E) + u |o| for B the
  public bound on the records and E the estimate's L1 norm (``sensitivity``).
- Cost: a histogram per candidate (its columns read over the rows, bounded by the scans limit), 64 steps a cell to
  score it and 16 more a cell for each recoded axis, each a pass over its cells (``cost``, ``steps``); the
  histograms' cells count as held memory.
- Reads data: the histograms and scores, once the charge is planned.
- May fail before the charge: unknown names, too many candidates (4,096), recodings or estimates of the wrong shape,
  estimates not float64, not finite or past 2^400 (weights 2^-400 to 2^400), cells, passes, work or memory over the
  limits, an unsamplable rate. Nothing after; an empty table is scored by the same work.
- Proof: docs/privacy/marginal-selection.md#mechanism-and-guarantee
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..limits import OBJECT_STEPS, Cost
from ..matrix.rounding import UNIT, above

#: The largest weight, offset and estimate L1 norm, and the smallest weight, a request may send.
LARGEST = 2.0**400


def steps(cells: int, recoded_axes: int) -> int:
    """Scoring a histogram of ``cells`` cells (64 steps a cell, as ``privbayes.cost``) after recoding
    ``recoded_axes`` of its axes (a pass over the cells each: about 9 ns a cell measured, 16 steps)."""
    return (64 + 16 * recoded_axes) * cells + OBJECT_STEPS


def cost(cells: list[int], recoded_axes: list[int]) -> Cost:
    """Recoding and scoring the candidates' histograms, of ``cells`` cells and ``recoded_axes`` recoded axes each."""
    return Cost(sum(steps(c, r) for c, r in zip(cells, recoded_axes)), 8 * 4 * max(cells))


def recoded(counts: np.ndarray, maps: list[np.ndarray | None]) -> np.ndarray:
    """The counts with each axis's values merged by its public map (value -> new value), or kept (None)."""
    for axis, values in enumerate(maps):
        if values is not None:
            moved = np.moveaxis(counts, axis, 0)
            merged = np.zeros((int(values.max()) + 1, *moved.shape[1:]), dtype=np.int64)
            np.add.at(merged, values, moved)
            counts = np.moveaxis(merged, 0, axis)
    return counts


def checked(weight: float, offset: float, estimate: np.ndarray) -> Fraction:
    """The estimate's L1 norm, rounded up, after refusing what the bounds below do not cover."""
    if not (1 / LARGEST <= weight <= LARGEST and abs(offset) <= LARGEST and np.all(np.isfinite(estimate))):
        raise ValueError("weights must lie in [2^-400, 2^400], offsets and estimates be finite below 2^400")
    norm = Fraction(math.fsum(np.abs(estimate).ravel())) * (1 + 2 * Fraction(UNIT))
    if norm > LARGEST:
        raise ValueError("an estimate's L1 norm passes 2^400: rescale the estimates")
    return norm


def score(counts: np.ndarray, estimate: np.ndarray, weight: float, offset: float) -> float:
    """w ||c - e||_1 - o in float64: the same operations for every table (docs/privacy/marginal-selection.md)."""
    distance = math.fsum(np.abs(counts.astype(np.float64).ravel() - estimate.ravel()))
    return weight * distance - offset


def sensitivity(weights: list[float], offsets: list[float], norms: list[Fraction], size: float) -> float:
    """The largest weight plus twice the largest rounding of a score on at most ``size`` records."""
    return above(
        max(
            Fraction(w)
            + 2
            * (
                Fraction(401, 100) * Fraction(UNIT) * Fraction(w) * (Fraction(size) + e)
                + Fraction(UNIT) * abs(Fraction(o))
            )
            for w, o, e in zip(weights, offsets, norms)
        )
    )
