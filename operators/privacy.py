"""Conversions between privacy notions: pure DP, zCDP and (epsilon, delta)-DP.

Public arithmetic on budgets, used by clients (budget views, ResidualPlanner's budget forms); the
kernel itself accounts only in its exact units (``kernel.privacy``). Conversions that cannot be
exact (they involve logs, square roots and the normal CDF) take and return floats, and every one
of them is rounded in the conservative direction: a returned epsilon or sigma is never smaller
than the root found, and a returned pcost is never larger.

>>> round(float(zcdp_for_approx_dp(1.0, 1e-6).rho), 5)
0.02436
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any, Sequence

from scipy.optimize import brentq

from ..kernel.privacy import AMOUNT_GRID, Amount, PureDP, ZCDP, to_fraction


# ----------------------------------------------------------------------------- argument checks


def _positive(name: str, value: Any) -> float:
    """A finite, strictly positive float, or ValueError naming the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive finite number; got {type(value).__name__} {value!r}")
    result = float(value)
    if not math.isfinite(result) or result <= 0:
        raise ValueError(f"{name} must be a positive finite number; got {value!r}")
    return result


def _probability(name: str, value: Any) -> float:
    """A float strictly between 0 and 1, or ValueError naming the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number strictly between 0 and 1; got {type(value).__name__} {value!r}")
    result = float(value)
    if not 0.0 < result < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1; got {value!r}")
    return result


def _budget_amount(name: str, value: Any, kind: type[PureDP] | type[ZCDP]) -> Fraction:
    """The exact positive amount of a budget object of the right kind or of a plain number."""
    if isinstance(value, (PureDP, ZCDP)):
        if not isinstance(value, kind):
            raise ValueError(f"{name} must be a {kind.__name__} or a number; got {value!r}")
        amount = value.value
    else:
        amount = to_fraction(name, value)
    if amount == 0:
        raise ValueError(f"{name} must be positive; got {value!r}")
    return amount


def _budget_float(name: str, value: Any, kind: type[PureDP] | type[ZCDP]) -> float:
    """The amount as a float for numerical conversions, which need it in [1e-100, 1e100]."""
    amount = _budget_amount(name, value, kind)
    if not Fraction(1, 10**100) <= amount <= 10**100:
        raise ValueError(f"{name} must be between 1e-100 and 1e100 for this conversion; got {value!r}")
    return float(amount)


# ----------------------------------------------------------------------------- splitting a budget


def split_amount(amount: PureDP | ZCDP | Amount, weights: Sequence[float | Fraction]) -> list[Fraction]:
    """``amount`` split in proportion to ``weights`` into amounts on the kernel's amount grid that add up
    to it exactly (its grid part, if it is not on the grid): each share is rounded down to the grid and
    the few grid steps left over go to the largest remainders. The kernel takes such amounts as they
    are, so a plan measuring with them spends exactly its budget (docs/privacy/numbers.md).

    >>> split_amount(1, [1.0, 1.0, 1.0])
    [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3)]
    """
    value = amount.value if isinstance(amount, (PureDP, ZCDP)) else to_fraction("amount", amount)
    steps = value.numerator * AMOUNT_GRID // value.denominator
    shares = [Fraction(w) for w in weights]
    whole = sum(shares, Fraction(0))
    if not shares or min(shares) < 0 or whole <= 0:
        raise ValueError("weights must be non-negative with a positive sum")
    exact = [steps * share / whole for share in shares]
    parts = [math.floor(e) for e in exact]
    for i in sorted(range(len(exact)), key=lambda i: parts[i] - exact[i])[: steps - sum(parts)]:
        parts[i] += 1
    return [Fraction(part, AMOUNT_GRID) for part in parts]


# ----------------------------------------------------------------------------- pure DP and zCDP


def epsilon_within_zcdp(rho: ZCDP | Amount, digits: int = 15) -> Fraction:
    """The largest epsilon (to ``digits`` decimals and at least ``digits`` significant digits, never above) whose
    Laplace charge in a zCDP session, epsilon^2 / 2, fits in ``rho``: what a pure-DP strategy may spend of a zCDP
    budget."""
    r = _budget_amount("rho", rho, ZCDP)
    magnitude = math.floor(math.log10(math.sqrt(2 * float(r))))  # only sets the precision: the root below is exact
    scale = 10 ** (digits + max(0, -magnitude))
    return Fraction(math.isqrt(2 * r.numerator * scale * scale // r.denominator), scale)


def zcdp_to_approx_dp_classic(rho: ZCDP | Amount, delta: float) -> float:
    """The classic bound eps = rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke 2016, Prop. 1.3); looser."""
    r = _budget_float("rho", rho, ZCDP)
    d = _probability("delta", delta)
    return r + 2.0 * math.sqrt(r * math.log(1.0 / d))


def _log_zcdp_delta(rho: float, epsilon: float) -> float:
    """log delta(eps) for rho-zCDP by Canonne, Kamath & Steinke 2020, Corollary 13.

    delta = inf_{alpha>1} exp((alpha-1)(alpha rho - eps)) / (alpha-1) * (1 - 1/alpha)^alpha.
    With x = alpha - 1 the log of the objective is
        f(x) = x (alpha rho - eps) - log x + alpha (log x - log1p x),
    which is convex in alpha (f'' = 1/(alpha(alpha-1)) > 0), with derivative
        f'(x) = (2x + 1) rho - eps + log x - log1p x,
    so the infimum is at the unique root of f', found by brentq on log x.
    """

    def slope(log_x: float) -> float:
        x = math.exp(log_x)
        return (2.0 * x + 1.0) * rho - epsilon + log_x - math.log1p(x)

    lo, hi = 0.0, 0.0
    while slope(lo) >= 0.0:  # slope -> -inf as x -> 0
        lo -= 1.0
    while slope(hi) <= 0.0:  # slope -> +inf as x -> inf
        hi += 1.0
    log_x = brentq(slope, lo, hi, xtol=1e-13, rtol=1e-15, maxiter=500)
    x = math.exp(log_x)
    alpha = 1.0 + x
    return x * (alpha * rho - epsilon) - log_x + alpha * (log_x - math.log1p(x))


def zcdp_delta(rho: ZCDP | Amount, epsilon: float) -> float:
    """The smallest delta for which rho-zCDP implies (epsilon, delta)-DP, by the tight CKS 2020 bound."""
    r = _budget_float("rho", rho, ZCDP)
    eps = _positive("epsilon", epsilon)
    return math.exp(_log_zcdp_delta(r, eps))


def zcdp_to_approx_dp(rho: ZCDP | Amount, delta: float) -> float:
    """The smallest epsilon with rho-zCDP => (epsilon, delta)-DP, by the tight CKS 2020 bound.

    delta(eps) is decreasing, and at the classic epsilon it is already <= delta, so the root is
    bracketed by [0, classic]. The result is nudged upwards until delta(result) <= delta holds in
    floating point, so it is never optimistic.
    """
    r = _budget_float("rho", rho, ZCDP)
    d = _probability("delta", delta)
    target = math.log(d)
    if _log_zcdp_delta(r, 0.0) <= target:
        return 0.0
    hi = zcdp_to_approx_dp_classic(r, d)
    # xtol relative to the bracket: an absolute 1e-14 left a root near 1e-9 (rho ~ 1e-20) 1e11 ulps short of the
    # nudging below, which then never ended
    eps = brentq(lambda e: _log_zcdp_delta(r, e) - target, 0.0, hi, xtol=hi * 1e-15, rtol=1e-14, maxiter=500)
    while _log_zcdp_delta(r, eps) > target:
        eps = max(math.nextafter(eps, math.inf), eps * (1 + 1e-14))
    return eps


def zcdp_for_approx_dp(epsilon: float, delta: float) -> ZCDP:
    """The largest rho (to 12 digits, never above) whose rho-zCDP implies (epsilon, delta)-DP by the bound of
    :func:`zcdp_to_approx_dp`: the zCDP budget a kernel can spend when the release must be (epsilon, delta)-DP."""
    eps = _positive("epsilon", epsilon)
    _probability("delta", delta)
    # epsilon(rho) <= rho + 2 sqrt(rho L), L = log(1/delta): below eps at low = eps^2 / (400 L) (then 2 sqrt(low L)
    # = eps / 10) when eps <= 100 L, and at low = eps / 4 (then L < eps / 100) otherwise
    low = min(eps * eps / (400 * math.log(1 / delta)), eps / 4)
    if not low >= 1e-20:  # the kernel's amounts stop at exponent -20
        raise ValueError(f"epsilon = {epsilon} with delta = {delta} leaves a zCDP budget below 1e-20")
    rho = brentq(lambda r: zcdp_to_approx_dp(r, delta) - eps, low, eps, xtol=low * 1e-14, rtol=1e-12)
    step = 1e-12
    while zcdp_to_approx_dp(rho, delta) > eps:  # brentq's root may sit a hair above: step below it, doubling
        rho, step = max(rho * (1 - step), low), 2 * step
    readable = Fraction(rho).limit_denominator(10**12)
    return ZCDP(readable if readable > 0 and zcdp_to_approx_dp(float(readable), delta) <= eps else Fraction(rho))
