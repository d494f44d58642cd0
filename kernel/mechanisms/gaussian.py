"""Vector Gaussian, alone or in batches: M x plus exact discrete Gaussian noise on a grid (zCDP sessions).

Card
- Neighbours: one record added or removed; the measured vector moves by 1 in one cell (L1 distance 1); the
  accountant multiplies rho by the square of the path's stability.
- Sensitivity: Delta_2 of the matrix the kernel applies, plus twice its L1 evaluation error
  (``SealedMatrix.released``), plus the grid's g ceil(sqrt(rows)) (``release.gaussian``).
- Cost: the sealed matrix's, once per matrix of a batch, applied to each item's vector; each answer's release,
  all of a batch's answers held until they are released.
- Reads data: M x of each item, once every item's charge is planned (all or none).
- May fail before the charge: as for Laplace, and a pure-DP session. Nothing can fail after it.
- Proof: docs/privacy/gaussian.md#guarantee (batches: docs/privacy/gaussian.md#batches-gaussian_batch)
"""

from __future__ import annotations

from fractions import Fraction

from . import release
from ..matrix import SealedMatrix


def prepare(
    M: SealedMatrix, size: float, rho: Fraction | None, sigma: float | None, unit: release.Unit
) -> release.Prepared:
    """Gaussian noise for M x with ||x||_1 <= size: given rho, the sigma it allows; given sigma, the rho it costs."""
    return release.gaussian(M.released("l2", size), rho, sigma, unit)
