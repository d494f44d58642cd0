"""EFPA's number of Fourier coefficients (``fourier_select``): the exponential mechanism on how much of the vector
the k lowest real Fourier frequencies leave out.

Card
- Neighbours: one record added or removed; the vector moves by 1 in one cell (L1 distance 1).
- Sensitivity: a score -(||(F x)_{>=k}||_2 + o_k) moves by at most the largest column L2 norm of F, the basis as
  the kernel computes it (about 1), plus twice the score's rounding (``sensitivity``); o_k are public offsets.
- Cost: 10 n^2 steps (the basis built, its columns summed, built again and applied, 256 rows at a time), 2^24
  bytes or so.
- Reads data: the coefficients F x, once the charge is planned.
- May fail before the charge: offsets that are not n finite numbers below 2^500, the work limit, an unsamplable
  rate. Nothing after.
- Proof: docs/privacy/efpa.md#mechanism-and-guarantee
"""

from __future__ import annotations

import math

import numpy as np

from ..limits import Cost, Work
from ..matrix.leaves import fourier_matrix
from ..matrix.rounding import TINY, UNIT, gamma

ROWS = 256
"""Rows of the basis built at a time."""


def check(n: int, offsets: np.ndarray) -> Cost:
    """Refuse offsets that are not n finite numbers below 2^500; the cost."""
    if offsets.shape != (n,) or not np.all(np.isfinite(offsets)):
        raise ValueError(f"offsets must be {n} finite numbers, one for each k = 1..{n}; got shape {offsets.shape}")
    if np.abs(offsets).max(initial=0.0) >= 2.0**500:
        raise ValueError("offsets must be below 2^500 in magnitude")
    return Cost(10 * n * n + 8 * n, 8 * (3 * ROWS * n + 6 * n))


_NORMS: dict[int, tuple[float, float]] = {}
"""The column norms of the last few bases computed (EFPA plans ask for the same n again and again)."""


def _column_norms(n: int, work: Work) -> tuple[float, float]:
    """Upper bounds on the largest column L1 and L2 norms of the computed n x n basis (sums of non-negative terms),
    their steps counted when they are computed."""
    if n not in _NORMS:
        l1, l2 = np.zeros(n), np.zeros(n)
        for start in range(0, n, ROWS):
            stop = min(n, start + ROWS)
            work.step(6 * (stop - start) * n)
            rows = fourier_matrix(n, stop, start)
            l1 += np.abs(rows).sum(axis=0)
            l2 += (rows * rows).sum(axis=0)
        margin = 1 + 2 * gamma(n + 4)
        l1_max = float(l1.max()) * margin + 2 * n * TINY
        l2_max = math.sqrt(float(l2.max()) * margin + 2 * n * TINY) * (1 + 4 * UNIT)
        if len(_NORMS) >= 16:
            del _NORMS[next(iter(_NORMS))]
        _NORMS[n] = (l1_max, l2_max)
    return _NORMS[n]


def sensitivity(n: int, size: float, offsets: np.ndarray, work: Work) -> float:
    """max_j ||F e_j||_2 (an L1 step moves every tail by at most that), plus twice a score's rounding on counts of
    L1 norm <= size: the coefficients' (gamma_n Delta_1(F) size in all), the tail's (gamma_{n+3} of ||F x||_2 <=
    Delta_2(F) size), and the offset's addition (docs/privacy/efpa.md#floats)."""
    l1, l2 = _column_norms(n, work)
    coefficients = gamma(n) * l1 * size + n * n * TINY
    magnitude = l2 * size + coefficients
    rounding = (
        coefficients + gamma(n + 3) * magnitude + 2.0**-500 + 2 * UNIT * (magnitude + float(np.abs(offsets).max()))
    )
    return l2 + 2 * rounding


def scores(x: np.ndarray, offsets: np.ndarray, work: Work) -> np.ndarray:
    """-(||x - P_k x||_2 + offsets[k - 1]) for k = 1 .. n."""
    return -(tails(x, work) + offsets)


def tails(x: np.ndarray, work: Work) -> np.ndarray:
    """||x - P_k x||_2 for k = 1 .. n, P_k the projection on the k lowest frequencies (what EFPA drops)."""
    n = x.size
    coefficients = np.empty(n)
    for start in range(0, n, ROWS):
        stop = min(n, start + ROWS)
        work.step(4 * (stop - start) * n)
        coefficients[start:stop] = fourier_matrix(n, stop, start) @ x
    dropped = np.sqrt(np.cumsum((coefficients * coefficients)[::-1])[::-1])  # dropped[r] = ||c[r:]||
    return np.append(dropped[1:], 0.0)
