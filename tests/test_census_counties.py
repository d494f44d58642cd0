"""ektelo_ng.census_counties: synthetic Person records with 2010 county counts, streamed state by state."""

from __future__ import annotations

import numpy as np
import pytest

from ektelo_ng.census_counties import county_person_chunks, county_person_domain, county_rows, write_county_persons
from ektelo_ng.census_persons import HISPANIC_SHARE
from ektelo_ng.operators.census import PERSON, STATES
from ektelo_ng.operators.geography import counties_2010


def test_county_rows_are_the_2010_counts_at_scale_one_and_apportioned_below():
    counties = counties_2010()
    np.testing.assert_array_equal(county_rows(1.0), counties.population)
    for scale in (1e-3, 3.7e-5):
        rows = county_rows(scale)
        quota = scale * counties.population
        assert rows.sum() == round(scale * counties.population.sum())
        assert np.all(np.abs(rows - quota) < 1)  # largest remainders: within one row of its share
    with pytest.raises(ValueError, match="scale"):
        county_rows(-1.0)


def _gather(chunks):
    columns = {}
    for chunk in chunks:
        for name, values in chunk.items():
            columns.setdefault(name, []).append(values)
    return {name: np.concatenate(values) for name, values in columns.items()}


def test_chunks_hold_one_state_each_and_the_county_margins_exactly():
    counties, scale, states = counties_2010(), 2e-4, [4, 8, 43]  # California, D.C., Texas
    chunks = list(county_person_chunks(scale, seed=1, chunk_rows=2000, states=states))
    assert all(np.unique(chunk["state"]).size == 1 and chunk["state"].size <= 2000 for chunk in chunks)
    assert [int(c["state"][0]) for c in chunks] == sorted(int(c["state"][0]) for c in chunks)  # state by state
    rows = _gather(chunks)
    assert list(rows) == ["state", "county", "race", "hispanic", "sex", "age", "relationship"]
    expected = np.where(np.isin(counties.state, states), county_rows(scale), 0)
    np.testing.assert_array_equal(np.bincount(rows["county"], minlength=len(counties)), expected)
    np.testing.assert_array_equal(counties.state[rows["county"]], rows["state"])
    domain = county_person_domain()
    assert domain.names[0] == "county" and domain.size == 3143 * PERSON.size
    for name, size in zip(domain.names[1:], domain.sizes[1:]):
        assert 0 <= rows[name].min() and rows[name].max() < size
    # Hispanic origin given the state: within 5 binomial standard deviations (fails by chance < 1e-6 per state)
    for state in states:
        mine = rows["hispanic"][rows["state"] == state]
        share = HISPANIC_SHARE.get(STATES[state], 0.08)
        assert abs(mine.mean() - share) < 5 * np.sqrt(share * (1 - share) / mine.size)


def test_a_states_records_do_not_depend_on_the_others_generated():
    alone = _gather(county_person_chunks(1e-4, seed=7, chunk_rows=500, states=[5]))
    together = _gather(county_person_chunks(1e-4, seed=7, chunk_rows=500, states=[2, 5, 9]))
    mine = together["state"] == 5
    for name in alone:
        np.testing.assert_array_equal(together[name][mine], alone[name])
    other_seed = _gather(county_person_chunks(1e-4, seed=8, chunk_rows=500, states=[5]))
    assert not np.array_equal(other_seed["age"], alone["age"])


def test_the_table_is_written_by_state(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = write_county_persons(tmp_path / "persons", 1e-4, seed=2, chunk_rows=1000, states=[8, 45], progress=False)
    files = sorted(p.name for p in out.glob("*.parquet"))
    assert files[0] == "part-08-00000.parquet" and all(f.startswith(("part-08-", "part-45-")) for f in files)
    counties = np.concatenate([pq.read_table(out / f)["county"].to_numpy() for f in files])
    expected = county_rows(1e-4)[np.isin(counties_2010().state, [8, 45])]
    assert counties.size == expected.sum()
    with pytest.raises(ValueError, match="already holds"):
        write_county_persons(out, 1e-4, states=[8], progress=False)


def test_a_small_table_numbers_the_counties_in_the_geographys_order():
    from ektelo_ng.census_counties import county_table
    from ektelo_ng.operators.geography import nation_states_counties

    table, domain = county_table(1e-3, [45, 8], ["sex", "age"], seed=4)
    geography = nation_states_counties(states=[8, 45])
    counties = geography.county[geography.units("county")]
    assert domain == {"county": 15, "sex": 2, "age": 115} and list(table) == ["county", "sex", "age"]
    np.testing.assert_array_equal(np.bincount(table["county"], minlength=15), county_rows(1e-3)[counties])
