"""The query layer's front door: the builder (``ek.query``) and joint answering (``ek.answer``).

A query is built in the user's terms, columns and labels of a schema, and is a plain value of
:mod:`operators.queries.model`; ``ek.answer`` answers a whole batch from one measurement
(:mod:`operators.queries.answer`), from a protected session, a served one, or a table given with its schema.

>>> import ektelo_ng as ek
>>> q = ek.query("people").where(ek.attr("age") >= 30).groupby("sex", "region").name("adults").count()
>>> q.groupby, q.name, type(q.aggregate).__name__
(('sex', 'region'), 'adults', 'Count')
>>> ek.query().groupby("sex").quantile("age", [0.25, 0.5, 0.75]).aggregate.probabilities
(0.25, 0.5, 0.75)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ektelo_ng.kernel.predicate import And
from ektelo_ng.operators.budget import Budget
from ektelo_ng.operators.client import Handle, Session
from ektelo_ng.operators.queries.answer import ADVICE_SECONDS, answer_batch
from ektelo_ng.operators.queries.model import Batch, Count, Mean, Predicate, Quantile, Query, Sum
from ektelo_ng.operators.queries.results import Results
from ektelo_ng.operators.queries.schema import Schema


@dataclass(frozen=True)
class QueryBuilder:
    """Builds one :class:`Query`: ``where``, ``groupby``, ``weight`` and ``name`` in any order, then one aggregate
    (``count``, ``sum``, ``mean``, ``quantile``, ``median``), which returns the Query."""

    table: str | None = None
    filter: Predicate | None = None
    columns: tuple[str, ...] = ()
    importance: float = 1.0
    label: str | None = None

    def where(self, predicate: Predicate) -> QueryBuilder:
        """Keep the rows satisfying ``predicate`` (``ek.attr("age") >= 30``); several ``where`` calls all hold."""
        return replace(self, filter=predicate if self.filter is None else And(terms=[self.filter, predicate]))

    def groupby(self, *columns: str) -> QueryBuilder:
        """One answer per combination of these columns' labels (or bins)."""
        return replace(self, columns=self.columns + tuple(columns))

    def weight(self, weight: float) -> QueryBuilder:
        """How much this query's accuracy matters against the batch's others (default 1)."""
        return replace(self, importance=weight)

    def name(self, name: str) -> QueryBuilder:
        """The result's name (default: built from the query, e.g. ``count by sex``)."""
        return replace(self, label=name)

    def _query(self, aggregate) -> Query:
        return Query(aggregate, where=self.filter, groupby=self.columns, weight=self.importance, name=self.label,
                     table=self.table)

    def count(self) -> Query:
        return self._query(Count())

    def sum(self, column: str) -> Query:
        return self._query(Sum(column))

    def mean(self, column: str) -> Query:
        return self._query(Mean(column))

    def quantile(self, column: str, probabilities: float | Sequence[float]) -> Query:
        probabilities = [probabilities] if isinstance(probabilities, (int, float)) else probabilities
        return self._query(Quantile(column, tuple(probabilities)))

    def median(self, column: str) -> Query:
        return self.quantile(column, [0.5])


def query(table: str | None = None) -> QueryBuilder:
    """Start a query on ``table`` (a name for the record; the rows are those of the source it is answered from)."""
    return QueryBuilder(table)


def answer(source, queries: Batch | Sequence[Query] | Query, budget: Budget, *, schema: Schema | None = None,
           level: float = 0.95, strategy="auto", nonnegative: bool = False, integer: bool = False,
           time_limit: float = ADVICE_SECONDS, **protect_options) -> Results:
    """Answer ``queries`` jointly from one measurement, spending all of ``budget``; ``results[name]`` is a DataFrame.

    ``source``: a Session (``ek.protect``, ``ek.connect``), its table handle, or a table (a DataFrame, an Arrow
    table, a CSV or Parquet path; with ``backend="duckdb"`` a DuckDB table name or files, a Spark DataFrame)
    together with its ``schema``, protected here with exactly ``budget`` (``protect_options`` go to
    ``ek.protect``; a data frame's columns outside the schema are left out, files must hold the schema's). See :func:`operators.queries.answer.answer_batch` for the rest.
    """
    if isinstance(source, Session):
        source = source.source
    elif not isinstance(source, Handle):
        if schema is None:
            raise ValueError("a table is answered with its schema: give schema=ek.Schema(...) (or protect it first)")
        from ektelo_ng.session import as_data_frame, protect

        frame = as_data_frame(source)
        if frame is not None:  # a data frame's other columns are not the schema's: they stay out of the kernel
            missing = [name for name in schema.names if name not in frame.columns]
            if missing:
                raise ValueError(f"the table has no columns {missing}; it has {list(frame.columns)}")
            source = {name: frame[name].to_numpy() for name in schema.names}
        source = protect(source, schema, budget, **protect_options).source
    return answer_batch(source, queries, budget, schema=schema, level=level, strategy=strategy,
                        nonnegative=nonnegative, integer=integer, time_limit=time_limit)
