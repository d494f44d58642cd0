"""Tables and predicates against brute-force Python evaluation; every load path; bad input refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.predicate import And, Between, Compare, In, Not, Or, Predicate, validate_predicate
from ektelo_ng.operators.predicates import attr
from ektelo_ng.session import open_table
from ektelo_ng.kernel.table import load_table
from pydantic import TypeAdapter

from tests.helpers import predicate_trees

PredicateAdapter = TypeAdapter(Predicate)  # how a predicate travels in a request

DOMAIN = Domain.from_dict({"sex": ["F", "M"], "age": 6, "zone": 4})


def random_rows(seed, rows=300):
    rng = np.random.default_rng(seed)
    return {"sex": rng.choice(["F", "M"], rows), "age": rng.integers(0, 6, rows), "zone": rng.integers(0, 4, rows)}


def brute_histogram(rows, names, keep):
    sizes = {"sex": 2, "age": 6, "zone": 4}
    counts = np.zeros([sizes[n] for n in names], dtype=np.int64)
    for i in range(len(rows["age"])):
        if keep(i):
            index = tuple((["F", "M"].index(rows[n][i]) if n == "sex" else int(rows[n][i])) for n in names)
            counts[index] += 1
    return counts


leaf = st.one_of(
    st.builds(Compare, attribute=st.just("age"), op=st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
              value=st.integers(-1, 7)),
    st.builds(Between, attribute=st.just("zone"), low=st.integers(0, 3), high=st.integers(0, 3)),
    st.builds(In, attribute=st.just("sex"), values=st.lists(st.sampled_from(["F", "M"]), min_size=1, max_size=2)),
)
predicates = predicate_trees(leaf, max_leaves=6)


def brute(predicate, rows, i):
    if isinstance(predicate, And):
        return all(brute(t, rows, i) for t in predicate.terms)
    if isinstance(predicate, Or):
        return any(brute(t, rows, i) for t in predicate.terms)
    if isinstance(predicate, Not):
        return not brute(predicate.term, rows, i)
    value = rows[predicate.attribute][i]
    if isinstance(predicate, Compare):
        return {"==": value == predicate.value, "!=": value != predicate.value, "<": value < predicate.value,
                "<=": value <= predicate.value, ">": value > predicate.value, ">=": value >= predicate.value}[predicate.op]
    if isinstance(predicate, Between):
        return predicate.low <= value <= predicate.high
    return value in predicate.values


@settings(max_examples=80, deadline=None)
@given(predicates, st.integers(0, 10**6))
def test_predicates_and_histograms_match_brute_force(predicate, seed):
    rows = random_rows(seed, 120)
    table = load_table(rows, DOMAIN)
    validate_predicate(predicate, DOMAIN)
    np.testing.assert_array_equal(
        table.histogram([0, 2], predicate), brute_histogram(rows, ["sex", "zone"], lambda i: brute(predicate, rows, i))
    )
    assert table.count(predicate) == sum(brute(predicate, rows, i) for i in range(120))
    assert PredicateAdapter.validate_json(PredicateAdapter.dump_json(predicate)) == predicate


def test_full_histogram_and_every_load_path(tmp_path):
    rows = random_rows(1)
    expected = brute_histogram(rows, ["sex", "age", "zone"], lambda i: True)
    codes = np.column_stack([(rows["sex"] == "M").astype(int), rows["age"], rows["zone"]])
    structured = np.rec.fromarrays(codes.T, names="sex,age,zone")
    csv = tmp_path / "t.csv"
    csv.write_text("sex,age,zone\n" + "\n".join(f"{s},{a},{z}" for s, a, z in zip(*rows.values())) + "\n")
    for source in (rows, codes, structured, csv, str(csv)):
        np.testing.assert_array_equal(open_table(source, DOMAIN).histogram([0, 1, 2]), expected)
    with pytest.raises(TypeError, match="mapping of column name"):
        load_table(codes, DOMAIN)  # the kernel takes columns; formats are read at the front door


def test_dataframes_load_like_dicts():
    pandas = pytest.importorskip("pandas")
    rows = random_rows(2)
    expected = brute_histogram(rows, ["sex", "age", "zone"], lambda i: True)
    np.testing.assert_array_equal(open_table(pandas.DataFrame(rows), DOMAIN).histogram([0, 1, 2]), expected)


def test_builder_makes_the_models():
    assert (attr("age") >= 3) == Compare(attribute="age", op=">=", value=3)
    assert attr("age").between(1, 2) == Between(attribute="age", low=1, high=2)
    both = (attr("sex") == "F") & ~attr("zone").isin([1])
    assert both == And(terms=[Compare(attribute="sex", op="==", value="F"), Not(term=In(attribute="zone", values=[1]))])


@pytest.mark.parametrize(
    "rows, message",
    [
        ({"sex": ["F"], "age": [6], "zone": [0]}, "'age': 1 row"),
        ({"sex": ["F"], "age": [-1], "zone": [0]}, "outside 0..5"),
        ({"sex": ["F"], "age": [1e300], "zone": [0]}, "outside 0..5"),
        ({"sex": ["F"], "age": [1.5], "zone": [0]}, "non-integer"),
        ({"sex": ["F"], "age": [np.nan], "zone": [0]}, "missing or non-finite"),
        ({"sex": ["Q"], "age": [1], "zone": [0]}, "unknown label"),
        ({"sex": ["F"], "age": [1]}, "missing \\['zone'\\]"),
        ({"sex": ["F"], "age": [1], "zone": [0], "x": [1]}, "unknown \\['x'\\]"),
        ({"sex": ["F", "M"], "age": [1], "zone": [0]}, "different lengths"),
        ({"sex": ["F"], "age": ["old"], "zone": [0]}, "holds text"),
    ],
)
def test_bad_tables_name_the_problem(rows, message):
    with pytest.raises(ValueError, match=message):
        load_table(rows, DOMAIN)


def test_bad_predicates_and_files(tmp_path):
    with pytest.raises(ValueError, match="unknown attribute"):
        validate_predicate(attr("income") > 3, DOMAIN)
    with pytest.raises(ValueError, match="has no labels"):
        validate_predicate(attr("age") == "young", DOMAIN)
    with pytest.raises(ValueError, match="not a value"):
        validate_predicate(attr("sex") == "X", DOMAIN)
    with pytest.raises(ValueError):
        PredicateAdapter.validate_json('{"kind": "compare", "attribute": "age", "op": "~=", "value": 1}')
    with pytest.raises(FileNotFoundError):
        open_table(tmp_path / "missing.csv", DOMAIN)
    (tmp_path / "short.csv").write_text("sex,age,zone\nF,1\n")
    with pytest.raises(ValueError, match="do not have 3 fields"):
        open_table(tmp_path / "short.csv", DOMAIN)


def test_unfiltered_histograms_are_kept_but_callers_get_their_own_copy():
    table = load_table({"a": np.array([0, 1, 1, 2]), "b": np.array([1, 1, 0, 0])}, Domain.from_dict({"a": 3, "b": 2}))
    first = table.histogram([0])
    first[:] = 99  # a caller scribbling on its answer
    np.testing.assert_array_equal(table.histogram([0]), [1, 2, 1])
    np.testing.assert_array_equal(table.histogram([1, 0]), [[0, 1], [1, 1], [1, 0]])
    np.testing.assert_array_equal(table.histogram([0], Compare(attribute="b", op="==", value=1)), [1, 1, 0])
