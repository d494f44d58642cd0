"""Privacy units: pure epsilon-DP and rho-zCDP budgets, exact.

Budgets are exact: ``PureDP`` and ``ZCDP`` hold their value as a ``fractions.Fraction`` so
that adding up many small charges never drifts (0.1 + 0.2 is exactly 3/10). Floats given by
a user are read through their shortest decimal ``repr``, so ``PureDP(0.1).epsilon`` is exactly
``Fraction(1, 10)``.

Conversions to other notions ((epsilon, delta)-DP, Gaussian DP) are public arithmetic used by
clients: ``operators.privacy``.

>>> PureDP(0.1) + PureDP("1/5")
PureDP(kind='pure', epsilon=Fraction(3, 10))
"""

from __future__ import annotations

import functools
import math
import numbers
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from typing_extensions import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

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


@functools.total_ordering
class _Budget(BaseModel, metaclass=_BudgetMeta):
    """Shared behaviour of the two budget kinds: exact value, +, -, ordering (from < and ==), float view.

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
