"""A synthetic Person table down to counties: ``census_persons``'s model with a county column and 2010 county counts.

Each county gets its share of the rows by its 2010 population (``operators.geography.counties_2010()``): at
``scale`` 1 exactly its 2010 count, 308,745,538 rows in all; at a smaller scale the rows are apportioned by largest
remainders, so every county's and state's count is fixed, not drawn. The other columns are drawn given the state as
``census_persons`` draws them (Hispanic origin given the state, race given Hispanic origin, age, sex given age,
relationship given age). The counties' joint distributions are their state's: only the counts differ by county.

Records come state by state, in chunks that never span two states, and each state draws from its own random stream
(seeded by ``seed`` and the state's code), so a state's records are the same whichever states are generated, in
any order, and no chunk holds more than one state's records: what a release streamed by state needs.

>>> rows = county_rows(1.0)
>>> int(rows.sum()), int(rows[0])  # the nation; Autauga County, Alabama
(308745538, 54571)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ektelo_ng.census_persons import parquet_folder, persons_in
from ektelo_ng.operators.census import PERSON, STATES
from ektelo_ng.operators.domains import Domain, as_domain
from ektelo_ng.operators.geography import Counties, counties_2010


def county_person_domain(counties: int = 3143) -> Domain:
    """The Person domain with the county (its row of ``counties_2010()``) first: 3,143 x 500,480 cells."""
    return as_domain({"county": int(counties), **dict(zip(PERSON.names, PERSON.sizes))})


def county_rows(scale: float, counties: Counties | None = None) -> np.ndarray:
    """Rows per county at ``scale`` of the 2010 population: round(scale x 308,745,538) in all, apportioned to the
    counties by their populations (largest remainders; exact at scale 1)."""
    counties = counties_2010() if counties is None else counties
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite share of the 2010 population >= 0, got {scale}")
    population = counties.population.astype(np.float64)
    total = int(round(scale * population.sum()))
    quota = total * population / population.sum()
    rows = np.floor(quota).astype(np.int64)
    rank = np.argsort(-(quota - rows), kind="stable")
    rows[rank[: total - rows.sum()]] += 1
    return rows


def county_person_chunks(scale: float, seed: int = 0, chunk_rows: int = 1 << 22,
                         states: Sequence[int] | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Person records at ``scale`` of the 2010 population, state by state (``states``: codes, default all 51, in
    FIPS order), in chunks of at most ``chunk_rows`` that each hold one state's records: dicts of code columns
    (state, county, race, hispanic, sex, age, relationship), the county as its row of ``counties_2010()``."""
    if int(chunk_rows) < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    counties = counties_2010()
    chosen = range(len(STATES)) if states is None else sorted({int(s) for s in states})
    if any(not 0 <= s < len(STATES) for s in chosen):
        raise ValueError(f"states must be codes 0..{len(STATES) - 1} (census.STATES), got {states}")
    return _chunks(county_rows(scale, counties), counties, list(chosen), int(seed), int(chunk_rows))


def _chunks(rows, counties: Counties, states: list[int], seed: int, chunk_rows: int):
    for state in states:
        rng = np.random.default_rng([seed, state])
        codes = counties.in_state(state)
        county = np.repeat(codes, rows[codes]).astype(np.int16)
        for start in range(0, county.size, chunk_rows):
            part = county[start : start + chunk_rows]
            in_state = np.full(part.size, state, dtype=np.int8)
            yield {"state": in_state, "county": part, **persons_in(rng, in_state)}


def county_table(scale: float, states: Sequence[int], attributes: Sequence[str], seed: int = 0
                 ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """A small table in memory for a release over some states' counties: the records of
    :func:`county_person_chunks`, with the county numbered 0.. in the order of
    ``geography.nation_states_counties(states)``'s counties, and the Person ``attributes`` kept; and its domain."""
    chosen = np.flatnonzero(np.isin(counties_2010().state, list(states)))
    columns: dict[str, list[np.ndarray]] = {}
    for chunk in county_person_chunks(scale, seed, states=states):
        for name in ("county", *attributes):
            columns.setdefault(name, []).append(chunk[name])
    table = {name: np.concatenate(parts) for name, parts in columns.items()}
    table["county"] = np.searchsorted(chosen, table["county"])
    sizes = dict(zip(PERSON.names, PERSON.sizes))
    return table, {"county": int(chosen.size), **{name: sizes[name] for name in attributes}}


def write_county_persons(path: str | Path, scale: float, seed: int = 0, chunk_rows: int = 1 << 22,
                         states: Sequence[int] | None = None, progress: bool = True) -> Path:
    """Write the records of :func:`county_person_chunks` as Parquet files ``part-SS-NNNNN.parquet`` (SS the state's
    code) in the directory ``path`` (made if missing; refused if it holds Parquet files already)."""
    chunks = county_person_chunks(scale, seed, chunk_rows, states)  # refuses bad arguments before making the folder
    pa, pq, out = parquet_folder(path)
    from tqdm import tqdm

    chosen = range(len(STATES)) if states is None else sorted({int(s) for s in states})
    total = int(county_rows(scale)[np.isin(counties_2010().state, list(chosen))].sum())
    parts: dict[int, int] = {}
    with tqdm(total=total, unit=" rows", unit_scale=True, desc="persons", disable=not progress) as bar:
        for chunk in chunks:
            state = int(chunk["state"][0])
            parts[state] = parts.get(state, -1) + 1
            pq.write_table(pa.table(chunk), out / f"part-{state:02d}-{parts[state]:05d}.parquet")
            bar.update(chunk["state"].size)
    return out
