"""The SQL front end (operators.queries.sql, ``ek.sql``): each supported construct read into the query model's
values, each unsupported one refused with a message naming it, and SQL equal to the builder on generated queries."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ektelo_ng as ek
from ektelo_ng.kernel.predicate import And, Between, Compare, In, Not, Or
from ektelo_ng.operators.queries.model import Count, Mean, Quantile, Query, Sum
from ektelo_ng.operators.queries.sql import SUPPORTED, SQLError

SCHEMA = ek.Schema({"sex": ["F", "M"], "region": ["N", "S", "E", "W"], "year": [2019, 2020],
                    "age": ek.Integer(0, 120), "income": ek.Numeric(0, 250_000, bins=50),
                    "marital-status": ["single", "married"]})


def one(text: str) -> Query:
    (query,) = ek.sql(text, SCHEMA)
    return query


# ---- what is read ---------------------------------------------------------------------------------------------
def test_each_aggregate_is_one_query_grouped_and_filtered_alike():
    queries = ek.sql("SELECT sex, region, COUNT(*), SUM(income) AS total, AVG(income), MEDIAN(age), "
                     "QUANTILE(age, 0.25) AS q1, QUANTILE(age, [0.25, 0.5, 0.75]) FROM people WHERE age >= 18 "
                     "GROUP BY sex, region", SCHEMA)
    where = Compare(attribute="age", op=">=", value=18)
    assert queries == [
        Query(Count(), where=where, groupby=("sex", "region"), table="people"),
        Query(Sum("income"), where=where, groupby=("sex", "region"), name="total", table="people"),
        Query(Mean("income"), where=where, groupby=("sex", "region"), table="people"),
        Query(Quantile("age", (0.5,)), where=where, groupby=("sex", "region"), table="people"),
        Query(Quantile("age", (0.25,)), where=where, groupby=("sex", "region"), name="q1", table="people"),
        Query(Quantile("age", (0.25, 0.5, 0.75)), where=where, groupby=("sex", "region"), table="people"),
    ]


def test_several_statements_are_one_batch_and_empty_ones_are_skipped():
    queries = ek.sql("SELECT COUNT(*) FROM people; ; SELECT sex, COUNT(*) AS n FROM people GROUP BY sex;", SCHEMA)
    assert queries == [Query(Count(), table="people"), Query(Count(), groupby=("sex",), name="n", table="people")]


def test_group_by_columns_need_not_be_selected_and_keep_their_order():
    assert one("SELECT COUNT(*) FROM t GROUP BY region, sex").groupby == ("region", "sex")
    assert one("SELECT region, sex, COUNT(*) FROM t GROUP BY sex, region").groupby == ("sex", "region")


@pytest.mark.parametrize("condition, predicate", [
    ("age = 30", Compare(attribute="age", op="==", value=30)),
    ("age != 30", Compare(attribute="age", op="!=", value=30)),
    ("age <> 30", Compare(attribute="age", op="!=", value=30)),
    ("age < 30", Compare(attribute="age", op="<", value=30)),
    ("age <= 30", Compare(attribute="age", op="<=", value=30)),
    ("age > 30", Compare(attribute="age", op=">", value=30)),
    ("age >= 30", Compare(attribute="age", op=">=", value=30)),
    ("30 <= age", Compare(attribute="age", op=">=", value=30)),  # a literal on the left reads as the mirror
    ("30 = age", Compare(attribute="age", op="==", value=30)),
    ("income > -5", Compare(attribute="income", op=">", value=-5)),
    ("income >= 5000.0", Compare(attribute="income", op=">=", value=5000)),
    ("age BETWEEN 20 AND 29", Between(attribute="age", low=20, high=29)),
    ("sex = 'F'", Compare(attribute="sex", op="==", value="F")),
    ("sex IN ('F', 'M')", In(attribute="sex", values=["F", "M"])),
    ("year = 2019", Compare(attribute="year", op="==", value=2019)),
    ("sex NOT IN ('F')", Not(term=In(attribute="sex", values=["F"]))),
    ("NOT age BETWEEN 20 AND 29", Not(term=Between(attribute="age", low=20, high=29))),
    ("age > 1 AND sex = 'M' OR region = 'N'", Or(terms=[
        And(terms=[Compare(attribute="age", op=">", value=1), Compare(attribute="sex", op="==", value="M")]),
        Compare(attribute="region", op="==", value="N")])),
    ("age > 1 AND (sex = 'M' OR region = 'N')", And(terms=[
        Compare(attribute="age", op=">", value=1),
        Or(terms=[Compare(attribute="sex", op="==", value="M"), Compare(attribute="region", op="==", value="N")])])),
])
def test_where_reads_into_the_kernels_predicates(condition, predicate):
    assert one(f"SELECT COUNT(*) FROM t WHERE {condition}").where == predicate


def test_names_unquoted_fold_case_quoted_match_exactly():
    assert one("SELECT SEX, count(*) FROM t GROUP BY Sex").groupby == ("sex",)
    assert one('SELECT "marital-status", COUNT(*) FROM t GROUP BY "marital-status"').groupby == ("marital-status",)
    with pytest.raises(SQLError, match="unknown column 'Sex'"):
        ek.sql('SELECT COUNT(*) FROM t GROUP BY "Sex"', SCHEMA)


def test_a_column_may_be_qualified_by_its_table_or_alias():
    assert one("SELECT p.sex, COUNT(*) FROM people AS p GROUP BY p.sex").groupby == ("sex",)
    assert one("SELECT people.sex, COUNT(*) FROM people GROUP BY people.sex").groupby == ("sex",)
    with pytest.raises(SQLError, match="names a table other than 'people'"):
        ek.sql("SELECT COUNT(*) FROM people WHERE other.age > 3", SCHEMA)


# ---- what is refused ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, named", [
    ("SELECT COUNT(*) FROM a JOIN b ON a.x = b.x", "JOIN is not supported"),
    ("SELECT sex, COUNT(*) FROM t GROUP BY sex HAVING COUNT(*) > 3", "HAVING is not supported"),
    ("SELECT COUNT(*) FROM t ORDER BY 1", "ORDER BY is not supported"),
    ("SELECT COUNT(*) FROM t LIMIT 3", "LIMIT is not supported"),
    ("SELECT DISTINCT sex FROM t", "DISTINCT is not supported"),
    ("WITH x AS (SELECT 1) SELECT COUNT(*) FROM x", "WITH (common table expressions) is not supported"),
    ("SELECT COUNT(*) FROM (SELECT * FROM t)", "a subquery is not supported"),
    ("SELECT COUNT(*) FROM t WHERE age IN (SELECT age FROM u)", "a subquery is not supported"),
    ("SELECT SUM(income) OVER (PARTITION BY sex) FROM t", "a window function is not supported"),
    ("SELECT SUM(income * 2) FROM t", "an expression inside an aggregate (SUM(income * 2)) is not supported"),
    ("SELECT SUM(income) / COUNT(*) FROM t", "an expression over aggregates"),
    ("SELECT COUNT(DISTINCT sex) FROM t", "COUNT(DISTINCT sex) is not supported"),
    ("SELECT COUNT(age) FROM t", "COUNT(age) is not supported: count rows with COUNT(*)"),
    ("SELECT MAX(age) FROM t", "the function MAX(age) is not supported"),
    ("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY age) FROM t", "write QUANTILE(col, p) or MEDIAN(col)"),
    ("SELECT * FROM t", "SELECT * is not supported"),
    ("SELECT COUNT(*) FROM t GROUP BY ROLLUP (sex)", "GROUP BY ROLLUP (sex) is not supported"),
    ("SELECT COUNT(*) FROM t UNION SELECT COUNT(*) FROM u", "UNION is not supported"),
    ("INSERT INTO t VALUES (1)", "INSERT is not supported (only SELECT statements are)"),
    ("SELECT COUNT(*) FROM db.t", "a qualified table name (db.t) is not supported"),
    ("SELECT COUNT(*) FROM t WHERE age IS NULL", "the condition age IS NULL is not supported in WHERE"),
    ("SELECT COUNT(*) FROM t WHERE age LIKE '3%'", "is not supported in WHERE"),
    ("SELECT COUNT(*) FROM t WHERE age = sex", "comparing two columns (age = sex) is not supported"),
    ("SELECT COUNT(*) FROM t WHERE age + 1 > 3", "a condition compares one schema column with literals"),
])
def test_unsupported_sql_is_refused_naming_the_construct_and_the_subset(text, named):
    with pytest.raises(SQLError) as refused:
        ek.sql(text, SCHEMA)
    assert named in str(refused.value)
    assert SUPPORTED in str(refused.value)


@pytest.mark.parametrize("text, message", [
    ("SELECT sexx, COUNT(*) FROM t GROUP BY sexx", "unknown column 'sexx' (did you mean 'sex'?)"),
    ("SELECT COUNT(*) FROM t WHERE sex = 'X'", "'X' is not a label of 'sex': its labels are 'F', 'M'"),
    ("SELECT COUNT(*) FROM t WHERE year = 2021", "2021 is not a label of 'year'"),
    ("SELECT COUNT(*) FROM t WHERE age > 'old'", "'age' holds numbers: compare it with a whole number"),
    ("SELECT COUNT(*) FROM t WHERE income > 0.5", "'income' holds numbers: compare it with a whole number"),
    ("SELECT COUNT(*) FROM t WHERE sex < 'M'", "'sex' is categorical, so its labels have no order"),
    ("SELECT COUNT(*) FROM t WHERE sex BETWEEN 'F' AND 'M'", "'sex' is categorical"),
    ("SELECT AVG(sex) FROM t", "'sex' is categorical; SUM, AVG, MEDIAN and QUANTILE need an integer or numeric"),
    ("SELECT age, COUNT(*) FROM t", "SELECT of the ungrouped column 'age'"),
    ("SELECT sex FROM t GROUP BY sex", "the SELECT list has no aggregate"),
    ("SELECT COUNT(*)", "a SELECT needs FROM table"),
    ("SELECT QUANTILE(age, 2) FROM t", "quantile probabilities must lie in [0, 1]"),
    ("SELECT QUANTILE(age) FROM t", "QUANTILE takes a column and a probability"),
    ("SELECT COUNT(*) FROM t WHERE (", "cannot parse the SQL at line 1"),
    ("SELEC", "the statement 'SELEC' is not supported"),
    ("  ;  ", "the SQL holds no statement"),
])
def test_bad_names_labels_and_forms_are_refused_with_what_to_do(text, message):
    with pytest.raises(SQLError) as refused:
        ek.sql(text, SCHEMA)
    assert message in str(refused.value)


def test_a_refusal_names_the_statement_it_is_in():
    with pytest.raises(SQLError, match="^statement 2: LIMIT"):
        ek.sql("SELECT COUNT(*) FROM t; SELECT COUNT(*) FROM t LIMIT 1", SCHEMA)


def test_without_sqlglot_the_error_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "sqlglot", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[queries\]'"):
        ek.sql("SELECT COUNT(*) FROM t", SCHEMA)


# ---- SQL and the builder agree --------------------------------------------------------------------------------
LEAVES = st.one_of(
    st.tuples(st.just("age"), st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), st.integers(-5, 130)),
    st.tuples(st.just("income"), st.sampled_from(["<", ">="]), st.integers(0, 300_000)),
    st.tuples(st.just("sex"), st.sampled_from(["==", "!="]), st.sampled_from(["F", "M"])),
    st.tuples(st.just("year"), st.just("=="), st.sampled_from([2019, 2020])),
    st.tuples(st.just("age"), st.just("between"), st.tuples(st.integers(0, 60), st.integers(60, 120))),
    st.tuples(st.just("region"), st.just("in"), st.lists(st.sampled_from("NSEW"), min_size=1, max_size=4)),
)
TREES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.tuples(st.just("not"), inner), st.tuples(st.sampled_from(["and", "or"]), inner, inner)), max_leaves=6)


def as_sql(tree) -> str:
    """A generated condition in SQL, every subexpression in parentheses."""
    if tree[0] == "not":
        return f"NOT ({as_sql(tree[1])})"
    if tree[0] in ("and", "or"):
        return f"({as_sql(tree[1])}) {tree[0].upper()} ({as_sql(tree[2])})"
    column, op, value = tree
    if op == "between":
        return f"{column} BETWEEN {value[0]} AND {value[1]}"
    if op == "in":
        return f"{column} IN ({', '.join(repr(v) for v in value)})"
    return f"{column} {'=' if op == '==' else op} {value!r}"


def as_predicate(tree):
    """The same condition built with ``ek.attr`` and Python's operators."""
    if tree[0] == "not":
        return ~as_predicate(tree[1])
    if tree[0] in ("and", "or"):
        left, right = as_predicate(tree[1]), as_predicate(tree[2])
        return left & right if tree[0] == "and" else left | right
    column, op, value = tree
    if op == "between":
        return ek.attr(column).between(*value)
    if op == "in":
        return ek.attr(column).isin(value)
    return {"==": ek.attr(column).__eq__, "!=": ek.attr(column).__ne__, "<": ek.attr(column).__lt__,
            "<=": ek.attr(column).__le__, ">": ek.attr(column).__gt__, ">=": ek.attr(column).__ge__}[op](value)


AGGREGATES = st.sampled_from([("COUNT(*)", "count", ()), ("SUM(income)", "sum", ("income",)),
                              ("AVG(age)", "mean", ("age",)), ("MEDIAN(income)", "median", ("income",)),
                              ("QUANTILE(age, [0.1, 0.9])", "quantile", ("age", [0.1, 0.9]))])


@settings(max_examples=150, deadline=None)
@given(groupby=st.lists(st.sampled_from(["sex", "region", "year"]), unique=True, max_size=3),
       aggregate=AGGREGATES, tree=st.none() | TREES, name=st.none() | st.sampled_from(["a", "b_2"]))
def test_sql_and_the_builder_give_equal_queries(groupby, aggregate, tree, name):
    call, method, arguments = aggregate
    text = (f"SELECT {', '.join(groupby + [call + (f' AS {name}' if name else '')])} FROM people"
            + (f" WHERE {as_sql(tree)}" if tree is not None else "")
            + (f" GROUP BY {', '.join(groupby)}" if groupby else ""))
    builder = ek.query("people").groupby(*groupby)
    if tree is not None:
        builder = builder.where(as_predicate(tree))
    if name:
        builder = builder.name(name)
    assert ek.sql(text, SCHEMA) == [getattr(builder, method)(*arguments)]
