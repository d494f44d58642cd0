"""StructureFirst's bucket boundaries: ``buckets - 1`` exponential-mechanism draws on the SSEs of clipped counts.

Card
- Neighbours: one record added or removed; the vector moves by 1 in one cell, the counts clipped to [0, F] by at
  most 1.
- Sensitivity: 2 F + 1 for every score, plus twice its rounding, 10 gamma_{n+b+4} (b + 1) F min(N, n F)
  (``sensitivity``); each draw at eps / (buckets - 1).
- Cost: (n + 1)^2 for the SSE table and (n + 1)(n + 257) / 2 per bucket for the dynamic program (``check``).
- Reads data: the SSE table and the program, once the charge is planned.
- May fail before the charge: more buckets than cells, more than QUADRATIC_LIMIT cells, the work limit, scores
  that could pass 2^500, an unsamplable rate. Nothing after.
- Proof: docs/privacy/structure-first.md#mechanism-and-guarantee
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import exponential
from .php import QUADRATIC_LIMIT
from ..limits import Cost, Work
from ..matrix.rounding import LIMIT, gamma
from ..noise import NoiseSource


def check(n: int, buckets: int) -> Cost:
    """Refuse a request the dynamic program cannot serve; its cost."""
    if not buckets <= n <= QUADRATIC_LIMIT:
        raise ValueError(
            f"{buckets} buckets need at least as many cells, and the quadratic-time dynamic program at "
            f"most {QUADRATIC_LIMIT}; the vector has {n} (reduce or split it first)"
        )
    return Cost(4 * (n + 1) ** 2 + (n + 1) * (n + 257) * buckets // 2, 8 * (n + 1) * (n + 1 + 2 * buckets + 16))


def interval_sse(x: np.ndarray, work: Work) -> np.ndarray:
    """sse[a, b] = sum_{a <= i < b} (x_i - mean)^2, 0 <= a < b <= n (inf elsewhere): prefix sums, stored by b."""
    s1, s2 = np.append(0.0, np.cumsum(x)), np.append(0.0, np.cumsum(x * x))
    positions = np.arange(x.size + 1, dtype=np.float64)
    by_end = np.empty((x.size + 1, x.size + 1))
    for start in range(0, x.size + 1, 256):
        stop = min(x.size + 1, start + 256)
        work.step(4 * (stop - start) * (x.size + 1))
        length = positions[start:stop, None] - positions[None, :]  # b - a
        sums = s1[start:stop, None] - s1[None, :]
        block = np.subtract(s2[start:stop, None], s2[None, :], out=by_end[start:stop])
        with np.errstate(divide="ignore", invalid="ignore"):
            block -= sums * sums / length
        block[length <= 0] = np.inf
        np.maximum(block, 0.0, out=block)
    return by_end.T


def bucket_costs(x: np.ndarray, most: int, work: Work) -> tuple[np.ndarray, list[np.ndarray]]:
    """``interval_sse(x)`` and best[j - 1][q], the least SSE of the first q cells in j = 1..most non-empty buckets."""
    sse = interval_sse(x, work)
    by_end, best = sse.T, [sse[0].copy()]
    width = 8  # rows of q per block: a block and its sums stay in cache; a >= q has sse[a, q] = inf
    scratch = np.empty((width, sse.shape[0]))
    for _ in range(1, most):
        previous, current = best[-1], np.empty(sse.shape[0])
        for start in range(0, sse.shape[0], width):
            stop = min(sse.shape[0], start + width)
            work.step((stop - start) * stop)
            block = np.add(by_end[start:stop, :stop], previous[None, :stop], out=scratch[: stop - start, :stop])
            current[start:stop] = block.min(axis=1)
        best.append(current)
    return sse, best


def sensitivity(n: int, bound: float, buckets: int, size: float) -> float:
    """2 F + 1 for counts clipped to F (docs/privacy/structure-first.md), plus twice the float error of a
    score: prefix sums of x and x^2 (<= F S, S = min(size, n F)) make each SSE off by 8 gamma_{n+4} F S,
    and a score adds up to ``buckets`` of them. Refuses (before any charge) scores that could overflow."""
    reach = min(size, n * bound) * bound * (buckets + 1)
    if not reach < LIMIT:
        raise ValueError(f"the bound {bound} makes StructureFirst's scores too large to compute safely")
    return 2 * bound + 1 + 2 * 10 * gamma(n + buckets + 4) * reach


def boundaries(
    source: NoiseSource, costs: tuple[np.ndarray, list[np.ndarray]], buckets: int, epsilon: Fraction, sensitivity: float
) -> list[int]:
    """The buckets - 1 inner boundaries, right to left, each by the exponential mechanism at eps / (buckets - 1)
    on -(least SSE left of it in j buckets + SSE of the bucket it closes)."""
    sse, best = costs
    found, right = [], sse.shape[0] - 1
    for j in range(buckets - 1, 0, -1):
        candidates = np.arange(j, right)  # j buckets left of the boundary, a non-empty one right of it
        scores = -(best[j - 1][candidates] + sse[candidates, right])
        right = int(candidates[exponential.select(source, scores, epsilon / (buckets - 1), sensitivity)])
        found.append(right)
    return found[::-1]
