"""The query model: what a user asks, as frozen values that both front ends (the builder and SQL) build and the
compiler reads. A query is one aggregate over the rows that satisfy a filter, per group of some columns' labels.

Filters are the kernel's typed predicates (``kernel.predicate``: comparisons, ranges, sets, and/or/not over
labels or codes), so nothing here is a string to evaluate.

>>> from ektelo_ng.operators.predicates import attr
>>> q = Query(Mean("income"), where=attr("age") >= 30, groupby=("sex",))
>>> q.columns
('sex', 'age', 'income')
>>> Query(Count(), groupby=("sex", "sex"))
Traceback (most recent call last):
...
ValueError: groupby repeats a column: ('sex', 'sex')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Union

from ...kernel.predicate import And, Between, Compare, In, Not, Or

Predicate = Union[Compare, Between, In, And, Or, Not]


@dataclass(frozen=True)
class Count:
    """The number of rows (per group)."""


@dataclass(frozen=True)
class Sum:
    """The sum of a bounded numeric or integer column (per group)."""

    column: str


@dataclass(frozen=True)
class Mean:
    """The mean of a bounded column (per group): its sum over its count."""

    column: str


@dataclass(frozen=True)
class Quantile:
    """Quantiles of a bounded column (per group), at probabilities in [0, 1] (0.5: the median)."""

    column: str
    probabilities: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "probabilities", tuple(float(p) for p in self.probabilities))
        if not self.probabilities:
            raise ValueError(f"a quantile of {self.column!r} needs at least one probability")
        bad = [p for p in self.probabilities if not (math.isfinite(p) and 0 <= p <= 1)]
        if bad:
            raise ValueError(f"quantile probabilities must lie in [0, 1], got {bad}")


Aggregate = Union[Count, Sum, Mean, Quantile]


@dataclass(frozen=True)
class Query:
    """One aggregate of the rows satisfying ``where``, per combination of the ``groupby`` columns' labels.

    ``weight`` says how much this query's accuracy matters against the batch's others (the strategy is chosen
    for the weighted batch); ``name`` labels its result (default: built from the query)."""

    aggregate: Aggregate
    where: Predicate | None = None
    groupby: tuple[str, ...] = ()
    weight: float = 1.0
    name: str | None = None
    table: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "groupby", tuple(self.groupby))
        if len(set(self.groupby)) != len(self.groupby):
            raise ValueError(f"groupby repeats a column: {self.groupby}")
        if isinstance(self.weight, bool) or not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"a query's weight must be a positive finite number, got {self.weight!r}")

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the query reads: group-by columns, then filtered ones, then the aggregated one."""
        seen = list(self.groupby)
        for column in (*_predicate_columns(self.where), getattr(self.aggregate, "column", None)):
            if column is not None and column not in seen:
                seen.append(column)
        return tuple(seen)


@dataclass(frozen=True)
class Batch:
    """Queries answered together from one measurement under one budget."""

    queries: tuple[Query, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "queries", tuple(self.queries))
        if not self.queries:
            raise ValueError("a batch needs at least one query")


def _predicate_columns(predicate: Predicate | None) -> list[str]:
    """The columns a predicate reads, in the order they first appear."""
    if predicate is None:
        return []
    if isinstance(predicate, (And, Or)):
        return [c for term in predicate.terms for c in _predicate_columns(term)]
    if isinstance(predicate, Not):
        return _predicate_columns(predicate.term)
    return [predicate.attribute]
