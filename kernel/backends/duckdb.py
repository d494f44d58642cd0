"""DuckDBTable: a private table read in-process by DuckDB (Parquet or CSV files, a DuckDB table or view).

Each histogram is one ``SELECT codes, count(*) ... WHERE predicate GROUP BY ALL``: names from the Domain are
quoted identifiers, every value a bound parameter. Validation is one scan counting rows outside the domain.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from . import check_outside, fill, require, source_format
from ..domain import Attribute, Domain, _number
from ..predicate import And, Between, Compare, In, Not, Or, leaf_codes
from ..table import TableBackend, check_columns

_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
_OPS = {"==": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
Sql = tuple[str, list]


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _code_sql(attribute: Attribute, kind: str) -> Sql:
    """SQL for the integer code of a column: NULL where the value is not an integer (or not a label), by the
    attribute's rule for its values (``Attribute.values``: codes, labels or binned numbers)."""
    column = quote(attribute.name)
    if kind in _INTEGERS and attribute.values == "codes":
        return column, []
    if attribute.values == "labels":  # Attribute.label_code: the first label the value reads as, else other
        text = f"trim({column})" if kind == "VARCHAR" else "NULL"
        number = f"TRY_CAST({text} AS DOUBLE)" if kind == "VARCHAR" else f"CAST({column} AS DOUBLE)"
        cases = "".join(f"WHEN coalesce({text} = ? OR {number} = ?, false) THEN ? " for _ in attribute.labels)
        other = None if attribute.other is None else attribute.labels.index(attribute.other)
        params = [v for c, label in enumerate(attribute.labels) for v in (label, _number(label), c)]
        return f"(CASE {cases}ELSE CAST(? AS BIGINT) END)", params + [other]
    if kind == "VARCHAR" and attribute.labels is not None:
        cases = " ".join("WHEN ? THEN ?" for _ in attribute.labels)
        return f"(CASE trim({column}) {cases} END)", [v for c, label in enumerate(attribute.labels) for v in (label, c)]
    if kind == "VARCHAR":
        value = f"TRY_CAST(trim({column}) AS DOUBLE)"
    elif kind in ("FLOAT", "DOUBLE") or kind.startswith("DECIMAL") or kind in _INTEGERS:
        value = f"CAST({column} AS DOUBLE)"
    else:
        raise ValueError(f"column {attribute.name!r} must hold integer codes, got {kind}")
    if attribute.values == "numbers":  # Attribute.bin_codes, in the same order of operations
        binned = f"least(floor((greatest(least({value}, ?), ?) - ?) * ? / ?), ?)"
        params = [attribute.bounds[1], attribute.bounds[0], attribute.bounds[0], attribute.size, attribute.span]
        return f"(CASE WHEN isfinite({value}) THEN CAST({binned} AS BIGINT) END)", params + [attribute.size - 1]
    integral = f"{value} BETWEEN 0 AND ? AND {value} = floor({value})"
    return f"(CASE WHEN {integral} THEN CAST({value} AS BIGINT) END)", [attribute.size - 1]


class DuckDBTable(TableBackend):
    """``source``: Parquet/CSV files (path, glob or Parquet directory, read by a private DuckDB unless ``connection``)
    or a table or view in ``connection`` (default: DuckDB's). The data must not change while served (checked once)."""

    def __init__(self, domain: Domain, source, *, connection=None):
        duckdb = require("duckdb", "duckdb")
        kind, text = source_format(source), str(source)
        default = duckdb.default_connection
        self._domain = domain
        self._con = connection or (duckdb.connect() if kind else default() if callable(default) else default)
        path = str(Path(text) / "**" / "*.parquet") if kind and Path(text).is_dir() else text
        self._from: Sql = (
            (".".join(quote(part) for part in text.split(".")), [])
            if kind is None
            else ("read_csv(?, header = true, all_varchar = true)", [path])
            if kind == "csv"
            else ("read_parquet(?)", [path])
        )
        sql, params = self._sql([("*", [])])
        types = {row[0]: row[1].upper() for row in self._con.execute(f"DESCRIBE {sql}", params).fetchall()}
        check_columns(list(types), domain)
        self._codes = {a.name: _code_sql(a, types[a.name]) for a in domain.attributes}
        outside = [
            (f"count(*) FILTER (WHERE NOT coalesce({code} BETWEEN 0 AND ?, false))", [*code_params, a.size - 1])
            for a, (code, code_params) in zip(domain.attributes, self._codes.values())
        ]
        counts = self._con.execute(*self._sql(outside)).fetchone()
        check_outside(domain, dict(zip(domain.names, counts)))

    @property
    def domain(self) -> Domain:
        return self._domain

    def histogram(self, attributes: Sequence[int], predicate=None) -> np.ndarray:
        attributes = sorted(int(a) for a in attributes)
        groups = [self._codes[self._domain.names[a]] for a in attributes]
        where = ("TRUE", []) if predicate is None else self._where(predicate)
        result = self._con.execute(*self._sql([*groups, ("count(*)", [])], where, bool(groups))).fetchnumpy()
        rows = np.column_stack([np.ma.filled(column, -1) for column in result.values()])  # NULL: refused by fill
        return fill(tuple(self._domain.sizes[a] for a in attributes), rows)

    def _sql(self, select: list[Sql], where: Sql = ("TRUE", []), group: bool = False) -> Sql:
        """SELECT ... FROM the source WHERE ... [GROUP BY ALL], with its parameters in textual order."""
        sql = f"SELECT {', '.join(s for s, _ in select)} FROM {self._from[0]} WHERE {where[0]}"
        return sql + (" GROUP BY ALL" if group else ""), [p for _, ps in [*select, self._from, where] for p in ps]

    def _where(self, node) -> Sql:
        if isinstance(node, (And, Or)):
            parts = [self._where(term) for term in node.terms]
            joined = (" AND " if isinstance(node, And) else " OR ").join(sql for sql, _ in parts)
            return f"({joined})", [p for _, ps in parts for p in ps]
        if isinstance(node, Not):
            sql, params = self._where(node.term)
            return f"(NOT {sql})", params
        column, params = self._codes[self._domain[node.attribute].name]
        codes = leaf_codes(node, self._domain)
        if isinstance(node, Compare):
            return f"({column} {_OPS[node.op]} ?)", params + codes
        if isinstance(node, Between):
            return f"({column} BETWEEN ? AND ?)", params + codes
        if isinstance(node, In):
            return f"({column} IN ({', '.join('?' for _ in codes)}))", params + codes
        raise TypeError(f"unknown predicate node {type(node).__name__}")
