"""The exponential mechanism, and MWEM's worst-approximated query (``worst_approx``).

Card
- Neighbours: one record added or removed; the measured vector moves by 1 in one cell; the accountant multiplies
  by the path's stability.
- Sensitivity: a score |(W x)_i - (W x_hat)_i| moves by at most |w_ij| <= max |w_ij|, plus twice a score's
  rounding: the evaluation's error on one answer and the subtraction's (``sensitivity``). W x_hat is public,
  computed by the kernel from the analyst's estimate: its own rounding changes nothing.
- Cost: two evaluations of the sealed matrix W (on x and on x_hat), and the draw (expected O(n)).
- Reads data: W x, once the charge is planned.
- May fail before the charge: W's cost and shape, an estimate that is not finite or whose answers pass 2^499, a
  rate eps / (2 sensitivity) outside [2^-1000, 2^1000]. Nothing can fail after it.
- Proof: docs/privacy/exponential-mechanism.md#mechanism-and-guarantee
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..limits import Work
from ..matrix import SealedMatrix
from ..matrix.rounding import UNIT, above
from ..noise import NoiseSource, exponential_mechanism
from ..privacy import PureDP, ZCDP


def cost(epsilon: Fraction, unit: type[PureDP] | type[ZCDP]) -> Fraction:
    """The charge of one draw: eps, or eps^2 / 8 under zCDP (eps-bounded range, Cesar and Rogers 2021)."""
    return epsilon if unit is PureDP else epsilon * epsilon / 8


def selectable(epsilon: Fraction, sensitivity: float) -> float:
    """``sensitivity``, checked before any charge to give a rate epsilon / (2 sensitivity) the exact sampler accepts."""
    if not (0 < sensitivity < math.inf and 2.0**-1000 <= epsilon / (2 * Fraction(sensitivity)) <= 2.0**1000):
        raise ValueError(
            f"epsilon {float(epsilon):.3g} over twice the score sensitivity {sensitivity:.3g} must lie "
            "between 2^-1000 and 2^1000: rescale the scores"
        )
    return sensitivity


def select(source: NoiseSource, scores: np.ndarray, epsilon: Fraction, sensitivity: float) -> int:
    """Index i with probability proportional to exp(eps score_i / (2 sensitivity)), exactly (kernel.noise)."""
    return int(exponential_mechanism(source, scores, epsilon, sensitivity))


def offsets(W: SealedMatrix, estimate: np.ndarray, work: Work) -> np.ndarray:
    """W x_hat: public, so its rounding is immaterial; refused if it is not finite or passes 2^499."""
    answers = W.apply(estimate, work)
    if not np.all(np.abs(answers) <= 2.0**499):
        raise ValueError("the estimate's answers are not finite numbers below 2^499: rescale the estimate")
    return answers


def sensitivity(W: SealedMatrix, size: float, answers: np.ndarray, epsilon: Fraction) -> float:
    """max |w_ij| plus twice a score's rounding on counts of L1 norm <= size: one answer's evaluation error, and
    the subtraction of the public answers (u of each side's magnitude, each at most peak + max |W x_hat|)."""
    peak, offset = W.released("l1", size).peak, float(np.abs(answers).max(initial=0.0))
    rounding = W.row_error(size) + 2 * Fraction(UNIT) * (Fraction(peak) + Fraction(offset))
    return selectable(epsilon, above(Fraction(W.largest_entry()) + 2 * rounding))


def scores(W: SealedMatrix, x: np.ndarray, answers: np.ndarray, work: Work) -> np.ndarray:
    """|W x - W x_hat|: how badly the estimate answers each query."""
    return np.abs(W.apply(x, work) - answers)
