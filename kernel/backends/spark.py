"""SparkTable: a private table read by Spark (a DataFrame, Parquet/CSV files or a catalog table), local or on a cluster.

Each histogram is one ``filter(predicate).groupBy(codes).count()`` of Column expressions (quoted names, ``lit``
values: no SQL text is assembled). Validation is one aggregation counting rows outside the domain.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import numpy as np

from . import check_outside, fill, require, source_format
from ..domain import Attribute, Domain, _number
from ..predicate import _OPS, And, Between, Compare, In, Not, Or, leaf_codes
from ..table import TableBackend, check_columns


def _code_column(attribute: Attribute, dtype, F, T):
    """The integer code of a column as a Column: NULL where the value is not an integer (or not a label), by the
    attribute's rule for its values (``Attribute.values``: codes, labels or binned numbers)."""
    column = F.col("`" + attribute.name.replace("`", "``") + "`")
    text = isinstance(dtype, T.StringType)
    if isinstance(dtype, T.IntegralType) and attribute.values == "codes":
        return column
    if attribute.values == "labels":  # Attribute.label_code: the first label the value reads as, else other
        raw = F.trim(column) if text else F.lit(None).cast("string")
        number = _as_double(raw) if text else column.cast("double")
        code = F.lit(None if attribute.other is None else attribute.labels.index(attribute.other)).cast("long")
        for c, label in reversed(list(enumerate(attribute.labels))):
            found = F.coalesce((raw == F.lit(label)) | (number == F.lit(_number(label)).cast("double")), F.lit(False))
            code = F.when(found, F.lit(c)).otherwise(code)
        return code
    if text and attribute.labels is not None:
        code = F  # F.when(...) starts the CASE, Column.when(...) adds its branches
        for c, label in enumerate(attribute.labels):
            code = code.when(F.trim(column) == F.lit(label), F.lit(c))
        return code
    if text:
        value = _as_double(F.trim(column))
    elif isinstance(dtype, (T.FractionalType, T.IntegralType)):
        value = column.cast("double")
    else:
        raise ValueError(f"column {attribute.name!r} must hold integer codes, got {dtype.simpleString()}")
    if attribute.values == "numbers":  # Attribute.bin_codes, in the same order of operations
        (low, high), size = attribute.bounds, attribute.size
        clamped = F.greatest(F.least(value, F.lit(high)), F.lit(low))
        binned = F.least(F.floor((clamped - F.lit(low)) * F.lit(size) / F.lit(attribute.span)), F.lit(size - 1))
        return F.when(F.abs(value) < F.lit(float("inf")), binned.cast("long"))  # NULL, NaN and infinities: NULL
    return F.when(value.between(F.lit(0), F.lit(attribute.size - 1)) & (value == F.floor(value)), value.cast("long"))


def _as_double(text):
    """A text Column read as a double, NULL where it is not a number (Spark 3.5 has no try_cast: cast)."""
    return text.try_cast("double") if hasattr(type(text), "try_cast") else text.cast("double")


class SparkTable(TableBackend):
    """``source``: a DataFrame, a Parquet/CSV path, directory or URI, or a catalog table; ``spark``: the SparkSession
    (default: the active one, or one on ``master``). The data must not change while served (validated once, here)."""

    def __init__(self, domain: Domain, source, *, spark=None, master: str | None = None):
        pyspark_sql = require("pyspark.sql", "spark")
        F, T = pyspark_sql.functions, pyspark_sql.types
        if isinstance(source, pyspark_sql.DataFrame):
            frame = source
        else:
            builder = pyspark_sql.SparkSession.builder.appName("ektelo-ng kernel")
            spark = spark or (builder.master(master) if master else builder).getOrCreate()
            kind = source_format(source)
            frame = (
                spark.table(str(source))
                if kind is None
                else spark.read.csv(str(source), header=True, escape='"')
                if kind == "csv"
                else spark.read.parquet(str(source))
            )
        check_columns(frame.columns, domain)
        self._domain, self._frame, self._F = domain, frame, F
        types = {field.name: field.dataType for field in frame.schema.fields}
        self._codes = {a.name: _code_column(a, types[a.name], F, T) for a in domain.attributes}
        outside = [
            F.sum(F.when(self._codes[a.name].between(F.lit(0), F.lit(a.size - 1)), F.lit(0)).otherwise(F.lit(1)))
            for a in domain.attributes
        ]
        counts = frame.agg(*outside).collect()[0]
        check_outside(domain, {name: counts[i] or 0 for i, name in enumerate(domain.names)})

    @property
    def domain(self) -> Domain:
        return self._domain

    def histogram(self, attributes: Sequence[int], predicate=None) -> np.ndarray:
        attributes = sorted(int(a) for a in attributes)
        frame = self._frame if predicate is None else self._frame.filter(self._where(predicate))
        shape = tuple(self._domain.sizes[a] for a in attributes)
        if not attributes:
            return fill(shape, [[frame.count()]])
        groups = [self._codes[self._domain.names[a]].alias(f"g{i}") for i, a in enumerate(attributes)]
        rows = frame.groupBy(*groups).count().collect()
        return fill(shape, [tuple(row) for row in rows])

    def _where(self, node):
        if isinstance(node, (And, Or)):
            combine = operator.and_ if isinstance(node, And) else operator.or_
            return functools.reduce(combine, map(self._where, node.terms))
        if isinstance(node, Not):
            return ~self._where(node.term)
        column = self._codes[self._domain[node.attribute].name]
        codes = [self._F.lit(code) for code in leaf_codes(node, self._domain)]
        if isinstance(node, Compare):
            return _OPS[node.op](column, codes[0])
        if isinstance(node, Between):
            return column.between(*codes)
        if isinstance(node, In):
            return column.isin(*codes)
        raise TypeError(f"unknown predicate node {type(node).__name__}")
