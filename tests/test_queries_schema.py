"""The public schema (issue 47): its forms, the kernel's coding of raw values by it (the same in numpy, DuckDB and
Spark), labels round-tripping to the results, and bad input refused with nothing charged."""

from __future__ import annotations

import doctest
import importlib
import json

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.kernel.table import load_table
from ektelo_ng.session import open_table, read_columns

pd = pytest.importorskip("pandas")

SCHEMA = ek.Schema(sex=["F", "M"], education=ek.Categorical([1, 2, 3], other="unknown"), age=ek.Integer(0, 99),
                   decade=ek.Integer(0, 99, bins=10), income=ek.Numeric(0, 1, bins=10))


def raw(rows: int = 400, seed: int = 0) -> pd.DataFrame:
    """Raw values: education codes outside the labels (-> 'unknown'), ages and incomes outside the bounds."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"sex": rng.choice(["F", "M"], rows), "education": rng.choice([1, 2, 3, 7], rows),
                         "age": rng.integers(-10, 120, rows), "decade": rng.integers(-10, 120, rows),
                         "income": np.round(rng.uniform(-0.2, 1.2, rows), 1)})


def by_hand(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The codes the schema's rules give, computed here without the library."""
    income = np.clip(frame.income.to_numpy(), 0, 1)
    return {"sex": (frame.sex == "M").to_numpy().astype(int),
            "education": frame.education.map({1: 0, 2: 1, 3: 2}).fillna(3).to_numpy().astype(int),
            "age": np.clip(frame.age, 0, 99).to_numpy(), "decade": np.clip(frame.decade, 0, 99).to_numpy() // 10,
            "income": np.minimum(np.floor(income * 10), 9).astype(int)}


def test_the_module_examples_run():
    for name in ("schema", "compile", "model"):
        module = importlib.import_module(f"ektelo_ng.operators.queries.{name}")
        assert doctest.testmod(module).failed == 0, name
    assert doctest.testmod(importlib.import_module("ektelo_ng.queries")).failed == 0


def test_the_kernel_codes_raw_values_by_the_schemas_rules():
    frame = raw()
    table = load_table(read_columns(frame, SCHEMA.domain()), SCHEMA.domain())
    for name, codes in by_hand(frame).items():
        assert table._columns[name].tolist() == codes.tolist(), name


def test_duckdb_codes_raw_values_as_numpy_does(tmp_path):
    pytest.importorskip("duckdb")
    frame = raw(2000, seed=1)
    frame.to_csv(tmp_path / "t.csv", index=False)
    frame.to_parquet(tmp_path / "t.parquet")
    reference = open_table(frame, SCHEMA)
    for path in (tmp_path / "t.csv", tmp_path / "t.parquet"):
        table = open_table(str(path), SCHEMA, "duckdb")
        for attributes in ([0], [1], [2], [3], [4], [1, 3, 4]):
            assert (table.histogram(attributes) == reference.histogram(attributes)).all(), (path.suffix, attributes)


def test_numbers_on_bin_edges_fall_the_same_way_in_numpy_and_duckdb(tmp_path):
    """Values on and next to every edge of bins whose width has no exact binary form (0.1)."""
    duckdb = pytest.importorskip("duckdb")
    schema = ek.Schema(x=ek.Numeric(-0.3, 0.7, bins=10))
    edges = schema["x"].edges()
    values = np.concatenate([edges, np.nextafter(edges, -1), np.nextafter(edges, 2), [-5.0, 5.0]])
    connection = duckdb.connect()
    connection.execute("CREATE TABLE edges AS SELECT unnest(?) AS x", [values.tolist()])
    in_duckdb = open_table("edges", schema, "duckdb", connection=connection).histogram([0])
    assert (in_duckdb == open_table({"x": values}, schema).histogram([0])).all()


@pytest.mark.spark
def test_spark_codes_raw_values_as_numpy_does(tmp_path):
    pyspark_sql = pytest.importorskip("pyspark.sql")
    spark = (pyspark_sql.SparkSession.builder.master("local[2]").appName("ektelo-ng tests")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    frame = raw(500, seed=2)
    frame.to_csv(tmp_path / "t.csv", index=False)
    reference = open_table(frame, SCHEMA)
    for source in (spark.createDataFrame(frame), str(tmp_path / "t.csv")):
        table = open_table(source, SCHEMA, "spark", spark=spark)
        for attributes in ([0], [1], [2], [3], [4]):
            assert (table.histogram(attributes) == reference.histogram(attributes)).all(), attributes


def test_labels_round_trip_to_the_results():
    frame = raw(300)
    results = ek.answer(frame, [ek.query().groupby("education", "sex").count(), ek.query().groupby("decade").count(),
                                ek.query().groupby("income").count()],
                        ek.ZCDP(10**12), schema=SCHEMA, strategy="identity", seed=0)
    education = results["count by education, sex"]
    assert education.columns.tolist()[:2] == ["education", "sex"]
    assert education.education.tolist() == ["1", "1", "2", "2", "3", "3", "unknown", "unknown"]
    codes = by_hand(frame)
    expected = [int(((codes["education"] == e) & (codes["sex"] == s)).sum()) for e in range(4) for s in range(2)]
    assert education.answer.round().astype(int).tolist() == expected
    assert results["count by decade"].decade.tolist()[:2] == ["0-9", "10-19"]
    assert results["count by income"].income.tolist()[:2] == ["[0, 0.1)", "[0.1, 0.2)"]


def test_the_schema_reads_from_yaml_and_json_and_rebuilds_from_its_domain(tmp_path):
    spec = {"sex": ["F", "M"], "education": {"categorical": [1, 2, 3], "other": "unknown"},
            "age": {"integer": [0, 99]}, "decade": {"integer": [0, 99], "bins": 10},
            "income": {"numeric": [0, 1], "bins": 10}}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    assert ek.Schema.from_file(tmp_path / "s.json") == SCHEMA
    yaml = pytest.importorskip("yaml")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    assert ek.Schema.from_file(tmp_path / "s.yaml") == SCHEMA
    assert ek.Schema.from_dict(SCHEMA.to_dict()) == SCHEMA
    assert ek.Schema.from_domain(SCHEMA.domain()).domain() == SCHEMA.domain()


@pytest.mark.parametrize("spec, message", [
    ({"age": {"integer": [0, 120], "bins": 7}}, "do not split into 7 bins"),
    ({"income": {"numeric": [0, 10]}}, "needs bins"),
    ({"income": {"numeric": [10, 0], "bins": 2}}, "low below high"),
    ({"sex": {"categorical": ["F"], "bins": 2}}, "exactly one of"),
    ({"sex": ["F", "F"]}, "repeat"),
    ({"sex": "F"}, "give a list of labels"),
])
def test_bad_schemas_are_refused_by_name(spec, message):
    with pytest.raises(ValueError, match=message):
        ek.Schema.from_dict(spec)


def test_a_value_outside_the_labels_refuses_the_table_naming_it(tmp_path):
    frame = raw(50).assign(sex=lambda f: np.where(np.arange(50) == 7, "X", f.sex))
    with pytest.raises(ValueError, match=r"column 'sex': 1 value\(s\) with no label, such as \['X'\]"):
        ek.protect(frame, SCHEMA, ek.ZCDP(1), ledger=tmp_path / "ledger")
    with pytest.raises(ValueError, match="missing or non-finite"):
        ek.protect(raw(50).assign(age=np.nan), SCHEMA, ek.ZCDP(1))
    if pytest.importorskip("duckdb"):
        frame.to_parquet(tmp_path / "t.parquet")
        with pytest.raises(ValueError, match="column 'sex': 1 row"):
            ek.protect(str(tmp_path / "t.parquet"), SCHEMA, ek.ZCDP(1), backend="duckdb")


@pytest.mark.parametrize("bad, message", [
    (ek.query().groupby("height").count(), "unknown column 'height'"),
    (ek.query().where(ek.attr("sex") == "X").count(), "'X' is not a label"),
    (ek.query().where(ek.attr("sex") < "M").count(), "categorical: compare it with ==, != or isin"),
    (ek.query().where(ek.attr("age") >= "old").count(), "compare it with a number"),
    (ek.query().groupby("sex").sum("education"), "'education' is categorical"),
    (ek.query().groupby("age").median("age"), "drop it from groupby"),
    (ek.query().where(ek.attr("age") > 200).groupby("sex").count(), "no group passes its filter"),
])
def test_bad_queries_are_refused_with_nothing_charged(bad, message):
    session = ek.protect(raw(50), SCHEMA, ek.ZCDP(1))
    with pytest.raises(ValueError, match=message):
        session.answer([ek.query().groupby("sex").count(), bad], ek.ZCDP(1), strategy="identity")
    assert session.budget.spent.value == 0
    assert not [e for e in session.transcript() if e.get("charge")]


def test_a_schema_that_is_not_the_tables_is_refused():
    session = ek.protect(raw(50), SCHEMA, ek.ZCDP(1))
    other = ek.Schema(sex=["F", "M"], age=ek.Integer(0, 120))
    with pytest.raises(ValueError, match="the table was loaded as"):
        session.answer([ek.query().groupby("age").count()], ek.ZCDP(1), schema=other)
    assert session.budget.spent.value == 0


def test_filters_inside_a_bin_are_stated():
    """decade has bins of 10 years: >= 30 is a bin edge, >= 35 is not (its bin passes or fails whole)."""
    results = ek.answer(raw(200), [ek.query().where(ek.attr("decade") >= 35).name("inside").count(),
                                   ek.query().where(ek.attr("decade") >= 30).name("on edge").count()],
                        ek.ZCDP(1), schema=SCHEMA, strategy="identity", seed=0)
    assert "decade >= 35: the value falls inside a bin" in results["inside"].accounts_for[0]
    assert "inside a bin" not in results["on edge"].accounts_for[0]
    assert "decade: values outside [0, 99] are clamped" in results["on edge"].accounts_for[0]


def test_repeated_result_names_are_refused():
    with pytest.raises(ValueError, match="same name"):
        ek.answer(raw(20), [ek.query().count(), ek.query().count()], ek.ZCDP(1), schema=SCHEMA)


def test_a_kernel_predicate_on_a_binned_column_compares_raw_numbers_by_their_bins(tmp_path):
    """A plan's own where(attr("age") >= 30) on Integer(18, 90) means age 30, not code 30 (age 48): the kernel
    reads a number on a "numbers" attribute through the same bin rule as the rows, in numpy and in DuckDB; the
    analyst's session over the protocol gets the same count."""
    schema = ek.Schema(age=ek.Integer(18, 90), sex=["F", "M"])
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"age": rng.integers(10, 100, 500), "sex": rng.choice(["F", "M"], 500)})
    ages = frame.age.clip(18, 90)
    predicates = [(ek.attr("age") >= 30, ages >= 30), (ek.attr("age").between(20, 39), ages.between(20, 39)),
                  (ek.attr("age").isin([18, 90, 95]), ages.isin([18, 90])), (ek.attr("age") < 5, ages < 5),
                  (ek.attr("age") >= 200, ages >= 200), (ek.attr("age") <= 200, ages <= 200),
                  (ek.attr("age") > -3, ages > -3)]
    tables = [open_table(frame, schema)]
    if pytest.importorskip("duckdb"):
        frame.to_parquet(tmp_path / "t.parquet")
        tables.append(open_table(str(tmp_path / "t.parquet"), schema, "duckdb"))
    for table in tables:
        for predicate, expected in predicates:
            assert table.count(predicate) == int(expected.sum()), predicate
    session = ek.protect(frame, schema, ek.PureDP(1))
    results = session.answer([ek.query().where(ek.attr("age") >= 30).count()], ek.PureDP(1), strategy="identity")
    assert abs(results["count where ..."].answer[0] - (ages >= 30).sum()) < 10 * results["count where ..."]["std"][0]
    with pytest.raises(ek.KernelError, match="holds numbers: compare it with a number"):
        session.source.where(ek.attr("age") >= "old")


@pytest.mark.parametrize("value, says", [("1" + "0" * 400, None), ('"abc"', "holds numbers: compare it with a number")])
def test_a_remote_predicate_on_a_binned_column_with_a_huge_or_text_value(value, says):
    """Through the JSON protocol, as an analyst sends it: an integer past the float range compares as a number
    beyond the bounds (no bin: no row passes), and text on a numbers column is refused with a plain reason; both
    decided from the request alone, with nothing charged."""
    from ektelo_ng.kernel.predicate import Compare, leaf_codes
    from ektelo_ng.kernel.service import Kernel

    schema = ek.Schema(income=ek.Numeric(0, 1000, bins=10))
    kernel = Kernel(load_table({"income": [3.0, 500.0, 2000.0]}, schema.domain()), ek.PureDP(1))
    root = next(iter(json.loads(kernel.handle_json('{"op": "budget"}'))["per_source"]))
    where = ('{"op": "where", "source": "%s", "predicate": {"kind": "compare", "attribute": "income", "op": ">=", '
             '"value": %s}}' % (root, value))
    reply = json.loads(kernel.handle_json(where))
    if says is None:
        assert reply["kind"] == "source", reply
        assert leaf_codes(Compare(attribute="income", op=">=", value=int(value)), schema.domain()) == [10]
        assert leaf_codes(Compare(attribute="income", op=">=", value=-int(value)), schema.domain()) == [-1]
    else:
        assert reply["kind"] == "error" and says in reply["message"], reply
    assert json.loads(kernel.handle_json('{"op": "budget"}'))["spent"]["epsilon"] == "0"
