"""Privacy units (pure epsilon-DP, rho-zCDP) and conversions between privacy notions.

Budgets are exact: ``PureDP`` and ``ZCDP`` hold their value as a ``fractions.Fraction`` so
that adding up many small charges never drifts (0.1 + 0.2 is exactly 3/10). Floats given by
a user are read through their shortest decimal ``repr``, so ``PureDP(0.1).epsilon`` is exactly
``Fraction(1, 10)``.

Conversions that cannot be exact (they involve logs, square roots and the normal CDF) take
and return floats, and every one of them is rounded in the conservative direction: a
returned epsilon or sigma is never smaller than the root found, and a returned pcost is never
larger.

>>> PureDP(0.1) + PureDP("1/5")
PureDP(kind='pure', epsilon=Fraction(3, 10))
>>> pure_to_zcdp(PureDP(1))
Fraction(1, 2)
>>> round(analytic_gaussian_sigma(1.0, 1e-6), 5)
4.22468
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from typing_extensions import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator
from scipy.optimize import brentq
from scipy.special import log_ndtr

Amount = Union[int, float, str, Fraction]
"""What a user may write for a budget value: 1, 0.1, "1/10", "0.1", Fraction(1, 10)."""

_UNSET: Any = object()


def _to_fraction(name: str, value: Any) -> Fraction:
    """Read ``value`` as an exact, finite, non-negative Fraction, or raise ValueError naming it."""
    allowed = "an int, Fraction, str such as '1/10' or '0.1', or a finite float"
    if type(value) is Fraction or type(value) is int:  # the common cases, without abstract-class checks
        result = value if type(value) is Fraction else Fraction(value)  # a Fraction is immutable
    elif isinstance(value, bool) or type(value).__name__ == "bool_":
        raise ValueError(f"{name} must be {allowed}; got the boolean {value!r}")
    elif isinstance(value, numbers.Rational):
        result = Fraction(int(value.numerator), int(value.denominator))
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if not math.isfinite(as_float):
            raise ValueError(f"{name} must be finite; got {value!r}")
        result = Fraction(repr(as_float))
    elif isinstance(value, str):
        try:
            result = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{name} must be {allowed}; could not read the string {value!r}") from None
    else:
        raise ValueError(f"{name} must be {allowed}; got {type(value).__name__} {value!r}")
    if result < 0:
        raise ValueError(f"{name} must be positive; got {value!r}")
    return result


class _BudgetMeta(type(BaseModel)):  # type: ignore[misc]
    """Lets users write ``PureDP(1)`` as well as ``PureDP(epsilon=1)``, and rejects zero there.

    Only calls of the class come through here. Pydantic's validation (``model_validate``,
    ``model_validate_json``, nested request models) builds instances without calling the class,
    so a serialised zero accumulator (nothing spent yet) still loads.
    """

    def __call__(cls, value: Any = _UNSET, /, **data: Any) -> Any:
        field: str = cls._field
        if value is not _UNSET:
            if field in data:
                raise TypeError(f"{cls.__name__} got {field} both positionally and by keyword")
            data[field] = value
        if field in data and _to_fraction(field, data[field]) == 0:
            raise ValueError(
                f"{field} must be positive; got {data[field]!r} "
                f"(use {cls.__name__}.zero() for an accumulator of nothing spent)"
            )
        return super().__call__(**data)


class _Budget(BaseModel, metaclass=_BudgetMeta):
    """Shared behaviour of the two budget kinds: exact value, +, -, ordering, float view.

    Calling the class (``PureDP(0)``) rejects zero, because a zero budget asked for by a user is
    almost surely a mistake. Validation of serialised data accepts zero, because amounts *spent*
    are stored and reloaded and nothing spent is zero; both reject negative, NaN, infinite,
    boolean and non-numeric values.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    _field: ClassVar[str]

    @classmethod
    def zero(cls) -> Self:
        """The budget of nothing spent; legal only as the start of a sum."""
        return cls.model_validate({cls._field: 0})

    @property
    def value(self) -> Fraction:
        """The exact amount (epsilon or rho)."""
        return getattr(self, self._field)

    def __float__(self) -> float:
        return float(self.value)

    def _same_kind(self, other: object, op: str) -> _Budget:
        if type(other) is not type(self):
            raise TypeError(
                f"cannot {op} {type(self).__name__} and {type(other).__name__}; convert explicitly first"
            )
        return other  # type: ignore[return-value]

    def __add__(self, other: object) -> Self:
        other = self._same_kind(other, "add")
        return type(self).model_validate({self._field: self.value + other.value})

    def __sub__(self, other: object) -> Self:
        other = self._same_kind(other, "subtract")
        if other.value > self.value:
            raise ValueError(f"cannot subtract {other.value} from {self.value}: the result would be negative")
        return type(self).model_validate({self._field: self.value - other.value})

    def __lt__(self, other: object) -> bool:
        return self.value < self._same_kind(other, "compare").value

    def __le__(self, other: object) -> bool:
        return self.value <= self._same_kind(other, "compare").value

    def __gt__(self, other: object) -> bool:
        return self.value > self._same_kind(other, "compare").value

    def __ge__(self, other: object) -> bool:
        return self.value >= self._same_kind(other, "compare").value


class PureDP(_Budget):
    """A pure epsilon-DP budget: ``PureDP(1)``, ``PureDP("1/10")``, ``PureDP(epsilon=0.5)``."""

    _field: ClassVar[str] = "epsilon"
    kind: Literal["pure"] = "pure"
    epsilon: Fraction

    if TYPE_CHECKING:  # the metaclass accepts the value positionally

        def __init__(self, epsilon: Amount = ..., /, **data: Any) -> None: ...

    @field_validator("epsilon", mode="before")
    @classmethod
    def _exact(cls, value: Any) -> Fraction:
        return _to_fraction("epsilon", value)


class ZCDP(_Budget):
    """A rho-zero-concentrated-DP budget: ``ZCDP("1/2")``, ``ZCDP(rho=0.05)``."""

    _field: ClassVar[str] = "rho"
    kind: Literal["zcdp"] = "zcdp"
    rho: Fraction

    if TYPE_CHECKING:  # the metaclass accepts the value positionally

        def __init__(self, rho: Amount = ..., /, **data: Any) -> None: ...

    @field_validator("rho", mode="before")
    @classmethod
    def _exact(cls, value: Any) -> Fraction:
        return _to_fraction("rho", value)


Budget = Annotated[Union[PureDP, ZCDP], Field(discriminator="kind")]
"""Either kind of budget, told apart by its ``kind`` field (for the kernel's request models)."""


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


def _budget_amount(name: str, value: Any, kind: type[_Budget]) -> Fraction:
    """The exact positive amount of a budget object of the right kind or of a plain number."""
    if isinstance(value, _Budget):
        if not isinstance(value, kind):
            raise ValueError(f"{name} must be a {kind.__name__} or a number; got {value!r}")
        amount = value.value
    else:
        amount = _to_fraction(name, value)
    if amount == 0:
        raise ValueError(f"{name} must be positive; got {value!r}")
    return amount


def _budget_float(name: str, value: Any, kind: type[_Budget]) -> float:
    """The amount as a float for numerical conversions, which need it in [1e-100, 1e100]."""
    amount = _budget_amount(name, value, kind)
    if not Fraction(1, 10**100) <= amount <= 10**100:
        raise ValueError(f"{name} must be between 1e-100 and 1e100 for this conversion; got {value!r}")
    return float(amount)


# ----------------------------------------------------------------------------- pure DP and zCDP


def pure_to_zcdp(epsilon: PureDP | Amount) -> Fraction:
    """rho = epsilon^2 / 2: an epsilon-DP mechanism is (epsilon^2/2)-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    eps = _budget_amount("epsilon", epsilon, PureDP)
    return eps * eps / 2


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
    eps = brentq(lambda e: _log_zcdp_delta(r, e) - target, 0.0, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    while _log_zcdp_delta(r, eps) > target:
        eps = math.nextafter(eps, math.inf)
    return eps


# ----------------------------------------------------------------------------- Gaussian mechanism


def gaussian_sigma_for_zcdp(rho: ZCDP | Amount, l2_sensitivity: float = 1.0) -> float:
    """sigma = Delta_2 / sqrt(2 rho): the Gaussian mechanism with this sigma is rho-zCDP (Bun & Steinke 2016)."""
    r = _budget_float("rho", rho, ZCDP)
    return _positive("l2_sensitivity", l2_sensitivity) / math.sqrt(2.0 * r)


def _log_gaussian_delta(mu: float, epsilon: float) -> float:
    """log of Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), computed in log space (no overflow)."""
    log_a = float(log_ndtr(mu / 2.0 - epsilon / mu))
    log_b = epsilon + float(log_ndtr(-mu / 2.0 - epsilon / mu))
    if log_b >= log_a:  # the difference is below double precision of Phi(a): delta is ~0
        return -math.inf
    return log_a + math.log(-math.expm1(log_b - log_a))


def gaussian_approx_dp_delta(mu: float, epsilon: float) -> float:
    """The exact delta at epsilon of a mu-GDP Gaussian mechanism (mu = sensitivity / sigma).

    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)  (Balle & Wang 2018, Theorem 8).
    """
    return math.exp(_log_gaussian_delta(_positive("mu", mu), _positive("epsilon", epsilon)))


def gaussian_pcost_for_approx_dp(epsilon: float, delta: float) -> float:
    """The largest pcost p = mu^2 for which the Gaussian mechanism is (epsilon, delta)-DP.

    pcost is the privacy cost used by ResidualPlanner and QuerySmasher: a mechanism with pcost p
    is (p/2)-zCDP and sqrt(p)-GDP. delta(mu) increases with mu, so the root of
    log delta(mu) = log delta is found by brentq on log mu, then nudged down until it holds.
    """
    eps = _positive("epsilon", epsilon)
    target = math.log(_probability("delta", delta))

    def excess(log_mu: float) -> float:
        return _log_gaussian_delta(math.exp(log_mu), eps) - target

    lo, hi = 0.0, 0.0
    while excess(lo) > 0.0:
        lo -= 1.0
    while excess(hi) <= 0.0:
        hi += 1.0
    mu = math.exp(brentq(excess, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=500))
    while _log_gaussian_delta(mu, eps) > target:
        mu = math.nextafter(mu, 0.0)
    return mu * mu


def analytic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float = 1.0) -> float:
    """The smallest sigma for which the Gaussian mechanism is (epsilon, delta)-DP (Balle & Wang 2018).

    It is the sigma at which Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) = delta; the
    returned value is nudged upwards until that delta holds in floating point.
    """
    sens = _positive("l2_sensitivity", l2_sensitivity)
    eps = _positive("epsilon", epsilon)
    target = math.log(_probability("delta", delta))
    sigma = sens / math.sqrt(gaussian_pcost_for_approx_dp(eps, delta))
    while _log_gaussian_delta(sens / sigma, eps) > target:
        sigma = math.nextafter(sigma, math.inf)
    return sigma
