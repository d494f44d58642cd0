"""The geography of a census release as a hierarchy: the nation, its 51 states (with D.C.) and 3,143 counties.

``counties_2010()`` reads the shipped table of the 2010 Census's county-equivalents (``data/counties_2010.csv``: the
Census Bureau's public-domain counts, ``data/NOTICE.md`` says where from): 5-digit FIPS code, name, state and 2010
population, in FIPS order, so a county's code in a Person table is its row (0..3142) and its state's code is the
state's position in ``census.STATES``. ``nation_states_counties()`` makes the tree the hierarchical estimate runs on
(``operators.hierarchy``), for the whole country or for some states.

>>> counties = counties_2010()
>>> len(counties), counties.fips[0], counties.name[0], int(counties.population.sum())
(3143, '01001', 'Autauga County', 308745538)
>>> geography = nation_states_counties(states=[10])  # Georgia
>>> geography.hierarchy.units, geography.name[:2], geography.level[-1]
(161, ('United States', 'Georgia'), 'county')
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import numpy as np

from .census import NATION, STATES
from .hierarchy import Hierarchy

#: The levels of the census geography here, top down.
LEVELS = ("nation", "state", "county")
#: FIPS codes of the 51 states (``STATES`` order).
STATE_FIPS = (
    "01", "02", "04", "05", "06", "08", "09", "10", "11", "12", "13", "15", "16", "17", "18", "19", "20", "21", "22",
    "23", "24", "25", "26", "27", "28", "29", "30", "31", "32", "33", "34", "35", "36", "37", "38", "39", "40", "41",
    "42", "44", "45", "46", "47", "48", "49", "50", "51", "53", "54", "55", "56",
)  # fmt: skip


@dataclass(frozen=True, eq=False)
class Counties:
    """County-equivalents, one entry per county: FIPS code, name, state code (0..50) and 2010 population."""

    fips: tuple[str, ...]
    name: tuple[str, ...]
    state: np.ndarray
    population: np.ndarray

    def __len__(self) -> int:
        return len(self.fips)

    def in_state(self, state: int) -> np.ndarray:
        """The county codes (rows) of one state, in FIPS order."""
        return np.flatnonzero(self.state == state)


@cache
def counties_2010() -> Counties:
    """The 3,143 county-equivalents of the 2010 Census (50 states and D.C.), in FIPS order."""
    with files(__package__).joinpath("data/counties_2010.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    codes = {name: i for i, name in enumerate(STATES)}
    state = np.array([codes[r["state"]] for r in rows], dtype=np.int64)
    population = np.array([int(r["population"]) for r in rows], dtype=np.int64)
    state.setflags(write=False)
    population.setflags(write=False)
    return Counties(tuple(r["fips"] for r in rows), tuple(r["name"] for r in rows), state, population)


@dataclass(frozen=True, eq=False)
class Geography:
    """A tree of geographic units (nation, then states, then each state's counties: parents first) with each
    unit's level, FIPS code ("US" for the nation), name, state code (-1 for the nation), county code (the row of
    ``counties_2010()``; -1 above counties) and 2010 population."""

    hierarchy: Hierarchy
    level: tuple[str, ...]
    fips: tuple[str, ...]
    name: tuple[str, ...]
    state: np.ndarray
    county: np.ndarray
    population: np.ndarray

    def units(self, level: str) -> np.ndarray:
        """The units of one level, in order."""
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}: the levels are {', '.join(LEVELS)}")
        return np.flatnonzero(np.array(self.level) == level)


def nation_states_counties(states: Sequence[int] | None = None, counties: Counties | None = None) -> Geography:
    """The nation > state > county tree of ``states`` (codes 0..50; default all 51) and their ``counties``
    (default ``counties_2010()``). The nation is the sum of the states given."""
    counties = counties_2010() if counties is None else counties
    chosen = list(range(len(STATES))) if states is None else sorted({int(s) for s in states})
    if not chosen or chosen[0] < 0 or chosen[-1] >= len(STATES):
        raise ValueError(f"states must be codes 0..{len(STATES) - 1} (census.STATES), got {states}")
    parent, level, fips, name, state, county = [-1], ["nation"], ["US"], [NATION], [-1], [-1]
    for s in chosen:
        parent.append(0)
        level.append("state")
        fips.append(STATE_FIPS[s])
        name.append(STATES[s])
        state.append(s)
        county.append(-1)
    for position, s in enumerate(chosen, start=1):
        for c in counties.in_state(s):
            parent.append(position)
            level.append("county")
            fips.append(counties.fips[c])
            name.append(counties.name[c])
            state.append(s)
            county.append(int(c))
    county_ = np.array(county)
    population = np.where(county_ >= 0, counties.population[np.maximum(county_, 0)], 0)
    tree = Hierarchy(np.array(parent))
    for v in reversed(range(1, tree.units)):  # children last: states sum their counties, then the nation its states
        population[tree.parent[v]] += population[v]
    return Geography(tree, tuple(level), tuple(fips), tuple(name), np.array(state), county_, population)
