"""The typed predicate language of ``where``: comparisons, ranges, sets, and/or/not over attributes.

Predicates are data (pydantic models), never strings: the kernel validates them against the
source's domain and evaluates them with numpy on integer code columns. Values may be codes
(integers) or, for labelled attributes, labels. Clients build them with ``operators.predicates.attr``.

>>> p = Compare(attribute="age", op=">=", value=30) & ~In(attribute="sex", values=["M"])
>>> p.kind, [t.kind for t in p.terms]
('and', ['compare', 'not'])
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from kernel.domain import Domain

Value = Union[int, str]
_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


class _Node(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __and__(self, other: _Node) -> And:
        return And(terms=[self, other])

    def __or__(self, other: _Node) -> Or:
        return Or(terms=[self, other])

    def __invert__(self) -> Not:
        return Not(term=self)


class Compare(_Node):
    kind: Literal["compare"] = "compare"
    attribute: str
    op: Literal["==", "!=", "<", "<=", ">", ">="]
    value: Value


class Between(_Node):
    """low <= attribute <= high."""

    kind: Literal["between"] = "between"
    attribute: str
    low: Value
    high: Value


class In(_Node):
    kind: Literal["in"] = "in"
    attribute: str
    values: list[Value] = Field(min_length=1)


class And(_Node):
    kind: Literal["and"] = "and"
    terms: list[Predicate] = Field(min_length=1)


class Or(_Node):
    kind: Literal["or"] = "or"
    terms: list[Predicate] = Field(min_length=1)


class Not(_Node):
    kind: Literal["not"] = "not"
    term: Predicate


Predicate = Annotated[Union[Compare, Between, In, And, Or, Not], Field(discriminator="kind")]
for _model in (And, Or, Not):
    _model.model_rebuild()
PredicateAdapter: TypeAdapter = TypeAdapter(Predicate)


def _leaves(predicate) -> list:
    if isinstance(predicate, (And, Or)):
        return [leaf for term in predicate.terms for leaf in _leaves(term)]
    if isinstance(predicate, Not):
        return _leaves(predicate.term)
    return [predicate]


def _code(domain: Domain, attribute: str, value: Value) -> int:
    """An integer code; labels are looked up, integers may lie outside the domain (comparisons still work)."""
    if isinstance(value, str):
        return domain[attribute].code(value)
    return int(value)


def validate_predicate(predicate, domain: Domain) -> None:
    """Every attribute exists in ``domain`` and every label is one of its attribute's labels."""
    for leaf in _leaves(predicate):
        domain.index(leaf.attribute)
        values = leaf.values if isinstance(leaf, In) else [leaf.low, leaf.high] if isinstance(leaf, Between) else [leaf.value]
        for value in values:
            _code(domain, leaf.attribute, value)


def evaluate(predicate, columns: Mapping[str, np.ndarray], domain: Domain) -> np.ndarray:
    """Boolean mask of the rows satisfying ``predicate`` (columns hold integer codes)."""
    if isinstance(predicate, And):
        return np.logical_and.reduce([evaluate(t, columns, domain) for t in predicate.terms])
    if isinstance(predicate, Or):
        return np.logical_or.reduce([evaluate(t, columns, domain) for t in predicate.terms])
    if isinstance(predicate, Not):
        return ~evaluate(predicate.term, columns, domain)
    column = columns[predicate.attribute]
    if isinstance(predicate, Compare):
        return _OPS[predicate.op](column, _code(domain, predicate.attribute, predicate.value))
    if isinstance(predicate, Between):
        low, high = (_code(domain, predicate.attribute, v) for v in (predicate.low, predicate.high))
        return (column >= low) & (column <= high)
    return np.isin(column, [_code(domain, predicate.attribute, v) for v in predicate.values])
