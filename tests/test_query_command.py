"""``ektelo-ng query``: a small labelled CSV answered end to end from SQL, and every refusal made before the table
is read or anything spent."""

from __future__ import annotations

import numpy as np
import pytest

import ektelo_ng
from ektelo_ng.cli import main

pd = pytest.importorskip("pandas")  # query results are DataFrames

SCHEMA = """sex: [F, M]
region: {categorical: [north, south], other: elsewhere}
age: {integer: [0, 99]}
income: {numeric: [0, 1000], bins: 10}
"""


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    rows = 400
    frame = pd.DataFrame({"sex": rng.choice(["F", "M"], rows), "region": rng.choice(["north", "south", "west"], rows),
                          "age": rng.integers(0, 100, rows), "income": rng.choice([50, 250, 950], rows)})
    frame.to_csv(tmp_path / "people.csv", index=False)
    (tmp_path / "people.yaml").write_text(SCHEMA)
    return tmp_path, frame


def command(folder, sql, *extra):
    return ["query", "--table", str(folder / "people.csv"), "--schema", str(folder / "people.yaml"), "--sql", sql,
            "--strategy", "identity", "--seed", "7", *extra]


def test_a_batch_from_sql_to_one_labelled_file_per_query(files, capsys):
    folder, frame = files
    sql = ("SELECT sex, region, COUNT(*) AS n FROM people GROUP BY sex, region; "
           "SELECT sex, SUM(income) AS total FROM people WHERE age >= 50 GROUP BY sex")
    assert main(command(folder, sql, "--budget", "epsilon=100000", "--out", str(folder / "out"))) == 0
    counts = pd.read_csv(folder / "out" / "n.csv")
    assert {"sex", "region", "answer", "std", "lower", "upper", "level", "accounts_for"} <= set(counts.columns)
    region = frame.region.where(frame.region.isin(["north", "south"]), "elsewhere")  # the schema's other label
    truth = frame.groupby([frame.sex, region]).size()
    for _, row in counts.iterrows():
        assert row.answer == pytest.approx(truth.get((row.sex, row.region), 0), abs=0.5)
    assert set(counts.region) == {"north", "south", "elsewhere"} and (counts.level == 0.95).all()
    totals = pd.read_csv(folder / "out" / "total.csv").set_index("sex").answer
    older = frame[frame.age >= 50]
    for sex in ("F", "M"):  # each value counts as its bin's midpoint: 50 -> 50, 250 -> 250, 950 -> 950
        assert totals[sex] == pytest.approx(older[older.sex == sex].income.sum(), abs=1)
    assert (folder / "out" / "README.txt").read_text().startswith("2 queries answered jointly")
    shown = capsys.readouterr().out
    assert "n: 6 rows" in shown and "total: 2 rows" in shown


def test_parquet_output_and_sql_from_a_file(files):
    pytest.importorskip("pyarrow")
    folder, frame = files
    (folder / "batch.sql").write_text("SELECT MEDIAN(age) AS median_age FROM people")
    assert main(command(folder, f"@{folder / 'batch.sql'}", "--budget", "epsilon=1000", "--format", "parquet",
                        "--out", str(folder / "out"))) == 0
    released = pd.read_parquet(folder / "out" / "median_age.parquet")
    assert abs(released.answer[0] - np.quantile(frame.age, 0.5, method="inverted_cdf")) <= 2


@pytest.fixture
def never_answered(monkeypatch):
    """ek.answer (which loads the table and spends) made to fail the test if reached."""

    def refuse(*args, **kwargs):
        raise AssertionError("the batch was answered")

    monkeypatch.setattr(ektelo_ng, "answer", refuse, raising=False)


@pytest.mark.parametrize("sql, message", [
    ("SELECT COUNT(*) FROM people LIMIT 3", "LIMIT is not supported"),
    ("SELECT salary, COUNT(*) FROM people GROUP BY salary", "unknown column 'salary'"),
    ("SELECT COUNT(*) FROM people WHERE sex = 'X'", "'X' is not a label of 'sex'"),
    ("SELECT COUNT(*) FROM people WHERE", "cannot parse the SQL"),
])
def test_bad_sql_is_refused_before_anything_is_read_or_spent(files, never_answered, capsys, sql, message):
    folder, _ = files
    assert main(command(folder, sql, "--out", str(folder / "out"))) == 2
    assert message in capsys.readouterr().err
    assert not (folder / "out").exists()


def test_an_unwritable_or_used_folder_is_refused_before_anything_is_spent(files, never_answered, capsys):
    folder, _ = files
    blocker = folder / "file"
    blocker.write_text("")
    assert main(command(folder, "SELECT COUNT(*) FROM people", "--out", str(blocker / "out"))) == 2
    assert "cannot write there" in capsys.readouterr().err
    used = folder / "used"
    used.mkdir()
    (used / "old.csv").write_text("")
    assert main(command(folder, "SELECT COUNT(*) FROM people", "--out", str(used))) == 2
    assert "the folder is not empty" in capsys.readouterr().err


def test_other_bad_input_is_refused_with_what_to_do(files, never_answered, capsys):
    folder, _ = files
    out = ["--out", str(folder / "out")]
    assert main(command(folder, "SELECT COUNT(*) FROM people", "--budget", "1", *out)) == 2
    assert "cannot read the budget '1'" in capsys.readouterr().err
    assert main(command(folder, "SELECT COUNT(*) FROM people", "--level", "95", *out)) == 2
    assert "--level must lie strictly between 0 and 1" in capsys.readouterr().err
    missing = ["query", "--table", str(folder / "nope.csv"), "--schema", str(folder / "people.yaml"),
               "--sql", "SELECT COUNT(*) FROM people", *out]
    assert main(missing) == 2
    assert "no such file" in capsys.readouterr().err


def test_help_explains_the_subset_and_the_schema_file(capsys):
    with pytest.raises(SystemExit):
        main(["query", "--help"])
    shown = capsys.readouterr().out
    assert "QUANTILE(col, p | [p, ...])" in shown and "income: {numeric: [0, 250000], bins: 50}" in shown
