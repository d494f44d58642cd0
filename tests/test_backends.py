"""numpy, DuckDB and Spark table backends: the same plan sees identical true histograms; bad rows are refused alike.

The tables are generated and written (Parquet and CSV) by DuckDB itself. Spark tests are marked ``spark``
and kept out of the default run (``python -m pytest -m spark``); both engines are skipped when absent.
"""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ektelo_ng as ek
from ektelo_ng.session import kernel_process, open_table
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.operators.matrix import Identity, Ones
from ektelo_ng.kernel.predicate import Between, Compare, In
from ektelo_ng.operators.predicates import attr
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.kernel.table import TableBackend, load_table
from ektelo_ng.plans import catalog
from tests.helpers import predicate_trees

ODD = 'odd "name", really'
LABELS = ("O'Brien", 'say "hi"', "a;b); DROP TABLE x; --")
DOMAIN = Domain.from_dict({"sex": ["F", "M"], "age": 6, "zone": 4, ODD: list(LABELS)})
ROWS = 3000
GENERATE = f"""
SELECT CASE hash(i, 1) % 3 WHEN 0 THEN 'F' WHEN 1 THEN ' M' ELSE 'M ' END AS sex,
       (hash(i, 2) % 6)::INTEGER AS age,
       (hash(i, 3) % 4)::DOUBLE AS zone,
       ['O''Brien', 'say "hi"', 'a;b); DROP TABLE x; --'][(hash(i, 4) % 3)::INTEGER + 1] AS "odd ""name"", really"
FROM range({ROWS}) t(i)
"""
PREDICATES = [
    None,
    attr("age") >= 2,
    attr("age") != 3,
    attr("zone").between(1, 2),
    attr("sex").isin(["M"]),
    attr(ODD) == "O'Brien",
    attr(ODD).isin(['say "hi"', LABELS[2]]),
    (attr("age") < 4) & ~(attr("zone") == 0),
    (attr("sex") == "F") | attr("age").between(-3, 1) | (attr("zone") > 9),
    ~((attr("age") <= 2) & attr("zone").isin([0, 3, 7])),
]
PROJECTIONS = [(), (0,), (2,), (1, 3), (0, 1, 2), (0, 1, 2, 3)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    duckdb = pytest.importorskip("duckdb")
    folder = tmp_path_factory.mktemp("backends")
    con = duckdb.connect()
    con.sql(GENERATE).write_parquet(str(folder / "t.parquet"))
    con.sql(GENERATE).write_csv(str(folder / "t.csv"), header=True)
    columns = con.read_parquet(str(folder / "t.parquet")).fetchnumpy()
    return folder, load_table(columns, DOMAIN)


@pytest.fixture(scope="module")
def duck(files):
    from ektelo_ng.kernel.backends.duckdb import DuckDBTable

    return DuckDBTable(DOMAIN, files[0] / "t.parquet")


def assert_same_histograms(table, reference, predicates=PREDICATES, projections=PROJECTIONS):
    for predicate in predicates:
        for attributes in projections:
            got, want = table.histogram(attributes, predicate), reference.histogram(attributes, predicate)
            assert got.dtype == np.int64 and got.shape == want.shape, (predicate, attributes)
            np.testing.assert_array_equal(got, want, err_msg=f"{predicate} {attributes}")
    assert table.count() == ROWS


# ---- the same plan on every backend ---------------------------------------------------------------------------
class Recording(TableBackend):
    """Wraps a backend and keeps every true histogram the kernel asked for (what the mechanisms add noise to)."""

    def __init__(self, backend: TableBackend):
        self.backend, self.seen = backend, []

    @property
    def domain(self):
        return self.backend.domain

    def histogram(self, attributes, predicate=None):
        counts = self.backend.histogram(attributes, predicate)
        self.seen.append((tuple(attributes), counts))
        return counts


def plan(session) -> list[np.ndarray]:
    root = session.source
    answers = [root.noisy_count("1/10").values]
    x = root.where((attr("age") >= 2) & ~attr("sex").isin(["M"])).project(["age", "zone"]).vectorize()
    answers.append(x.laplace(Identity(x.size), "1/10").values)
    y = root.where((attr(ODD) == "O'Brien") | attr("zone").between(1, 2)).project([ODD, "sex"]).vectorize()
    answers.append(y.laplace(Ones(1, y.size), "1/10").values)
    estimate = catalog["HB"](root.project(["age"]), Identity(6), ek.PureDP(Fraction(1, 10)))
    answers.append(np.asarray(getattr(estimate, "x", estimate)))
    z = root.vectorize()
    answers.append(z.laplace(Identity(z.size), "1/10").values)
    return answers


def run_plan(backend: TableBackend):
    recording = Recording(backend)
    kernel = Kernel(recording, ek.PureDP(10), seed=7)
    return recording.seen, plan(ek.Session(kernel.handle_json))


def assert_same_plan(backend: TableBackend, reference: TableBackend):
    seen, answers = run_plan(backend)
    want_seen, want_answers = run_plan(reference)
    assert [a for a, _ in seen] == [a for a, _ in want_seen] and len(seen) >= 5
    for (_, got), (_, want) in zip(seen, want_seen):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(answers, want_answers):
        np.testing.assert_array_equal(got, want)  # same seed, same true counts: the same noisy answers


# ---- DuckDB ---------------------------------------------------------------------------------------------------
def test_duckdb_histograms_match_numpy_for_every_predicate_and_projection(files, duck):
    folder, reference = files
    assert_same_histograms(duck, reference)
    from ektelo_ng.kernel.backends.duckdb import DuckDBTable

    assert_same_histograms(DuckDBTable(DOMAIN, str(folder / "t.csv")), open_table(folder / "t.csv", DOMAIN))
    import duckdb

    con = duckdb.connect()
    con.sql(GENERATE).create("private")
    con.execute('CREATE SCHEMA "my schema"; CREATE VIEW "my schema".adults AS SELECT * FROM private WHERE age >= 0')
    for source in ("private", "main.private", "my schema.adults"):
        assert_same_histograms(DuckDBTable(DOMAIN, source, connection=con), reference, PREDICATES[:3], PROJECTIONS[:3])
    duckdb.sql(f"CREATE TABLE ektelo_test_default AS {GENERATE}")  # DuckDB's default connection
    try:
        assert_same_histograms(DuckDBTable(DOMAIN, "ektelo_test_default"), reference, PREDICATES[:2], PROJECTIONS[:2])
    finally:
        duckdb.sql("DROP TABLE ektelo_test_default")
    with pytest.raises(TypeError, match="a path or a table name"):
        DuckDBTable(DOMAIN, con.table("private"))


def test_duckdb_runs_the_same_plan(files, duck):
    assert_same_plan(duck, files[1])
    answers = []
    for table, backend in ((files[0] / "t.parquet", "duckdb"), (files[0] / "t.csv", "numpy")):
        x = ek.protect(table, DOMAIN, ek.PureDP(1), backend=backend, seed=3).source.project(["zone"]).vectorize()
        answers.append(x.laplace(Identity(4), "1/2").values)
    np.testing.assert_array_equal(*answers)


leaf = st.one_of(
    st.builds(Compare, attribute=st.sampled_from(["age", "zone"]), op=st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
              value=st.integers(-2, 8)),
    st.builds(Compare, attribute=st.just(ODD), op=st.sampled_from(["==", "!=", "<", ">="]), value=st.sampled_from(LABELS)),
    st.builds(Between, attribute=st.sampled_from(["age", "zone"]), low=st.integers(-1, 6), high=st.integers(-1, 6)),
    st.builds(In, attribute=st.just("sex"), values=st.lists(st.sampled_from(["F", "M", 0, 1, 5]), min_size=1, max_size=3)),
)
predicates = predicate_trees(leaf, max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(predicate=predicates, attributes=st.sets(st.integers(0, 3)))
def test_duckdb_matches_numpy_on_random_predicates(files, duck, predicate, attributes):
    np.testing.assert_array_equal(duck.histogram(attributes, predicate), files[1].histogram(attributes, predicate))


BASE = {"sex": ("VARCHAR", ["F", "M", "F"]), "age": ("BIGINT", [0, 5, 2]), "zone": ("DOUBLE", [0.0, 1.0, 3.0])}
BAD = [
    ("age", {"age": ("BIGINT", [0, 6, 2])}),
    ("age", {"age": ("INTEGER", [-1, 1, 2])}),
    ("age", {"age": ("DOUBLE", [0.0, 2.5, 1.0])}),
    ("age", {"age": ("VARCHAR", ["1", "old", "2"])}),
    ("age", {"age": ("BOOLEAN", [True, False, True])}),
    ("zone", {"zone": ("DOUBLE", [0.0, None, 1.0])}),
    ("zone", {"zone": ("DOUBLE", [0.0, float("nan"), 1.0])}),
    ("zone", {"zone": ("DOUBLE", [0.0, float("inf"), 1.0])}),
    ("zone", {"zone": ("DOUBLE", [0.0, 1e18, 1.0])}),
    ("zone", {"zone": ("DECIMAL(6,2)", [0.0, 1.5, 1.0])}),
    ("sex", {"sex": ("VARCHAR", ["F", "X", "M"])}),
    ("sex", {"sex": ("VARCHAR", ["F", None, "M"])}),
    ("age", {"sex": ("VARCHAR", ["F", "M", "M"]), "age": ("BIGINT", [9, 1, 1]), "zone": ("DOUBLE", [7.0, 1.0, 1.0])}),
]
HUGE = ("zone", {"zone": ("DOUBLE", [0.0, 1e300, 1.0])})  # engines only: load_table's int64 cast warns on it
SMALL = Domain.from_dict({"sex": ["F", "M"], "age": 6, "zone": 4})


def write_bad(folder, name, columns):
    import duckdb

    columns = {**BASE, **columns}
    con = duckdb.connect()
    con.execute("CREATE TABLE t (" + ", ".join(f"{n} {kind}" for n, (kind, _) in columns.items()) + ")")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", list(zip(*(values for _, values in columns.values()))))
    con.table("t").write_parquet(str(folder / f"{name}.parquet"))
    con.table("t").write_csv(str(folder / f"{name}.csv"), header=True)
    return folder / f"{name}.parquet", folder / f"{name}.csv"


@pytest.mark.parametrize("column, columns", BAD + [HUGE])
def test_duckdb_refuses_out_of_domain_rows_like_numpy(tmp_path, column, columns):
    pytest.importorskip("duckdb")
    from ektelo_ng.kernel.backends.duckdb import DuckDBTable

    parquet, csv = write_bad(tmp_path, "bad", columns)
    message = f"column {column!r}"
    if (column, columns) != HUGE:
        with pytest.raises(ValueError, match=message):
            open_table(csv, SMALL)
    for path in (parquet, csv, str(parquet)):
        with pytest.raises(ValueError, match=message):
            DuckDBTable(SMALL, path)


def test_duckdb_refuses_other_columns_and_missing_files(tmp_path):
    pytest.importorskip("duckdb")
    from ektelo_ng.kernel.backends.duckdb import DuckDBTable

    parquet, _ = write_bad(tmp_path, "good", {})
    assert DuckDBTable(SMALL, parquet).count() == 3
    with pytest.raises(ValueError, match=r"missing \[\], unknown \['zone'\]"):
        DuckDBTable(Domain.from_dict({"sex": ["F", "M"], "age": 6}), parquet)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DuckDBTable(SMALL, tmp_path / "none.parquet")
    with pytest.raises(ValueError, match="unknown table backend"):
        open_table(parquet, SMALL, "sqlite")


def test_a_table_changed_after_validation_is_refused_not_miscounted():
    duckdb = pytest.importorskip("duckdb")
    from ektelo_ng.kernel.backends.duckdb import DuckDBTable

    con = duckdb.connect()
    con.execute("CREATE TABLE t (sex VARCHAR, age BIGINT, zone DOUBLE)")
    con.execute("INSERT INTO t VALUES ('F', 1, 0), ('M', 2, 3)")
    table = DuckDBTable(SMALL, "t", connection=con)
    np.testing.assert_array_equal(table.histogram([1]), [0, 1, 1, 0, 0, 0])
    for change in ("UPDATE t SET age = 7 WHERE sex = 'M'", "UPDATE t SET age = NULL", "UPDATE t SET sex = 'X'"):
        con.execute(change)
        with pytest.raises((ValueError, TypeError)):
            table.histogram([0, 1])


def test_missing_engines_say_which_extra_to_install(monkeypatch, tmp_path, capsys):
    from ektelo_ng.cli import main
    from ektelo_ng.kernel.backends.duckdb import DuckDBTable

    monkeypatch.setitem(sys.modules, "duckdb", None)
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[duckdb\]"'):
        DuckDBTable(SMALL, "t.parquet")
    with pytest.raises(ImportError, match=r'pip install -e "\.\[spark\]"'):
        ek.protect("t.parquet", SMALL, ek.PureDP(1), backend="spark")
    (tmp_path / "domain.json").write_text(SMALL.model_dump_json())
    (tmp_path / "t.parquet").write_bytes(b"")
    assert main(["kernel", "init", str(tmp_path / "service"), "--budget", "epsilon=1", "--no-tls"]) == 0
    serve = ["kernel", "serve", "--table", str(tmp_path / "t.parquet"), "--domain", str(tmp_path / "domain.json"),
             "--dir", str(tmp_path / "service"), "--backend", "duckdb"]
    assert main(serve) == 2 and 'pip install -e ".[duckdb]"' in capsys.readouterr().err


def serve(table, domain_file, *extra):
    with kernel_process(table, domain_file, ek.PureDP(1), "--seed", "5", *extra, timeout=120) as session:
        x = session.source.where(attr("age") > 1).project(["age"]).vectorize()
        return x.laplace(Identity(6), "1/2").values


def test_kernel_serve_with_the_duckdb_backend(files):
    folder = files[0]
    (folder / "domain.json").write_text(DOMAIN.model_dump_json())
    duck_answer = serve(folder / "t.parquet", folder / "domain.json", "--backend", "duckdb")
    np.testing.assert_array_equal(duck_answer, serve(folder / "t.csv", folder / "domain.json"))


# ---- Spark ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark():
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (pyspark_sql.SparkSession.builder.master("local[2]").appName("ektelo-ng tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.spark
def test_spark_histograms_and_plan_match_numpy(files, spark):
    from ektelo_ng.kernel.backends.spark import SparkTable

    folder, reference = files
    table = SparkTable(DOMAIN, folder / "t.parquet")
    assert_same_histograms(table, reference)
    assert_same_plan(table, reference)
    csv = SparkTable(DOMAIN, str(folder / "t.csv"), spark=spark)
    assert_same_histograms(csv, open_table(folder / "t.csv", DOMAIN), PREDICATES[::2], PROJECTIONS[::2])
    spark.read.parquet(str(folder / "t.parquet")).createOrReplaceTempView("private")
    for source in ("private", spark.table("private").filter("age >= 0")):
        assert_same_histograms(SparkTable(DOMAIN, source), reference, PREDICATES[:2], PROJECTIONS[:3])


@pytest.mark.spark
def test_spark_refuses_out_of_domain_rows_like_numpy(tmp_path, spark):
    pytest.importorskip("duckdb")
    from ektelo_ng.kernel.backends.spark import SparkTable

    for i, (column, columns) in enumerate(BAD + [HUGE]):
        parquet, csv = write_bad(tmp_path, f"bad{i}", columns)
        for path in (parquet, csv):
            with pytest.raises(ValueError, match=f"column {column!r}"):
                SparkTable(SMALL, path)
    parquet, _ = write_bad(tmp_path, "good", {})
    assert SparkTable(SMALL, parquet).count() == 3
    with pytest.raises(ValueError, match="do not match the domain"):
        SparkTable(Domain.from_dict({"sex": ["F", "M"], "age": 6}), parquet)


@pytest.mark.spark
def test_kernel_serve_with_the_spark_backend(files):
    folder = files[0]
    (folder / "domain.json").write_text(DOMAIN.model_dump_json())
    spark_answer = serve(folder / "t.parquet", folder / "domain.json", "--backend", "spark", "--spark-master", "local[1]")
    np.testing.assert_array_equal(spark_answer, serve(folder / "t.csv", folder / "domain.json"))


@pytest.mark.parametrize("backend", ["numpy", "duckdb"])
def test_marginal_plans_on_a_100_attribute_table_count_only_their_marginals(backend, tmp_path):
    """ResidualPlanner on a 100-attribute table: only the closure's small projections are ever vectorized."""
    if backend == "duckdb":
        pytest.importorskip("duckdb")
    import ektelo_ng as ek
    from ektelo_ng.plans.residual_planner import residual_planner

    rng = np.random.default_rng(0)
    names = [f"q{i}" for i in range(100)]
    columns = {n: rng.integers(0, 3, 400) for n in names}
    domain = ek.Domain.from_dict({n: 3 for n in names})
    if backend == "duckdb":
        import duckdb

        con = duckdb.connect()
        con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"unnest(?) AS {n}" for n in names), [columns[n].tolist() for n in names])
        path = tmp_path / "wide.parquet"
        con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
        table = path
    else:
        table = columns
    session = ek.protect(table, domain, ek.ZCDP(1), seed=0, backend=backend)
    result = residual_planner(session.source, [(0, 1), (98, 99)], ek.ZCDP(1))
    truth = np.zeros((3, 3))
    np.add.at(truth, (columns["q98"], columns["q99"]), 1)
    assert np.abs(result.marginal((98, 99)) - truth).max() < 20
    sizes = [d["size"] for _, d in session.lineage().nodes(data=True) if d["kind"] == "vector"]
    assert max(sizes) <= 9 and session.budget.spent == ek.ZCDP(1)
