"""The public schema a data owner declares for a table: each column's labels or bounds and binning, never read from
the data. It gives the kernel's Domain (:meth:`Schema.domain`), whose attributes carry the rules that turn raw
values into codes while the kernel loads the table (``kernel.domain.Attribute.values``): labels looked up (values
outside them refused, or given the ``other`` label), numbers clamped to the bounds and cut into equal bins.

>>> schema = Schema(sex=["F", "M"], age=Integer(0, 120), income=Numeric(0, 250_000, bins=50))
>>> schema.domain().sizes
(2, 121, 50)
>>> schema["income"].edges()[:3].tolist(), schema["age"].midpoints()[:3].tolist()
([0.0, 5000.0, 10000.0], [0.0, 1.0, 2.0])
>>> Schema.from_dict({"sex": ["F", "M"], "region": {"categorical": ["N", "S"], "other": "elsewhere"},
...                   "age": {"integer": [0, 119], "bins": 12}}).domain().sizes
(2, 3, 12)
>>> Integer(0, 120, bins=7)
Traceback (most recent call last):
...
ValueError: Integer(0, 120, bins=7): the 121 integers do not split into 7 bins of equal width; choose bins dividing 121
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

from ...kernel.domain import Attribute, Domain


@dataclass(frozen=True)
class Categorical:
    """A column of labels (text or numbers); ``other``: the label every value outside them gets (added after them
    if it is not one of them); without it such a value refuses the table, naming it."""

    labels: tuple
    other: str | int | float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(self.labels))
        if not self.labels:
            raise ValueError("a categorical column needs at least one label")
        texts = [str(label) for label in self.labels]
        if len(set(texts)) != len(texts):
            raise ValueError(f"a categorical column's labels repeat: {texts}")

    @property
    def size(self) -> int:
        return len(self.keys)

    @property
    def keys(self) -> tuple[str, ...]:
        """The labels as the results show them: one per code."""
        texts = tuple(str(label) for label in self.labels)
        return texts if self.other is None or str(self.other) in texts else (*texts, str(self.other))

    def attribute(self, name: str) -> Attribute:
        other = None if self.other is None else str(self.other)
        return Attribute(name=name, size=len(self.keys), labels=self.keys, values="labels", other=other)

    def code_of(self, value) -> int:
        """The code of a label named in a query (refused, with the labels, when it is none of them)."""
        text = str(value)
        if text not in self.keys:
            raise ValueError(f"{value!r} is not a label of this column; its labels are {list(self.keys)}")
        return self.keys.index(text)

    def describe(self) -> dict:
        return {"categorical": list(self.labels)} | ({} if self.other is None else {"other": self.other})


@dataclass(frozen=True)
class _Binned:
    """Numbers between public bounds, cut into equal bins (the kernel's ``Attribute.bin_codes``)."""

    low: float
    high: float
    bins: int | None

    @property
    def size(self) -> int:
        return int(self.bins)

    @property
    def integer(self) -> bool:
        return False

    @property
    def span(self) -> float:
        return self.high - self.low + self.integer

    @property
    def width(self) -> float:
        return self.span / self.size

    def attribute(self, name: str) -> Attribute:
        return Attribute(name=name, size=self.size, values="numbers", bounds=(self.low, self.high),
                         integer=self.integer)

    def edges(self) -> np.ndarray:
        """The bins' ``size + 1`` edges: bin k holds the values from edge k up to (not including) edge k + 1."""
        return self.low + np.arange(self.size + 1) * self.width

    def midpoints(self) -> np.ndarray:
        """The value each bin stands for in sums and means: its midpoint (for integers, the middle of the integers
        it holds: with bins of width 1, the value itself)."""
        edges = self.edges()
        return (edges[:-1] + edges[1:] - self.integer) / 2

    def bin_of(self, value: float) -> int:
        """The bin a (public) value of a filter falls in, by the kernel's own rule (``kernel.predicate.leaf_codes``):
        -1 below the bounds, ``size`` above them."""
        if not self.low <= value <= self.high:
            return -1 if value < self.low else self.size
        return int(self.attribute("value").bin_codes(np.array([float(value)]))[0])

    @property
    def keys(self) -> tuple[str, ...]:
        """A bin as the results show it: the integer, or the range of integers or numbers it holds."""
        edges = self.edges()
        if self.integer:
            return tuple(f"{int(a)}" if self.width == 1 else f"{int(a)}-{int(b) - 1}" for a, b in
                         zip(edges[:-1], edges[1:]))
        return tuple(f"[{a:g}, {b:g})" for a, b in zip(edges[:-1], edges[1:]))

    def binning_note(self) -> str:
        """What binning does to sums, means and quantiles of this column ('' when each bin is one integer)."""
        if self.integer and self.width == 1:
            return ""
        return (f"binned in {self.size} bins of width {self.width:g}: each value counts as its bin's midpoint, within "
                f"{self.width / 2:g} of it")


@dataclass(frozen=True)
class Integer(_Binned):
    """Integers in ``low..high`` (bounds included), in bins of width 1 unless ``bins`` (which must divide the number
    of integers); values outside are clamped to the bounds, and every release that reads the column says so."""

    low: int
    high: int
    bins: int | None = None

    def __post_init__(self) -> None:
        for name in ("low", "high"):
            value = getattr(self, name)
            if isinstance(value, bool) or not float(value).is_integer():
                raise ValueError(f"Integer bounds are whole numbers; {name} = {value!r}")
        count = int(self.high) - int(self.low) + 1
        if count < 1:
            raise ValueError(f"Integer({self.low}, {self.high}): low must not be above high")
        bins = count if self.bins is None else _positive_bins(self.bins, f"Integer({self.low}, {self.high}, ...)")
        if count % bins:
            raise ValueError(f"Integer({self.low}, {self.high}, bins={self.bins}): the {count} integers do not split "
                             f"into {bins} bins of equal width; choose bins dividing {count}")
        object.__setattr__(self, "bins", bins)

    @property
    def integer(self) -> bool:
        return True

    def describe(self) -> dict:
        return {"integer": [int(self.low), int(self.high)], "bins": self.bins}


@dataclass(frozen=True)
class Numeric(_Binned):
    """Numbers in [low, high], cut into ``bins`` equal bins; values outside are clamped to the bounds, and every
    release that reads the column says so."""

    low: float
    high: float
    bins: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"Numeric({self.low}, {self.high}): bounds must be finite numbers with low below high")
        object.__setattr__(self, "bins", _positive_bins(self.bins, f"Numeric({self.low}, {self.high}, bins=...)"))

    def describe(self) -> dict:
        return {"numeric": [self.low, self.high], "bins": self.bins}


@dataclass(frozen=True)
class Codes(Integer):
    """A column of a plain Domain (integer codes 0..size-1, checked by the kernel, never clamped): what a served
    table without a schema offers its queries."""

    def binning_note(self) -> str:
        return ""


Column = Union[Categorical, Integer, Numeric]


def _positive_bins(bins, where: str) -> int:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"{where}: bins must be a positive whole number, got {bins!r}")
    return int(bins)


class Schema:
    """The columns of a table in order, each a :class:`Categorical` (or a plain list of labels), an
    :class:`Integer` or a :class:`Numeric`: ``Schema(sex=["F", "M"], age=Integer(0, 120))``."""

    def __init__(self, columns: Mapping[str, Column | Sequence] | None = None, /, **named: Column | Sequence):
        given = {**(columns or {}), **named}
        if not given:
            raise ValueError("a schema needs at least one column")
        self.columns: dict[str, Column] = {str(name): _column(name, spec) for name, spec in given.items()}

    def __getitem__(self, name: str) -> Column:
        try:
            return self.columns[name]
        except KeyError:
            raise ValueError(f"unknown column {name!r}; the schema has {list(self.columns)}") from None

    def __repr__(self) -> str:
        return f"Schema({', '.join(f'{n}={c!r}' for n, c in self.columns.items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and self.columns == other.columns

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.columns)

    def domain(self) -> Domain:
        """The kernel's Domain: one attribute per column, carrying its labels or bounds and bins."""
        return Domain(attributes=tuple(column.attribute(name) for name, column in self.columns.items()))

    def to_dict(self) -> dict:
        return {name: column.describe() for name, column in self.columns.items()}

    @classmethod
    def from_dict(cls, spec: Mapping) -> Schema:
        """From ``{name: [labels...] | {"categorical": [...], "other": ...} | {"integer": [low, high], "bins": k}
        | {"numeric": [low, high], "bins": k}}`` (the form of a YAML or JSON schema file)."""
        if not isinstance(spec, Mapping):
            raise ValueError(f"a schema is a mapping of column names to columns, got {type(spec).__name__}")
        return cls({name: _from_spec(name, value) for name, value in spec.items()})

    @classmethod
    def from_file(cls, path: str | Path) -> Schema:
        """From a YAML (.yaml, .yml: needs pyyaml) or JSON file of :meth:`from_dict`'s form."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"schema file {path} does not exist")
        if path.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ImportError(f"reading the YAML schema {path} needs pyyaml: pip install -e '.[yaml]', or write "
                                  "it as JSON") from None
            spec = yaml.safe_load(path.read_text())
        else:
            try:
                spec = json.loads(path.read_text())
            except json.JSONDecodeError as error:
                raise ValueError(f"cannot read the schema file {path}: {error}") from None
        try:
            return cls.from_dict(spec)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    @classmethod
    def from_domain(cls, domain: Domain) -> Schema:
        """The schema a Domain's attributes carry (what a served kernel tells its analysts): the inverse of
        :meth:`domain`; an attribute of plain codes is a :class:`Categorical` of its labels or :class:`Codes`."""
        return cls({a.name: _from_attribute(a) for a in domain.attributes})


def _column(name: str, spec) -> Column:
    if isinstance(spec, (Categorical, Integer, Numeric)):
        return spec
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence):
        raise ValueError(f"column {name!r}: give a list of labels, ek.Categorical(...), ek.Integer(low, high) or "
                         f"ek.Numeric(low, high, bins), not {spec!r}")
    return Categorical(tuple(spec))


def _from_spec(name: str, value) -> Column:
    if isinstance(value, list):
        return Categorical(tuple(value))
    if not isinstance(value, Mapping):
        raise ValueError(f"column {name!r}: give a list of labels or one of categorical/integer/numeric, not {value!r}")
    kinds = [k for k in ("categorical", "integer", "numeric") if k in value]
    allowed = {"categorical": {"categorical", "other"}, "integer": {"integer", "bins"}, "numeric": {"numeric", "bins"}}
    if len(kinds) != 1 or set(value) - allowed[kinds[0]]:
        raise ValueError(f"column {name!r}: give exactly one of categorical: [labels] (with other:), integer: [low, high] "
                         f"or numeric: [low, high] (with bins:), got {dict(value)}")
    kind = kinds[0]
    if kind == "categorical":
        return Categorical(tuple(value["categorical"]), value.get("other"))
    bounds = value[kind]
    if not (isinstance(bounds, list) and len(bounds) == 2):
        raise ValueError(f"column {name!r}: {kind} takes [low, high], got {bounds!r}")
    if kind == "integer":
        return Integer(bounds[0], bounds[1], value.get("bins"))
    if "bins" not in value:
        raise ValueError(f"column {name!r}: a numeric column needs bins: (how many equal bins to cut it into)")
    return Numeric(float(bounds[0]), float(bounds[1]), value["bins"])


def _from_attribute(attribute: Attribute) -> Column:
    if attribute.values == "labels":
        return Categorical(attribute.labels, attribute.other)
    if attribute.values == "numbers":
        low, high = attribute.bounds
        return Integer(int(low), int(high), attribute.size) if attribute.integer else Numeric(low, high,
                                                                                             attribute.size)
    if attribute.labels is not None:
        return Categorical(attribute.labels)
    return Codes(0, attribute.size - 1)
