"""The typed predicate language of ``where``: comparisons, ranges, sets, and/or/not over attributes.

Predicates are data (pydantic models), never strings, validated against the source's domain and evaluated with
numpy on integer code columns; values are codes or labels. Clients build them with ``operators.predicates.attr``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .domain import Domain

Value = Union[int, str]
NODES = 64
"""Most nodes a source's predicate may have (its own and its parents' ``where``s): each costs a pass over the rows;
an ``In`` counts one more for every 1024 values."""
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
    values: list[Value] = Field(min_length=1, max_length=1 << 16, fail_fast=True)


class And(_Node):
    kind: Literal["and"] = "and"
    terms: list[Predicate] = Field(min_length=1, max_length=NODES, fail_fast=True)


class Or(_Node):
    kind: Literal["or"] = "or"
    terms: list[Predicate] = Field(min_length=1, max_length=NODES, fail_fast=True)


class Not(_Node):
    kind: Literal["not"] = "not"
    term: Predicate


Predicate = Annotated[Union[Compare, Between, In, And, Or, Not], Field(discriminator="kind")]
for _model in (And, Or, Not):
    _model.model_rebuild()


def leaf_codes(leaf, domain: Domain) -> list[int]:
    """The integer codes a leaf compares with: labels looked up, integers clipped to [-1, size] (outside the domain,
    they compare with every code as -1 or size do; and they stay int64, which ``np.isin`` scans once); on a
    ``"numbers"`` attribute, the bins the numbers fall in by the rows' own rule (whole bins pass or fail), and -1 or
    size for numbers below or above the bounds (no clamped row equals them)."""
    values = [leaf.value] if isinstance(leaf, Compare) else [leaf.low, leaf.high] if isinstance(leaf, Between) else None
    attribute = domain[leaf.attribute]
    if attribute.values == "numbers":  # raw numbers compare by the bins they fall in, outside the bounds as -1 or size
        numbers = np.array([_number(v, attribute.name) for v in values or leaf.values], dtype=np.float64)
        outside = np.where(numbers < attribute.bounds[0], -1, attribute.size)
        return np.where(
            (numbers < attribute.bounds[0]) | (numbers > attribute.bounds[1]), outside, attribute.bin_codes(numbers)
        ).tolist()
    return [
        attribute.code(v) if isinstance(v, str) else min(max(int(v), -1), attribute.size) for v in values or leaf.values
    ]


def _number(value: Value, attribute: str) -> float:
    """A predicate's value on a ``"numbers"`` attribute as a float: an integer past the float range as an infinity
    (beyond either bound, so no bin); text is refused, since such a column holds no labels."""
    if isinstance(value, str):
        raise ValueError(f"attribute {attribute!r} holds numbers: compare it with a number, not {value!r}")
    return float(value) if abs(value) < 2**1023 else math.inf if value > 0 else -math.inf


def validate_predicate(predicate, domain: Domain) -> int:
    """The number of nodes; checks every attribute exists in ``domain`` and every label is one of its labels."""
    if isinstance(predicate, (And, Or)):
        return 1 + sum(validate_predicate(term, domain) for term in predicate.terms)
    if isinstance(predicate, Not):
        return 1 + validate_predicate(predicate.term, domain)
    domain.index(predicate.attribute)
    leaf_codes(predicate, domain)
    return 1 + len(predicate.values) // 1024 if isinstance(predicate, In) else 1


def evaluate(predicate, columns: Mapping[str, np.ndarray], domain: Domain) -> np.ndarray:
    """Boolean mask of the rows satisfying ``predicate`` (columns hold integer codes)."""
    if isinstance(predicate, (And, Or)):  # one mask at a time, combined in place
        mask = evaluate(predicate.terms[0], columns, domain)
        for term in predicate.terms[1:]:
            (np.logical_and if isinstance(predicate, And) else np.logical_or)(
                mask, evaluate(term, columns, domain), out=mask
            )
        return mask
    if isinstance(predicate, Not):
        return ~evaluate(predicate.term, columns, domain)
    column, codes = columns[predicate.attribute], leaf_codes(predicate, domain)
    if isinstance(predicate, Compare):
        return _OPS[predicate.op](column, codes[0])
    if isinstance(predicate, Between):
        return (column >= codes[0]) & (column <= codes[1])
    return np.isin(column, np.asarray(codes, dtype=np.int64))
