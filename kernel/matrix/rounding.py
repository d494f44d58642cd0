"""The floating-point model every rounding bound in the kernel rests on (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., sections 2.2 and 3.1; docs/privacy/arithmetic.md#the-float-model).

IEEE 754 binary64, round to nearest: every operation returns (x op y)(1 + delta) + eta with |delta| <= UNIT and
|eta| <= TINY (eta = 0 for additions and subtractions, which are exact in the subnormal range), as long as nothing
overflows. A sum of k products, computed in any order (BLAS blocking and FMA included), is then within
``gamma(k)`` times the sum of the products' magnitudes of the exact sum, plus TINY per product.
"""

UNIT = 2.0**-53
TINY = 2.0**-1074
LIMIT = 2.0**500
"""Every value the kernel computes stays below this: far from overflow even squared, so no inf arises."""


def gamma(k: float) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of k roundings."""
    if not k * UNIT < 0.5:
        raise ValueError(f"a computation of {k:.3g} chained operations is too long to bound")
    return k * UNIT / (1 - k * UNIT)
