"""Domains: the named, finite attributes a private table is defined over. A data vector over a Domain is the
table's histogram flattened row-major (first attribute most significant): its length is ``domain.size``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Attribute(BaseModel):
    """One attribute: a name, a size (values are codes 0..size-1), optional labels, and what the table's column
    holds (``values``): ``"codes"`` (integer codes, or labels when the column is text: the default), ``"labels"``
    (the labels themselves, text or numbers; any other value, missing ones included, is ``other`` or refused), or
    ``"numbers"`` (clamped to ``bounds`` and cut into ``size`` equal bins: :meth:`bin_codes`). Every rule reads one
    value at a time and public parameters only (docs/privacy/data.md#raw-values)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    size: int = Field(ge=1)
    labels: tuple[str, ...] | None = None
    values: Literal["codes", "labels", "numbers"] = "codes"
    other: str | None = None
    bounds: tuple[float, float] | None = None
    integer: bool = False

    @model_validator(mode="after")
    def _labels_match_size(self) -> Attribute:
        if self.labels is not None and len(self.labels) != self.size:
            raise ValueError(
                f"attribute {self.name!r} has size {self.size} but {len(self.labels)} labels; "
                "give exactly one label per value"
            )
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError(f"attribute {self.name!r} has repeated labels")
        if self.values == "labels" and self.labels is None:
            raise ValueError(f"attribute {self.name!r}: values='labels' needs labels")
        if self.other is not None and (self.values != "labels" or self.other not in self.labels):
            raise ValueError(f"attribute {self.name!r}: other={self.other!r} must be one of its labels")
        if (self.values == "numbers") != (self.bounds is not None and self.labels is None):
            raise ValueError(f"attribute {self.name!r}: values='numbers' takes bounds (low, high) and no labels")
        if self.bounds is not None and not (math.isfinite(self.span) and self.span > 0):
            raise ValueError(f"attribute {self.name!r}: bounds {self.bounds} must be finite, low below high")
        return self

    def code(self, label: str) -> int:
        """The integer code of a value label."""
        if self.labels is None or label not in self.labels:
            raise ValueError(
                f"{label!r} is not a value of attribute {self.name!r}"
                + (" (it has no labels: give integer codes)" if self.labels is None else "")
            )
        return self.labels.index(label)

    @property
    def span(self) -> float:
        """The width of the bounds the bins cut: high - low, plus 1 for integers (a bin of each integer's width)."""
        return self.bounds[1] - self.bounds[0] + self.integer

    def bin_codes(self, values: np.ndarray) -> np.ndarray:
        """The public bin rule of a ``"numbers"`` attribute: each value clamped to the bounds, then
        ``floor((value - low) * size / span)``, at most ``size - 1`` (the backends compute the same in their SQL)."""
        low, high = self.bounds
        scaled = np.floor((np.clip(values, low, high) - low) * self.size / self.span)
        return np.minimum(scaled, self.size - 1).astype(np.int64)

    def label_code(self, value) -> int:
        """The code of one raw value of a ``"labels"`` attribute: the first label it reads as (text as it is once
        stripped, or a number as the same number: 1, 1.0 and " 1.0" all read as the label "1"); else ``other``'s
        code, else -1."""
        text, number = (value.strip(), _number(value)) if isinstance(value, str) else (None, value)
        for code, label in enumerate(self.labels):
            if text == label or (number is not None and _number(label) == number):
                return code
        return -1 if self.other is None else self.labels.index(self.other)


def _number(text: str) -> float | None:
    """The number a text reads as, or None."""
    try:
        return float(text)
    except ValueError:
        return None


class Domain(BaseModel):
    """An ordered tuple of attributes with distinct names."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attributes: tuple[Attribute, ...]

    @field_validator("attributes")
    @classmethod
    def _distinct_names(cls, attributes: tuple[Attribute, ...]) -> tuple[Attribute, ...]:
        if not attributes:
            raise ValueError("a domain needs at least one attribute")
        repeated = sorted(n for n, k in Counter(a.name for a in attributes).items() if k > 1)
        if repeated:
            raise ValueError(f"attribute names must be distinct; repeated: {repeated}")
        return attributes

    @classmethod
    def from_sizes(cls, sizes: Sequence[int], names: Sequence[str] | None = None) -> Domain:
        """A domain from attribute sizes; names default to ``a0, a1, ...``."""
        sizes = [_as_size(s) for s in sizes]
        if names is None:
            names = [f"a{i}" for i in range(len(sizes))]
        if len(names) != len(sizes):
            raise ValueError(f"{len(names)} names for {len(sizes)} sizes")
        return cls(attributes=tuple(Attribute(name=n, size=s) for n, s in zip(names, sizes)))

    @classmethod
    def from_dict(cls, spec: dict[str, int | Sequence[str]]) -> Domain:
        """A domain from ``{name: size}`` or ``{name: [labels...]}``."""
        attributes = []
        for name, value in spec.items():
            if isinstance(value, (int,)) or hasattr(value, "__index__"):
                attributes.append(Attribute(name=name, size=_as_size(value)))
            else:
                labels = tuple(str(v) for v in value)
                attributes.append(Attribute(name=name, size=len(labels), labels=labels))
        return cls(attributes=tuple(attributes))

    # Derived facts are cached on the (frozen) instance: a wide domain is looked up by name on every request.
    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @cached_property
    def sizes(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.attributes)

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def model_copy(self, *, update=None, deep: bool = False) -> Domain:
        copied = super().model_copy(update=update, deep=deep)
        for cached in ("names", "sizes", "_positions"):  # derived from the (possibly updated) attributes
            copied.__dict__.pop(cached, None)
        return copied

    @property
    def size(self) -> int:
        """Number of cells: the length of the data vector."""
        return math.prod(self.sizes)

    def __len__(self) -> int:
        return len(self.attributes)

    def __getitem__(self, name: str) -> Attribute:
        return self.attributes[self.index(name)]

    def index(self, attribute: str | int) -> int:
        """Position of an attribute given by name or position."""
        if isinstance(attribute, str):
            try:
                return self._positions[attribute]
            except KeyError:
                raise ValueError(f"unknown attribute {attribute!r}; the domain has {list(self.names)}") from None
        position = int(attribute)
        if not 0 <= position < len(self.attributes):
            raise ValueError(f"attribute position {position} out of range 0..{len(self.attributes) - 1}")
        return position

    def indices(self, attributes: Iterable[str | int]) -> tuple[int, ...]:
        positions = tuple(self.index(a) for a in attributes)
        if len(set(positions)) != len(positions):
            raise ValueError(f"attributes repeated in {list(attributes)}")
        return positions

    def project(self, attributes: Iterable[str | int]) -> Domain:
        """The sub-domain on the given attributes, in domain order."""
        keep = sorted(self.indices(attributes))
        if not keep:
            raise ValueError("project needs at least one attribute")
        return Domain(attributes=tuple(self.attributes[i] for i in keep))


def _as_size(value: object) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"attribute size must be a positive integer, got {value!r}")
    size = int(value)  # type: ignore[call-overload]
    if size < 1:
        raise ValueError(f"attribute size must be a positive integer, got {size}")
    return size
