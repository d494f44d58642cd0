"""SQL front end: a subset of SELECT, parsed by sqlglot (never by hand) into the query model's values.

Each aggregate of a SELECT list is one :class:`~.model.Query`, grouped by the statement's GROUP BY columns and
filtered by its WHERE; several statements separated by ``;`` are one batch. Names and labels are checked against
the schema, so a typo is refused before anything is measured. Everything outside the subset is refused with an
error that names the construct and says what is supported.

>>> from ektelo_ng.operators.queries.schema import Schema, Integer
>>> schema = Schema(sex=["F", "M"], age=Integer(0, 120))
>>> [q.aggregate for q in sql("SELECT sex, COUNT(*), MEDIAN(age) AS m FROM people WHERE age >= 18 GROUP BY sex", schema)]
[Count(), Quantile(column='age', probabilities=(0.5,))]
>>> sql("SELECT age, COUNT(*) FROM people", schema)
Traceback (most recent call last):
...
ektelo_ng.operators.queries.sql.SQLError: statement 1: SELECT of the ungrouped column 'age': a selected column must be a GROUP BY column (or aggregated). Supported: ...
"""

from __future__ import annotations

import difflib
from typing import Any

from ...kernel.predicate import Between, Compare, In, Not
from .model import Count, Mean, Predicate, Quantile, Query, Sum
from .schema import Categorical

SUPPORTED = (
    "Supported: SELECT <group columns>, COUNT(*), SUM(col), AVG(col), MEDIAN(col), QUANTILE(col, p) or "
    "QUANTILE(col, [p, ...]) [AS name], ... FROM table [WHERE ...] [GROUP BY col, ...], several statements "
    "separated by ';'; WHERE compares schema columns with literals (=, !=, <, <=, >, >=, BETWEEN, IN) combined "
    "with AND, OR, NOT."
)
_CLAUSES = {  # Select arguments outside the subset, by the name a user knows them by
    "with_": "WITH (common table expressions)", "distinct": "DISTINCT", "joins": "JOIN", "laterals": "LATERAL",
    "having": "HAVING", "qualify": "QUALIFY", "windows": "WINDOW", "order": "ORDER BY", "sort": "SORT BY",
    "limit": "LIMIT", "offset": "OFFSET", "sample": "TABLESAMPLE", "into": "SELECT INTO", "pivots": "PIVOT",
    "prewhere": "PREWHERE", "connect": "CONNECT BY", "distribute": "DISTRIBUTE BY", "cluster": "CLUSTER BY",
    "locks": "FOR UPDATE", "exclude": "EXCLUDE", "kind": "SELECT AS STRUCT/VALUE", "hint": "optimizer hints",
}
_GROUPINGS = {"grouping_sets": "GROUPING SETS", "cube": "CUBE", "rollup": "ROLLUP", "totals": "WITH TOTALS",
              "all": "GROUP BY ALL"}


class SQLError(ValueError):
    """A statement outside the supported subset, or naming a column or label the schema does not have."""


def sql(text: str, schema) -> list[Query]:
    """The queries of ``text`` (one or more SELECT statements separated by ``;``), checked against ``schema``."""
    sqlglot, exp = _sqlglot()
    if not isinstance(text, str) or not text.strip():
        raise SQLError(f"expected SQL text with at least one SELECT statement, got {text!r}. {SUPPORTED}")
    try:
        statements = [s for s in sqlglot.parse(text, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as error:
        first = error.errors[0] if error.errors else {}
        where = f" at line {first['line']}, column {first['col']}" if first else ""
        raise SQLError(f"cannot parse the SQL{where}: {first.get('description', error)}. {SUPPORTED}") from None
    if not statements:
        raise SQLError(f"the SQL holds no statement. {SUPPORTED}")
    queries: list[Query] = []
    for number, statement in enumerate(statements, 1):
        try:
            queries.extend(_Statement(exp, schema).queries(statement))
        except SQLError as error:
            raise SQLError(f"statement {number}: {error}") from None
    return queries


def _sqlglot():
    try:
        import sqlglot
        from sqlglot import exp
    except ImportError:
        raise ImportError("SQL queries need sqlglot: pip install -e '.[queries]'") from None
    return sqlglot, exp


def _refuse(construct: str, detail: str = "") -> SQLError:
    return SQLError(f"{construct} is not supported{detail}. {SUPPORTED}")


class _Statement:
    """Reads one parsed statement against the schema."""

    def __init__(self, exp, schema):
        self.exp, self.schema, self.table = exp, schema, None
        self.names = list(schema.names)

    def queries(self, statement) -> list[Query]:
        exp = self.exp
        if not isinstance(statement, exp.Select):
            what = f"the statement {statement.sql(dialect='duckdb')!r}" if isinstance(statement, exp.Condition) \
                else statement.key.upper()
            raise _refuse(what, " (only SELECT statements are)")
        for key, construct in _CLAUSES.items():
            if statement.args.get(key):
                raise _refuse(construct)
        self._refuse_nested(statement)
        self.table, self.aliases = self._from(statement.args.get("from_"))
        where = statement.args.get("where")
        predicate = self._predicate(where.this) if where is not None else None
        groupby = self._groupby(statement.args.get("group"))
        queries = []
        for item in statement.expressions:
            name, expression = (item.alias, item.this) if isinstance(item, exp.Alias) else (None, item)
            if isinstance(expression, exp.Column):
                column = self._column(expression)
                if column not in groupby:
                    raise SQLError(f"SELECT of the ungrouped column {column!r}: a selected column must be a GROUP BY "
                                   f"column (or aggregated). {SUPPORTED}")
                continue
            aggregate = self._aggregate(expression)
            queries.append(Query(aggregate, where=predicate, groupby=groupby, name=name, table=self.table))
        if not queries:
            raise SQLError(f"the SELECT list has no aggregate: each of COUNT(*), SUM, AVG, MEDIAN and QUANTILE in it "
                           f"is one query. {SUPPORTED}")
        return queries

    # -- structure ----------------------------------------------------------------------------------------------
    def _refuse_nested(self, statement) -> None:
        exp = self.exp
        for node in statement.walk():
            if node is statement:
                continue
            if isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation)):
                raise _refuse("a subquery", f" ({node.sql(dialect='duckdb')})")
            if isinstance(node, exp.Window):
                raise _refuse("a window function", f" ({node.sql(dialect='duckdb')})")
            if isinstance(node, exp.Star) and not isinstance(node.parent, exp.Count):
                raise _refuse("SELECT *", ": name the group columns and the aggregates")

    def _from(self, clause) -> tuple[str, set[str]]:
        exp = self.exp
        if clause is None:
            raise SQLError(f"a SELECT needs FROM table. {SUPPORTED}")
        table = clause.this
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise _refuse(f"FROM {table.sql(dialect='duckdb')}", ", only FROM one table by name")
        if table.args.get("db") or table.args.get("catalog"):
            raise _refuse(f"a qualified table name ({table.sql(dialect='duckdb')})", ", only FROM one table by name")
        return table.name, {table.name, table.alias} - {""}

    def _groupby(self, group) -> tuple[str, ...]:
        if group is None:
            return ()
        for key, construct in _GROUPINGS.items():
            if group.args.get(key):
                raise _refuse(construct)
        columns = []
        for expression in group.expressions:
            if not isinstance(expression, self.exp.Column):
                raise _refuse(f"GROUP BY {expression.sql(dialect='duckdb')}", ", only GROUP BY schema columns by name")
            columns.append(self._column(expression))
        return tuple(columns)

    def _column(self, column) -> str:
        """The schema's name for a column reference: quoted names exactly, unquoted ones case-insensitively."""
        if column.table and column.table not in self.aliases:
            raise SQLError(f"column {column.sql(dialect='duckdb')} names a table other than {self.table!r}")
        identifier = column.this
        if not isinstance(identifier, self.exp.Identifier):
            raise _refuse(f"the column expression {column.sql(dialect='duckdb')}")
        name = identifier.this
        if name in self.names:
            return name
        if not identifier.quoted:
            folded = [n for n in self.names if n.lower() == name.lower()]
            if len(folded) == 1:
                return folded[0]
        near = difflib.get_close_matches(name, self.names, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise SQLError(f"unknown column {name!r}{hint}: the schema's columns are {', '.join(self.names)}")

    # -- aggregates ---------------------------------------------------------------------------------------------
    def _aggregate(self, expression):
        exp = self.exp
        if isinstance(expression, exp.Count):
            if not isinstance(expression.this, exp.Star):
                raise _refuse(f"{expression.sql(dialect='duckdb')}", ": count rows with COUNT(*)")
            return Count()
        kinds = {exp.Sum: Sum, exp.Avg: Mean, exp.Median: None, exp.Quantile: None, exp.PercentileCont: None}
        kind = next((k for k in kinds if type(expression) is k), None)
        if isinstance(expression, exp.WithinGroup):
            raise _refuse(f"{expression.sql(dialect='duckdb')}", ": write QUANTILE(col, p) or MEDIAN(col)")
        if kind is None and isinstance(expression, exp.Func) and not isinstance(expression, exp.Binary):
            raise _refuse(f"the function {expression.sql(dialect='duckdb')}", " in the SELECT list")
        if kind is None:
            inner = "an expression over aggregates" if any(
                isinstance(n, exp.AggFunc) for n in expression.walk() if n is not expression) else "the expression"
            raise _refuse(f"{inner} {expression.sql(dialect='duckdb')}", " in the SELECT list")
        column = self._aggregated(expression, expression.this)
        if kinds[kind] is not None:
            return kinds[kind](column)
        if kind is exp.Median:
            return Quantile(column, (0.5,))
        probabilities = expression.args.get("quantile") or expression.args.get("expression")
        return Quantile(column, self._probabilities(expression, probabilities))

    def _aggregated(self, call, argument) -> str:
        if not isinstance(argument, self.exp.Column):
            raise _refuse(f"an expression inside an aggregate ({call.sql(dialect='duckdb')})",
                          ": aggregate one column by name")
        column = self._column(argument)
        if isinstance(self.schema[column], Categorical):
            raise SQLError(f"{call.sql(dialect='duckdb')}: {column!r} is categorical; SUM, AVG, MEDIAN and QUANTILE "
                           f"need an integer or numeric column (count its labels with COUNT(*) ... GROUP BY {column})")
        return column

    def _probabilities(self, call, argument) -> tuple[float, ...]:
        exp = self.exp
        items = argument.expressions if isinstance(argument, exp.Array) else [argument]
        values = [self._number(item) if item is not None else None for item in items]
        if not values or any(v is None for v in values):
            raise SQLError(f"{call.sql(dialect='duckdb')}: QUANTILE takes a column and a probability in [0, 1] or "
                           f"a list of them, e.g. QUANTILE(age, 0.25) or QUANTILE(age, [0.25, 0.5, 0.75])")
        try:
            return Quantile("_", values).probabilities
        except ValueError as error:
            raise SQLError(f"{call.sql(dialect='duckdb')}: {error}") from None

    # -- predicates ---------------------------------------------------------------------------------------------
    def _predicate(self, node) -> Predicate:
        exp = self.exp
        if isinstance(node, exp.Paren):
            return self._predicate(node.this)
        if isinstance(node, (exp.And, exp.Or)):
            left, right = self._predicate(node.this), self._predicate(node.expression)
            return left & right if isinstance(node, exp.And) else left | right
        if isinstance(node, exp.Not):
            return Not(term=self._predicate(node.this))
        if isinstance(node, exp.Between):
            column = self._ordered_column(node, node.this)
            low, high = (self._value(column, node.args[k], node) for k in ("low", "high"))
            return Between(attribute=column, low=low, high=high)
        if isinstance(node, exp.In):
            column = self._operand_column(node, node.this)
            if node.args.get("query") or node.args.get("unnest") or not node.expressions:
                raise _refuse(f"the IN form {node.sql(dialect='duckdb')}", ", only IN (literal, ...)")
            return In(attribute=column, values=[self._value(column, v, node) for v in node.expressions])
        operators = {exp.EQ: "==", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
        if type(node) in operators:
            op, left, right = operators[type(node)], node.this, node.expression
            if not isinstance(left, exp.Column) and isinstance(right, exp.Column):  # 30 <= age reads age >= 30
                flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
                op, left, right = flipped.get(op, op), right, left
            column = (self._operand_column if op in ("==", "!=") else self._ordered_column)(node, left)
            return Compare(attribute=column, op=op, value=self._value(column, right, node))
        raise _refuse(f"the condition {node.sql(dialect='duckdb')}", " in WHERE")

    def _operand_column(self, node, operand) -> str:
        if not isinstance(operand, self.exp.Column):
            raise _refuse(f"the condition {node.sql(dialect='duckdb')}",
                          ": a condition compares one schema column with literals")
        return self._column(operand)

    def _ordered_column(self, node, operand) -> str:
        column = self._operand_column(node, operand)
        if isinstance(self.schema[column], Categorical):
            raise SQLError(f"{node.sql(dialect='duckdb')}: {column!r} is categorical, so its labels have no order: "
                           f"compare it with =, != or IN (...)")
        return column

    def _value(self, column: str, literal, node) -> int | str:
        """A literal as the predicate's value, checked against the column: a label of a categorical column, a
        whole number for an integer or numeric one."""
        exp = self.exp
        if isinstance(literal, exp.Column):
            raise _refuse(f"comparing two columns ({node.sql(dialect='duckdb')})",
                          ": a condition compares one schema column with literals")
        if isinstance(literal, exp.Literal) and literal.is_string:
            value: Any = literal.this
        else:
            value = self._number(literal)
            if value is None:
                raise _refuse(f"the value {literal.sql(dialect='duckdb')} in {node.sql(dialect='duckdb')}",
                              ": values are string or number literals")
        target = self.schema[column]
        if isinstance(target, Categorical):
            try:
                target.code_of(value)
            except ValueError:
                raise SQLError(f"{value!r} is not a label of {column!r}: its labels are "
                               f"{', '.join(map(repr, target.keys))}") from None
            return value
        if isinstance(value, str) or (isinstance(value, float) and not value.is_integer()):
            raise SQLError(f"{column!r} holds numbers: compare it with a whole number, not {value!r} "
                           f"(in {node.sql(dialect='duckdb')})")
        return int(value)

    def _number(self, node) -> int | float | None:
        exp = self.exp
        sign = 1
        while isinstance(node, exp.Neg):
            sign, node = -sign, node.this
        if not isinstance(node, exp.Literal) or node.is_string:
            return None
        text = node.this
        number = int(text) if text.lstrip("+-").isdigit() else float(text)
        return sign * number

