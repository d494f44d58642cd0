"""DAWA's partition costs: the deviations of a vector's aligned dyadic blocks, with Laplace noise.

Card
- Neighbours: one record added or removed; the vector moves by 1 in one cell (L1 distance 1); the accountant
  multiplies by the path's stability.
- Sensitivity: sum_{k=1..K} 2 (1 - 2^-k), K = ceil(log2 n) (one block per level holds the cell), plus per level
  twice the float error 4 gamma_{2n+4} N, plus a grid step per level (``release.laplace``).
- Cost: about 6 n K steps (K levels of sums over the n cells) and each block's release (``cost``).
- Reads data: the deviations, once the charge is planned.
- May fail before the charge: a vector under 2 cells; a scale the samplers do not draw. Nothing after.
- Proof: docs/privacy/dawa.md#mechanism-and-guarantee
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import release
from ..limits import Cost, Work
from ..matrix import Released
from ..matrix.rounding import gamma


def deviations(x: np.ndarray, work: Work) -> np.ndarray:
    """sum_i |x_i - mean| of the aligned dyadic blocks of widths 2, 4, .., 2^K >= n (clipped), level by level."""
    costs, width = [], 2
    while width < 2 * x.size:
        work.step(6 * x.size)
        starts = np.arange(0, x.size, width)
        lengths = np.diff(np.append(starts, x.size))
        means = np.repeat(np.add.reduceat(x, starts) / lengths, lengths)
        costs.append(np.add.reduceat(np.abs(x - means), starts))
        width *= 2
    return np.concatenate(costs)


def cost(n: int) -> Cost:
    """The deviations of an n-cell vector (a pass a level), and the release of their n or so answers."""
    levels = (n - 1).bit_length()
    return Cost(8 * n * levels, 8 * 6 * n) + release.cost(n)


def prepare(n: int, size: float, epsilon: Fraction, unit: release.Unit) -> release.Prepared:
    """Laplace noise for the deviations of an n-cell vector (n >= 2) of at most ``size`` records."""
    if n < 2:
        raise ValueError("dyadic deviations need a vector of at least 2 cells")
    levels = (n - 1).bit_length()
    exact = sum(2.0 * (1.0 - 2.0**-k) for k in range(1, levels + 1))
    rounding = 4 * gamma(2 * n + 4) * size
    return release.laplace(
        Released(exact + 2 * levels * rounding, levels, levels, 2 * size * (1 + gamma(2 * n + 4))), epsilon, unit
    )
