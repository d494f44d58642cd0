"""Vector Laplace and the noisy count: M x plus exact discrete Laplace noise on a grid.

Card
- Neighbours: one record added or removed; the measured vector moves by 1 in one cell (L1 distance 1), and the
  accountant multiplies the charge by the stability of the path from the table.
- Sensitivity: Delta_1 of the matrix the kernel applies, plus twice its evaluation error
  (``SealedMatrix.released``), plus one grid step per answer that may round differently (``release.laplace``).
  A count: 1, an exact integer.
- Cost: the sealed matrix's (``kernel.matrix.sealed.stack_cost``), and each answer's release (``release.cost``).
- Reads data: M x (or the count), once the charge is planned.
- May fail before the charge: the spec's cost, shape and columns; values past 2^500, integer leaves past 2^53, a
  matrix with no non-zero entry; a scale the samplers do not draw. Nothing can fail after it.
- Proof: docs/privacy/laplace.md#guarantee
"""

from __future__ import annotations

from fractions import Fraction

from . import release
from ..matrix import Released, SealedMatrix


def prepare(M: SealedMatrix, size: float, epsilon: Fraction, unit: release.Unit) -> release.Prepared:
    """Laplace noise for M x with ||x||_1 <= size; charge eps (eps^2 / 2 under zCDP)."""
    return release.laplace(M.released("l1", size), epsilon, unit)


def count(size: float, epsilon: Fraction, unit: release.Unit) -> release.Prepared:
    """Laplace noise for a count of at most ``size`` records: an exact integer of sensitivity 1."""
    return release.laplace(Released(1.0, 0, 1, size), epsilon, unit)
