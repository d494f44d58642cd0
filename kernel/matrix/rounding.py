"""The floating-point model every rounding bound in the kernel rests on (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., sections 2.2 and 3.1; docs/privacy/arithmetic.md#the-float-model).

IEEE 754 binary64, round to nearest: every operation returns (x op y)(1 + delta) + eta with |delta| <= UNIT and
|eta| <= TINY (eta = 0 for additions and subtractions, which are exact in the subnormal range), as long as nothing
overflows. A sum of k products, computed in any order (BLAS blocking and FMA included), is then within
``gamma(k)`` times the sum of the products' magnitudes of the exact sum, plus TINY per product.

The bounds themselves are computed where no rounding can lower them: scalars exactly, as fractions
(``exact_product``), rounded up once (``above``); products of many factors through mantissas and exponents (``product_above``), because a float
product that underflows on the way loses everything the later factors would have multiplied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np

UNIT = 2.0**-53
TINY = 2.0**-1074
LIMIT = 2.0**500
"""Every value the kernel computes stays below this: far from overflow even squared, so no inf arises."""


def gamma(k: float) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of k roundings."""
    if not k * UNIT < 0.5:
        raise ValueError(f"a computation of {k:.3g} chained operations is too long to bound")
    return k * UNIT / (1 - k * UNIT)


def exact_product(values: Iterable[float]) -> Fraction:
    """The exact product of non-negative floats: their 53-bit integer significands multiplied and their exponents
    added, made a fraction once (a Fraction product of 64 factors near 2^-1000 normalises 64 times: 3.5 ms)."""
    significand, exponent = 1, 0
    for value in values:
        mantissa, power = math.frexp(value)
        significand, exponent = significand * int(mantissa * 2**53), exponent + power - 53
    return Fraction(significand << exponent) if exponent >= 0 else Fraction(significand, 1 << -exponent)


def above(exact: Fraction) -> float:
    """The least float >= ``exact`` (inf past the largest float): a bound computed exactly, rounded up once. Only
    a Fraction: a float mixed into the computation would have rounded it already."""
    if not isinstance(exact, Fraction):
        raise TypeError(f"above() takes the exact bound as a Fraction, not {type(exact).__name__}")
    try:
        nearest = float(exact)  # correctly rounded
    except OverflowError:
        return math.inf
    if not math.isfinite(nearest):
        return math.inf
    return nearest if Fraction(nearest) >= exact else math.nextafter(nearest, math.inf)


def product_above(factors: Sequence[np.ndarray]) -> np.ndarray:
    """Upper bounds on the outer product of non-negative float vectors (raveled, the last factor fastest), whatever
    their magnitudes: each entry split exactly into a mantissa in [1/2, 1) and an exponent (``np.frexp``); k
    mantissas multiply to at least 2^-k, so they never underflow and lose gamma(k) at most; the exponents add as
    integers; one ``np.ldexp`` at the end rounds only a subnormal result, by TINY / 2 at most, and overflows only
    to inf."""
    mantissa, exponent = np.ones(1), np.zeros(1, dtype=np.int64)
    for factor in factors:
        m, e = np.frexp(np.asarray(factor, dtype=np.float64))
        mantissa, exponent = np.multiply.outer(mantissa, m).ravel(), np.add.outer(exponent, e).ravel()
    with np.errstate(over="ignore"):
        return np.ldexp(mantissa * (1 + 2 * gamma(len(factors) + 2)), exponent) + TINY
