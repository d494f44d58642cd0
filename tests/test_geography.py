"""operators.geography: the shipped 2010 county table and the nation > state > county tree."""

from __future__ import annotations

import numpy as np
import pytest

from ektelo_ng.census_persons import STATE_THOUSANDS
from ektelo_ng.operators.census import NATION, STATES
from ektelo_ng.operators.geography import STATE_FIPS, counties_2010, nation_states_counties


def test_the_county_table_is_the_2010_census():
    counties = counties_2010()
    assert len(counties) == 3143 and len(set(counties.fips)) == 3143
    assert list(counties.fips) == sorted(counties.fips)  # FIPS order: a county's code is its row
    assert int(counties.population.sum()) == 308_745_538  # the 2010 resident population
    # each county's code starts with its state's, and every state has counties
    assert all(code[:2] == STATE_FIPS[s] for code, s in zip(counties.fips, counties.state))
    assert set(counties.state.tolist()) == set(range(len(STATES)))
    # the states' totals agree with the generator's 2010 state populations (in thousands)
    totals = np.bincount(counties.state, weights=counties.population)
    np.testing.assert_array_equal(np.rint(totals / 1000), STATE_THOUSANDS)
    by_code = dict(zip(counties.fips, zip(counties.name, counties.population.tolist())))
    assert by_code["06037"] == ("Los Angeles County", 9_818_605)
    assert by_code["48301"] == ("Loving County", 82)
    assert by_code["11001"] == ("District of Columbia", 601_723)
    # the 2010 geography, not a later one
    assert by_code["51515"][0] == "Bedford city" and by_code["46113"][0] == "Shannon County"
    assert "46102" not in by_code and "02158" not in by_code


def test_the_tree_is_nation_then_states_then_their_counties():
    geography = nation_states_counties()
    tree = geography.hierarchy
    assert tree.units == 1 + 51 + 3143
    assert geography.name[0] == NATION and geography.fips[0] == "US"
    states, counties = geography.units("state"), geography.units("county")
    assert states.tolist() == list(range(1, 52)) and np.all(tree.parent[states] == 0)
    assert np.all(geography.state[tree.parent[counties]] == geography.state[counties])
    # parents are the sums of their children
    for v in np.flatnonzero(tree.children):
        assert geography.population[v] == geography.population[tree.parent == v].sum()
    assert geography.population[0] == 308_745_538


def test_a_few_states_make_a_smaller_tree():
    geography = nation_states_counties(states=[8, 45])  # D.C. (one county-equivalent) and Vermont (14)
    assert geography.hierarchy.units == 1 + 2 + 1 + 14
    assert geography.name[1:3] == ("District of Columbia", "Vermont")
    assert geography.population[0] == 601_723 + 625_741
    with pytest.raises(ValueError, match="codes 0..50"):
        nation_states_counties(states=[51])
    with pytest.raises(ValueError, match="unknown level"):
        geography.units("tract")


def test_the_docstring_examples_of_the_county_modules_run():
    import doctest

    import ektelo_ng.census_counties
    import ektelo_ng.operators.geography
    import ektelo_ng.operators.hierarchy

    for module in (ektelo_ng.operators.geography, ektelo_ng.operators.hierarchy, ektelo_ng.census_counties):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
