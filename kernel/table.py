"""Private tables behind a counting-only backend interface, and validated loading into numpy.

A backend only answers histograms of some attributes over the rows satisfying a predicate, never rows, so
any engine can stand behind it. Loading validates every value against the domain and loads nothing on error.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

from .domain import Domain
from .predicate import evaluate


class TableBackend(ABC):
    """Counting access to a private table over a known domain."""

    @property
    @abstractmethod
    def domain(self) -> Domain: ...

    @abstractmethod
    def histogram(self, attributes: Sequence[int], predicate=None) -> np.ndarray:
        """int64 counts of the rows satisfying ``predicate``, shaped by the sizes of ``attributes`` (domain
        order); no attributes give a 0-d array, the count of rows."""

    def count(self, predicate=None) -> int:
        return int(self.histogram((), predicate))


class NumpyTable(TableBackend):
    """Integer code columns in memory, each in the smallest unsigned dtype holding its codes (histograms read less)."""

    #: Unfiltered histograms up to this many cells are kept: the columns never change, and a table
    #: shared by many kernels (a benchmark replay) is otherwise rescanned for every vectorize.
    CACHED_CELLS = 1 << 16

    def __init__(self, domain: Domain, columns: Mapping[str, np.ndarray]):
        self._domain = domain
        self._columns = {
            name: np.asarray(columns[name]).astype(np.min_scalar_type(max(size - 1, 0)))
            for name, size in zip(domain.names, domain.sizes)
        }
        self._cache: dict[tuple[int, ...], np.ndarray] = {}

    @property
    def domain(self) -> Domain:
        return self._domain

    def histogram(self, attributes: Sequence[int], predicate=None) -> np.ndarray:
        attributes = sorted(int(a) for a in attributes)
        key = tuple(attributes)
        if predicate is None and key in self._cache:
            return self._cache[key].copy()
        counts = self._count(attributes, predicate)
        if predicate is None and counts.size <= self.CACHED_CELLS and len(self._cache) < 64:
            self._cache[key] = counts.copy()
        return counts

    def _count(self, attributes: list[int], predicate) -> np.ndarray:
        names = [self._domain.names[a] for a in attributes]
        shape = tuple(self._domain.sizes[a] for a in attributes)
        mask = None if predicate is None else evaluate(predicate, self._columns, self._domain)
        if not names:
            rows = len(next(iter(self._columns.values()))) if mask is None else int(mask.sum())
            return np.array(rows, dtype=np.int64)
        selected = [self._columns[n] if mask is None else self._columns[n][mask] for n in names]
        # Row-major cell index, accumulated in place (Horner) in the narrowest type that holds every cell
        # number (each partial index is below the product of the sizes so far): less memory to stream.
        cells = math.prod(shape)
        flat = selected[0].astype(np.min_scalar_type(cells - 1) if cells <= 1 << 32 else np.intp)
        for column, size in zip(selected[1:], shape[1:]):
            flat *= size
            flat += column
        return np.bincount(flat, minlength=math.prod(shape)).reshape(shape)


def load_table(table: Mapping[str, Sequence], domain: Domain) -> NumpyTable:
    """Validate columns (name -> codes, or labels of labelled attributes) into codes; nothing is loaded on error.
    Reading files and data frames into columns is the front door's job (``ektelo_ng.session.read_columns``)."""
    if not isinstance(table, Mapping):
        raise TypeError(f"the kernel loads a mapping of column name -> values, got {type(table).__name__}")
    columns = {str(k): np.asarray(v) for k, v in table.items()}
    check_columns(list(columns), domain)
    lengths = {n: len(columns[n]) for n in domain.names}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"columns have different lengths: {lengths}")
    return NumpyTable(domain, {n: _codes(n, columns[n], domain) for n in domain.names})


def check_columns(columns: Sequence[str], domain: Domain) -> None:
    """Refuse a table whose column names are not exactly the domain's attributes."""
    missing = [n for n in domain.names if n not in columns]
    extra = [n for n in columns if n not in domain.names]
    if missing or extra:
        raise ValueError(
            f"table columns do not match the domain: missing {missing}, unknown {extra}; "
            f"the domain has {list(domain.names)}"
        )


def _codes(name: str, values: np.ndarray, domain: Domain) -> np.ndarray:
    attribute = domain[name]
    values = np.asarray(values)
    if attribute.values == "labels":
        return _label_codes(attribute, values)
    if values.dtype.kind in "OUS":
        values = np.array([v.strip() if isinstance(v, str) else v for v in values.ravel()], dtype=object)
        if attribute.labels is not None:
            lookup = {label: code for code, label in enumerate(attribute.labels)}
            unknown = sorted({str(v) for v in values if str(v) not in lookup})
            if unknown:
                raise ValueError(
                    f"column {name!r}: {len(unknown)} unknown label(s) such as {unknown[:5]}; "
                    f"allowed: {list(attribute.labels)}"
                )
            return np.array([lookup[str(v)] for v in values], dtype=np.int64)
        try:
            values = np.array([float(v) if v not in ("", None) else np.nan for v in values], dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"column {name!r} holds text but attribute {name!r} has no labels") from None
    if values.dtype.kind == "b" or values.dtype.kind not in "iuf":
        raise ValueError(f"column {name!r} must hold integer codes, got {values.dtype}")
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        raise ValueError(f"column {name!r} has {int(np.sum(~np.isfinite(values)))} missing or non-finite values")
    if attribute.values == "numbers":
        return attribute.bin_codes(values)
    if values.dtype.kind == "f":
        if not np.all(values == np.round(values)):
            raise ValueError(
                f"column {name!r} has non-integer values such as {values[values != np.round(values)][:5].tolist()}"
            )
    outside = (values < 0) | (values >= attribute.size)  # checked before the cast, so huge values cannot wrap
    if outside.any():
        raise ValueError(
            f"column {name!r}: {int(outside.sum())} row(s) outside 0..{attribute.size - 1}, "
            f"e.g. {sorted(set(values[outside].tolist()))[:5]}"
        )
    return values.astype(np.int64)


def _label_codes(attribute, values: np.ndarray) -> np.ndarray:
    """Codes of a ``"labels"`` column, each distinct value looked up once; refused naming values with no label."""
    values = values.tolist()  # once: a NaN is found again only as the same object
    found = {value: attribute.label_code(value) for value in set(values)}
    unknown = sorted(str(value) for value, code in found.items() if code < 0)
    if unknown:
        raise ValueError(
            f"column {attribute.name!r}: {len(unknown)} value(s) with no label, such as {unknown[:5]}; "
            f"the labels are {list(attribute.labels)} (a schema may name an 'other' label for the rest)"
        )
    return np.array([found[value] for value in values], dtype=np.int64)
