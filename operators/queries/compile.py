"""A batch of queries compiled to one workload on the schema's domain, and to the linear queries each answer reads.

Each query becomes linear queries on the marginal of the columns it reads (QuerySmasher's form: attributes, and a
matrix over that marginal's cells), one Kronecker factor per column: a group-by column is an Identity (one row per
label or bin), a filtered column a 0/1 row (or the Identity's rows that pass), a summed column its bins' midpoints,
a quantile's column the prefix sums of its CDF. A count by some columns with no filter is their marginal, so
ResidualPlanner applies when every query is one. The workload is exactly what the answers read (``reads``), so
every answer's variance is one the strategy knows: a sum enters divided by its column's largest |midpoint| (it
weighs like a count; its answers are multiplied back), a quantile at p as ``P_k - p n`` for every bin k (its CDF's
prefix counts less p times the group's count), whose sign change is the quantile.

A filter joining several columns with ``|`` or ``~`` that does not factor column by column is one 0/1 matrix over
their joint cells (only QuerySmasher takes it; a pure-DP batch then measures the cells: see :mod:`.answer`).

>>> from ektelo_ng.operators.predicates import attr
>>> from .model import Count, Query, Sum
>>> from .schema import Integer, Schema
>>> schema = Schema(sex=["F", "M"], age=Integer(0, 9))
>>> plan = compile_batch([Query(Sum("age"), where=attr("age") >= 5, groupby=("sex",))], schema)
>>> part = plan.parts[0]
>>> read = part.read("sum")
>>> part.attributes, read.matrix.shape, read.scale
(('sex', 'age'), (2, 20), 9.0)
>>> (read.matrix.dense()[0] * read.scale).reshape(2, 10)[0].tolist()
[0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 6.0, 7.0, 8.0, 9.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...kernel.predicate import And, Between, Compare, In, Not, Or
from ..matrix import Dense, Identity, Kronecker, Matrix, Ones
from .model import Batch, Count, Mean, Quantile, Query, Sum
from .schema import Categorical, Codes, Schema


@dataclass(frozen=True)
class Read:
    """Linear queries over a query's marginal that its answers read: ``matrix`` (its rows times ``scale`` are
    the answers), and ``order``, the permutation putting its answers group by group (a quantile's CDF rows within
    each group)."""

    key: str
    matrix: Matrix
    order: np.ndarray
    scale: float = 1.0


@dataclass
class Part:
    """One query compiled: the marginal it reads (``attributes``, in the schema's order), its groups' labels
    (``keys``: one tuple per row, in ``query.groupby`` order, sorted by it), the linear queries its answers read (``reads``:
    ``count``, ``sum``, or ``cdf <p>`` per probability), which are also what it adds to the batch's workload,
    and what its answers account for (``notes``)."""

    query: Query
    name: str
    attributes: tuple[str, ...]
    keys: list[tuple[str, ...]]
    reads: list[Read] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    edges: np.ndarray | None = None  # a quantile's column: its bins' edges (and whether they are integers)
    integer: bool = False

    def read(self, key: str) -> Read:
        return next(r for r in self.reads if r.key == key)


@dataclass
class Compiled:
    """The batch compiled over ``schema`` (the columns the batch reads, in the table's order)."""

    schema: Schema
    parts: list[Part]

    @property
    def items(self) -> list[tuple[tuple[str, ...], Matrix]]:
        """The whole batch as QuerySmasher's workload: ``[(attributes, matrix)]``, every read of every part."""
        return [(part.attributes, read.matrix) for part in self.parts for read in part.reads]

    @property
    def weights(self) -> list[float]:
        """One weight per item: its query's."""
        return [part.query.weight for part in self.parts for _ in part.reads]

    def index(self, part: Part, key: str) -> int:
        """The position of one part's read among :attr:`items`."""
        position = 0
        for other in self.parts:
            for read in other.reads:
                if other is part and read.key == key:
                    return position
                position += 1
        raise KeyError(key)


def compile_batch(queries: Batch | Sequence[Query], schema: Schema) -> Compiled:
    """Compile ``queries`` over ``schema``, refusing (before anything is measured) unknown columns, labels that
    are not the column's, aggregates of categorical columns and repeated result names."""
    queries = queries.queries if isinstance(queries, Batch) else tuple(queries)
    if not queries:
        raise ValueError("a batch needs at least one query")
    used = {c for q in queries for c in q.columns}
    for column in sorted(used):
        schema[column]  # refuses an unknown column, naming the schema's
    projected = Schema({name: c for name, c in schema.columns.items() if name in used} or
                       {schema.names[0]: schema[schema.names[0]]})
    parts = [_compile(query, projected) for query in queries]
    names = [part.name for part in parts]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"two queries have the same name {repeated}: give each a distinct .name(...)")
    return Compiled(projected, parts)


def default_name(query: Query) -> str:
    """A result's name from its query: ``count``, ``sum(income)``, ``quantile(age)``... ``by sex, region``."""
    aggregate = query.aggregate
    what = "count" if isinstance(aggregate, Count) else f"{type(aggregate).__name__.lower()}({aggregate.column})"
    return what + (f" by {', '.join(query.groupby)}" if query.groupby else "") + (" where ..." if query.where else "")


def _compile(query: Query, schema: Schema) -> Part:
    aggregate = query.aggregate
    target = getattr(aggregate, "column", None)
    if target is not None and isinstance(schema[target], Categorical):
        raise ValueError(f"{type(aggregate).__name__.lower()}({target!r}): {target!r} is categorical; sums, means "
                         "and quantiles need an ek.Integer or ek.Numeric column")
    if isinstance(aggregate, Quantile) and target in query.groupby:
        raise ValueError(f"quantile of {target!r} grouped by {target!r}: each group holds one bin; drop it from groupby")
    attributes = tuple(name for name in schema.names if name in query.columns)
    notes = [note for name in attributes for note in _column_notes(schema, name, target)]
    mask, filter_notes = _filter(query.where, schema, attributes)
    notes += filter_notes
    factored = _factor(mask, [schema[a] for a in attributes])
    group_rows = _group_rows(query.groupby, attributes, mask, schema)
    keys = [tuple(schema[g].keys[code] for g, code in zip(query.groupby, row)) for row in group_rows["codes"]]
    if not keys:
        raise ValueError(f"query {query.name or default_name(query)!r}: no group passes its filter")

    def matrix(column_factor: np.ndarray | None) -> tuple[Matrix, np.ndarray]:
        """The group rows x (optionally) the target column's rows, over the marginal, filtered."""
        return _matrix(attributes, schema, query.groupby, group_rows, factored, mask, target, column_factor)

    part = Part(query, query.name or default_name(query), attributes, keys, notes=notes)
    if isinstance(aggregate, (Count, Mean)):
        part.reads.append(Read("count", *matrix(None)))
    if isinstance(aggregate, (Sum, Mean)):
        midpoints = schema[target].midpoints()
        scale = float(np.max(np.abs(midpoints))) or 1.0  # the workload's sum weighs like a count
        part.reads.append(Read("sum", *matrix(midpoints[None, :] / scale), scale))
    if isinstance(aggregate, Quantile):
        size = schema[target].size
        prefix = np.tril(np.ones((size, size)))
        for p in aggregate.probabilities:
            part.reads.append(Read(f"cdf {p!r}", *matrix(prefix - p * np.ones((size, size)))))
        part.edges, part.integer = schema[target].edges(), schema[target].integer
    return _in_groupby_order(part, group_rows["codes"])


def _in_groupby_order(part: Part, codes: list[tuple[int, ...]]) -> Part:
    """The rows sorted by the group-by columns in the order the query names them (the matrices keep the schema's)."""
    order = sorted(range(len(codes)), key=codes.__getitem__)
    part.keys = [part.keys[i] for i in order]
    part.reads = [Read(r.key, r.matrix, r.order.reshape(len(codes), -1)[order].ravel(), r.scale) for r in part.reads]
    return part


def _column_notes(schema: Schema, name: str, target: str | None) -> list[str]:
    """What a release reading this column states about it: clamping (always, as a rule: never whether it applied)
    and, for the aggregated column, its binning."""
    column = schema[name]
    if isinstance(column, Categorical):
        return [] if column.other is None else [f"{name}: values outside its labels count as {column.other!r}"]
    clamping = f"{name}: values outside [{column.low:g}, {column.high:g}] are clamped to the bounds"
    notes = [] if isinstance(column, Codes) else [clamping]
    binning = column.binning_note()
    return notes + ([f"{name}: {binning}"] if binning and name == target else [])


# ---- filters ------------------------------------------------------------------------------------------------
def _filter(predicate, schema: Schema, attributes: tuple[str, ...]) -> tuple[np.ndarray | None, list[str]]:
    """The filter as a 0/1 array over the marginal's cells (axes in ``attributes`` order), or None for no filter,
    and notes on thresholds that fall inside a bin (whole bins pass or fail by their midpoint)."""
    if predicate is None:
        return None, []
    shape = tuple(schema[a].size for a in attributes)
    notes: list[str] = []
    mask = _evaluate(predicate, schema, attributes, shape, notes)
    return mask, sorted(set(notes))


def _evaluate(node, schema: Schema, attributes, shape, notes: list[str]) -> np.ndarray:
    if isinstance(node, (And, Or)):
        masks = [_evaluate(term, schema, attributes, shape, notes) for term in node.terms]
        return np.logical_and.reduce(masks) if isinstance(node, And) else np.logical_or.reduce(masks)
    if isinstance(node, Not):
        return ~_evaluate(node.term, schema, attributes, shape, notes)
    axis = attributes.index(node.attribute)
    passes = _leaf(node, schema[node.attribute], notes)
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.broadcast_to(passes.reshape(view), shape)


_OPS = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal}


def _leaf(node, column, notes: list[str]) -> np.ndarray:
    """Which of the column's codes pass one comparison, range or set."""
    name = node.attribute
    if isinstance(column, Categorical):
        if isinstance(node, In):
            return np.isin(np.arange(column.size), [column.code_of(v) for v in node.values])
        if isinstance(node, Compare) and node.op in ("==", "!="):
            codes = np.arange(column.size) == column.code_of(node.value)
            return codes if node.op == "==" else ~codes
        raise ValueError(f"{name!r} is categorical: compare it with ==, != or isin([...]) (its labels have no order)")
    values = [node.value] if isinstance(node, Compare) else [node.low, node.high] if isinstance(node, Between) \
        else list(node.values)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name!r} holds numbers: compare it with a number, not {value!r}")
    if isinstance(node, Between):
        return _leaf(Compare(attribute=name, op=">=", value=node.low), column, notes) & \
            _leaf(Compare(attribute=name, op="<=", value=node.high), column, notes)
    if isinstance(node, In):
        passes = np.zeros(column.size, dtype=bool)
        for value in node.values:
            passes |= _leaf(Compare(attribute=name, op="==", value=value), column, notes)
        return passes
    codes, edges = np.arange(column.size), column.edges()
    passes = _OPS[node.op](codes, column.bin_of(node.value))  # the kernel's rule: the bin holding the value equals it
    first = edges[:-1]  # each bin's smallest value, and its largest (the last integer, or just below the next edge)
    last = edges[1:] - 1 if column.integer else np.nextafter(edges[1:], -np.inf)
    whole = (_OPS[node.op](first, node.value) == passes) & (_OPS[node.op](last, node.value) == passes)
    if node.op in ("==", "!="):  # a bin other than the value's holds no value equal to it
        exact = column.integer and column.width == 1 and float(node.value).is_integer()
        whole = (codes != column.bin_of(node.value)) | exact
    if not np.all(whole):
        notes.append(f"{name} {node.op} {node.value:g}: the value falls inside a bin, which passes or fails whole")
    return passes


def _factor(mask: np.ndarray | None, columns) -> list[np.ndarray] | None:
    """The filter as one 0/1 vector per column when it is their outer product (every conjunction of per-column
    conditions is), else None."""
    if mask is None:
        return [np.ones(c.size, dtype=bool) for c in columns]
    if not mask.any():
        return [np.zeros(c.size, dtype=bool) for c in columns]
    vectors = [mask.any(axis=tuple(j for j in range(mask.ndim) if j != i)) for i in range(mask.ndim)]
    outer = vectors[0]
    for vector in vectors[1:]:
        outer = np.multiply.outer(outer, vector)
    return vectors if np.array_equal(outer.reshape(mask.shape), mask) else None


def _group_rows(groupby, attributes, mask, schema) -> dict:
    """The groups' codes (one tuple per result row, in groupby order), in the order the matrix rows come: the
    schema's order of the group-by columns, C order, keeping the groups any row of which can pass the filter."""
    ordered = [a for a in attributes if a in groupby]
    cells = list(np.ndindex(*[schema[a].size for a in ordered])) if ordered else [()]
    if mask is not None:
        axes = tuple(j for j, a in enumerate(attributes) if a not in groupby)
        passing = mask.any(axis=axes) if axes else mask
        cells = [cell for cell in cells if passing[cell]]
    return {"ordered": ordered, "cells": cells,
            "codes": [tuple(cell[ordered.index(g)] for g in groupby) for cell in cells]}


def _matrix(attributes, schema, groupby, group_rows, factored, mask, target, column_factor) -> tuple[Matrix, np.ndarray]:
    """Rows: the groups (x the target's rows, ``column_factor``: a 1 x n weight row or an n x n matrix); columns:
    the marginal's cells. A Kronecker product when the filter factors column by column, else one dense matrix;
    with the permutation that puts its answers group by group (the target's rows within each group)."""
    target_rows = 1 if column_factor is None else np.asarray(column_factor).shape[0]
    if not attributes:  # the total: the one cell of the marginal on no column
        return Ones(1, 1), np.arange(1)
    if factored is None:
        return Dense(_dense(attributes, schema, group_rows, mask, target, column_factor)), \
            np.arange(len(group_rows["cells"]) * target_rows)
    factors, axes = [], []
    for a, keep in zip(attributes, factored):
        n = schema[a].size
        if a == target:
            block = np.asarray(column_factor if column_factor is not None else np.ones((1, n))) * keep[None, :]
            factors.append(Dense(np.diag(block.ravel())[keep]) if a in groupby else Dense(block))
        elif keep.all():
            factors.append(Identity(n) if a in groupby else Ones(1, n))
        else:
            factors.append(Dense(np.eye(n)[keep]) if a in groupby else Dense(keep[None, :].astype(float)))
        axes.append("target" if a == target and a not in groupby else a)
    matrix = factors[0] if len(factors) == 1 else Kronecker(factors)
    sizes = [f.shape[0] for f in factors]
    order = np.arange(matrix.shape[0]).reshape(sizes)
    if "target" in axes:  # the target's rows last: group-major
        order = np.moveaxis(order, axes.index("target"), -1)
    return matrix, order.ravel()


def _dense(attributes, schema, group_rows, mask, target, column_factor) -> np.ndarray:
    """The rows one by one over the marginal's cells: each group's cells, filtered, times the target's rows."""
    shape = [schema[a].size for a in attributes]
    weight = np.ones(shape) if mask is None else mask.astype(float)
    factor = None if column_factor is None else np.asarray(column_factor, dtype=float)
    view = [1] * len(shape)
    if target is not None:
        view[attributes.index(target)] = shape[attributes.index(target)]
    rows = []
    for cell in group_rows["cells"]:
        chosen = weight.copy()
        for a, code in zip(group_rows["ordered"], cell):
            axis = attributes.index(a)
            keep = np.zeros(shape[axis])
            keep[code] = 1.0
            chosen *= keep.reshape([shape[axis] if j == axis else 1 for j in range(len(shape))])
        rows += [chosen.ravel()] if factor is None else [(chosen * r.reshape(view)).ravel() for r in factor]
    return np.array(rows)
