"""Privacy units: pure epsilon-DP and rho-zCDP budgets as exact Fractions, so sums never drift (0.1 + 0.2 is 3/10):
floats are read through their shortest ``repr``, with bounded size, onto fixed grids (docs/privacy/numbers.md).
Conversions to other notions are client arithmetic (``operators.privacy``).
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from typing_extensions import Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

Amount = Union[int, float, str, Fraction]
"""What a user may write for a budget value: 1, 0.1, "1/10", "0.1", Fraction(1, 10)."""

_UNSET: Any = object()

DIGIT_LIMIT = 250
"""The most digits read in one integer of a number: a numerator, a denominator, or a decimal's digits."""
EXPONENT_LIMIT = 20  # written exponents lie in [-20, 20]
MAX_AMOUNT = 10**EXPONENT_LIMIT
"""The largest amount requested, and charged at any source of a request's path (kernel.accountant)."""
AMOUNT_GRID = 2**120 * 10**EXPONENT_LIMIT * math.lcm(*range(1, 65))
"""Requested amounts are rounded down to multiples of 1/AMOUNT_GRID. Exact on it: n/d for d <= 64 ('1/3'),
decimals with at most 20 places ('0.1', '1e-20') and binary floats of at least 1e-20 (Fraction(0.1))."""
_ALLOWED = "an int, Fraction, str such as '1/10' or '0.1', or a finite float"
_NUMBER = re.compile(r"[+-]?(?:(\d+)/(0*[1-9]\d*)|(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?)")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...' ({len(str(value))} characters)"


def _parse(name: str, text: str) -> Fraction:
    """Read a string as Fraction does, after checking its digits and exponent against the limits."""
    match = _NUMBER.fullmatch(text.strip())
    if match is None or not any(match.group(1, 3, 4)):  # also 'nan', 'inf', '1/0'
        raise ValueError(f"{name} must be {_ALLOWED}; could not read {_shown(text)}")
    numerator, denominator, whole, decimals, exponent = match.groups("")
    digits = max(len(numerator), len(denominator), len(whole) + len(decimals))
    if digits > DIGIT_LIMIT:
        raise ValueError(f"{name} {_shown(text)} has {digits} digits; the kernel reads at most {DIGIT_LIMIT}")
    if exponent and (len(exponent.lstrip("+-0")) > 6 or abs(int(exponent)) > EXPONENT_LIMIT):
        raise ValueError(
            f"{name} {_shown(text)} has an exponent of {exponent:.12}{'...' * (len(exponent) > 12)}; "
            f"the kernel accepts exponents between -{EXPONENT_LIMIT} and {EXPONENT_LIMIT}"
        )
    return Fraction(text.strip())


def to_fraction(name: str, value: Any) -> Fraction:
    """Read ``value`` as an exact, finite, non-negative Fraction of bounded size, or raise ValueError naming it."""
    if type(value) is Fraction or type(value) is int:  # the common cases, without abstract-class checks
        result = value if type(value) is Fraction else Fraction(value)  # a Fraction is immutable
    elif isinstance(value, bool) or type(value).__name__ == "bool_":
        raise ValueError(f"{name} must be {_ALLOWED}; got the boolean {value!r}")
    elif isinstance(value, numbers.Rational):
        result = Fraction(int(value.numerator), int(value.denominator))
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if not math.isfinite(as_float):
            raise ValueError(f"{name} must be finite; got {value!r}")
        result = _parse(name, repr(as_float))
    elif isinstance(value, str):
        result = _parse(name, value)
    else:
        raise ValueError(f"{name} must be {_ALLOWED}; got {type(value).__name__} {_shown(value)}")
    if max(abs(result.numerator), result.denominator) >= 10**DIGIT_LIMIT:
        raise ValueError(f"{name} has more than {DIGIT_LIMIT} digits in its numerator or denominator")
    if result < 0:
        raise ValueError(f"{name} must be positive; got {_shown(value)}")
    return result


def on_grid(value: Fraction, grid: int, up: bool = False) -> Fraction:
    """``value`` rounded down (or up) to a multiple of 1 / grid."""
    steps = -(-value.numerator * grid // value.denominator) if up else value.numerator * grid // value.denominator
    return Fraction(steps, grid)


def requested_amount(name: str, value: Any) -> Fraction:
    """An epsilon, rho or sigma asked for: read with bounded size, at most MAX_AMOUNT, rounded down onto the
    amount grid (so the value used is the value charged), and refused if that leaves 0."""
    exact = to_fraction(name, value)
    if exact > MAX_AMOUNT:
        raise ValueError(f"{name} {_shown(value)} is above 1e{EXPONENT_LIMIT}, the largest amount the kernel accepts")
    amount = on_grid(exact, AMOUNT_GRID)
    if amount == 0:
        raise ValueError(f"{name} must be at least 1/AMOUNT_GRID = {1 / AMOUNT_GRID:.3g}; got {_shown(value)}")
    return amount


class _BudgetMeta(type(BaseModel)):  # type: ignore[misc]
    """Lets users write ``PureDP(1)`` as well as ``PureDP(epsilon=1)``: a :func:`requested_amount` (never 0).
    Validation (``model_validate``, nested models) skips this, so a serialised zero spend still loads."""

    def __call__(cls, value: Any = _UNSET, /, **data: Any) -> Any:
        field: str = cls._field
        if value is not _UNSET:
            if field in data:
                raise TypeError(f"{cls.__name__} got {field} both positionally and by keyword")
            data[field] = value
        if field in data:
            data[field] = requested_amount(field, data[field])
        return super().__call__(**data)


@functools.total_ordering
class _Budget(BaseModel, metaclass=_BudgetMeta):
    """Shared behaviour of the two budget kinds: exact value, +, -, ordering, float view. Calling the class rejects
    zero (a user's mistake), validation accepts it (nothing spent); both round down onto the kind's ``grid``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _field: ClassVar[str]
    grid: ClassVar[int]

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
            raise TypeError(f"cannot {op} {type(self).__name__} and {type(other).__name__}; convert explicitly first")
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

    def split(self, shares: Sequence[Any]) -> list[Self]:
        """This budget in parts for a plan's stages: ``shares`` of it (exact: 0.25, "1/3", Fraction(1, 3)), each
        positive, summing to at most 1; each part rounds down onto the grid, so together they never exceed it."""
        parts = [to_fraction("share", share) for share in shares]
        if not parts or min(parts) <= 0 or sum(parts) > 1:
            raise ValueError(f"shares must be positive and sum to at most 1, got {[str(p) for p in parts]}")
        return [type(self).model_validate({self._field: self.value * part}) for part in parts]

    @field_validator("epsilon", "rho", mode="before", check_fields=False)
    @classmethod
    def _exact(cls, value: Any, info: ValidationInfo) -> Fraction:
        return on_grid(to_fraction(info.field_name, value), cls.grid)


class PureDP(_Budget):
    """A pure epsilon-DP budget: ``PureDP(1)``, ``PureDP("1/10")``, ``PureDP(epsilon=0.5)``."""

    _field: ClassVar[str] = "epsilon"
    grid: ClassVar[int] = AMOUNT_GRID
    kind: Literal["pure"] = "pure"
    epsilon: Fraction

    if TYPE_CHECKING:  # the metaclass accepts the value positionally

        def __init__(self, epsilon: Amount = ..., /, **data: Any) -> None: ...


class ZCDP(_Budget):
    """A rho-zero-concentrated-DP budget: ``ZCDP("1/2")``, ``ZCDP(rho=0.05)``."""

    _field: ClassVar[str] = "rho"
    grid: ClassVar[int] = 8 * AMOUNT_GRID**2  # holds eps^2/2 and eps^2/8 of requested epsilons exactly
    kind: Literal["zcdp"] = "zcdp"
    rho: Fraction

    if TYPE_CHECKING:  # the metaclass accepts the value positionally

        def __init__(self, rho: Amount = ..., /, **data: Any) -> None: ...


Accounted = Annotated[Union[PureDP, ZCDP], Field(discriminator="kind")]
"""Either kind of budget the kernel accounts, told apart by its ``kind`` field (for its request models); a client's
``ApproxDP`` is converted to a ``ZCDP`` before it reaches the kernel (``operators.budget``)."""
