"""Census releases down to counties: the hierarchical estimate through the kernel, at small sizes for now.

``small-*`` cases: a few states and their counties (``ektelo_ng.census_counties.county_table``: synthetic records at
a small share of the 2010 counts), a P1/P4/P12-like workload on hispanic x sex x age (1 + 2 + 2 + 46 = 51 answers per
unit, 460 cells), HDMM's strategy for it, every unit of every level measured through the kernel at the level's
public share of the budget (``ektelo_ng.census_hierarchy``), and the hierarchical estimate. Each case prints one
JSON line: seconds, RMSE per level against the true answers (the benchmark is the data owner), the RMSE the exact
variances predict, the share of 95% intervals covering the truth per level, the same for measuring each county
alone with the whole budget (shares 0, 0, 1), and the kernel requests with their bytes.

``nation-counties-duckdb``: the same for every county of the country (3,195 units, 10^-4 of the 2010 counts), the
records written as Parquet by state and counted by DuckDB.

``sf1-unit-request``: one unit's SF1 measurement (HDMM's strategy on the 500,480 Person cells) through the kernel,
the request and reply sizes and seconds, and what 3,195 such requests (the nation, 51 states and 3,143 counties)
would take through the existing operations.

``estimate-county-scale``: the hierarchical estimate alone on 3,195 units x 4,151 answers (synthetic local answers):
its seconds, and the non-negative integers'.

The county-level SF1 case from 3.1 x 10^8 persons is for a later session (docs/census-counties.md).
``python benchmarks/bench_census_counties.py [CASE...]``, each case in its own process.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main

import ektelo_ng as ek
from ektelo_ng.census_counties import county_person_domain, county_table, write_county_persons
from ektelo_ng.census_hierarchy import CountingTransport, release_levels
from ektelo_ng.operators import census
from ektelo_ng.operators.geography import LEVELS, nation_states_counties
from ektelo_ng.operators.matrix import Identity, Kronecker, Total, VStack
from ektelo_ng.operators.selection.hdmm import hdmm

ATTRIBUTES = ("hispanic", "sex", "age")
SHARES = (0.1, 0.2, 0.7)


def small_workload():
    """P1 (total), P4 (Hispanic origin), P12-like (sex, and sex by 5-year age groups) on hispanic x sex x age."""
    ages = census.age_groups(range(0, 116, 5)).matrix()
    return VStack([Kronecker([Total(2), Total(2), Total(115)]), Kronecker([Identity(2), Total(2), Total(115)]),
                   Kronecker([Total(2), Identity(2), Total(115)]), Kronecker([Total(2), Identity(2), ages])])  # fmt: skip


def _truth(geography, table, domain, workload) -> np.ndarray:
    """Every unit's true answers: counties from the records, states and the nation their sums."""
    tree, counties = geography.hierarchy, geography.units("county")
    flat = np.ravel_multi_index([table[name] for name in domain], tuple(domain.values()))
    x = np.zeros((tree.units, workload.shape[1]))
    x[counties] = np.bincount(flat, minlength=int(np.prod(list(domain.values())))).reshape(counties.size, -1)
    for v in reversed(range(1, tree.units)):  # children last: states sum their counties, then the nation its states
        x[tree.parent[v]] += x[v]
    return x @ workload.dense().T


def _per_level(geography, values: np.ndarray) -> dict[str, float]:
    return {level: round(float(values[geography.units(level)].mean()), 4) for level in LEVELS}


def _release(geography, table, domain, workload, strategy, budget, shares, parquet: Path | None = None) -> dict:
    """One release: from ``table`` in memory, or from the ``parquet`` folder holding the same records (every
    column of the generator, county numbered as in the whole country) with DuckDB."""
    if parquet is None:
        session = ek.protect(table, domain, budget)
    else:
        full = {"state": 51, **dict(zip(county_person_domain().names, county_person_domain().sizes))}
        session = ek.protect(str(parquet), full, budget, backend="duckdb")
    counting = session.transport = CountingTransport(session.transport)
    vector = session.source.vectorize(list(domain))
    start = time.perf_counter()
    done = release_levels(vector, geography, strategy, workload, budget, shares)
    seconds = time.perf_counter() - start
    truth = _truth(geography, table, domain, workload)
    covered = (done.lower <= truth) & (truth <= done.upper)
    return {"shares": list(shares), "release_seconds": round(seconds, 3),
            "rmse": {k: round(float(np.sqrt(v)), 3) for k, v in _per_level(geography, (done.answers - truth) ** 2).items()},
            "expected_rmse": {k: round(float(np.sqrt(v)), 3) for k, v in _per_level(geography, done.variances).items()},
            "coverage_95": _per_level(geography, covered), "interval": done.method,
            "requests": counting.requests, "bytes_sent": counting.sent, "bytes_received": counting.received,
            "largest_request_bytes": counting.largest_sent, "largest_reply_bytes": counting.largest_received}  # fmt: skip


def small(states: list[int], scale: float, budget) -> dict:
    geography = nation_states_counties(states=states)
    table, domain = county_table(scale, states, ATTRIBUTES)
    workload = small_workload()
    noise = "gaussian" if isinstance(budget, ek.ZCDP) else "laplace"
    strategy = hdmm(workload, noise=noise, seed=0)
    return {"states": [census.STATES[s] for s in states], "units": geography.hierarchy.units,
            "rows": int(table["county"].size), "budget": str(budget),
            "hierarchical": _release(geography, table, domain, workload, strategy, budget, SHARES),
            "counties_alone": _release(geography, table, domain, workload, strategy, budget, (0, 0, 1))}  # fmt: skip


def nation_counties_duckdb(scale: float, budget) -> dict:
    """Every county of the country (3,195 units) from Parquet files read by DuckDB, on the small workload."""
    import tempfile

    geography = nation_states_counties()
    table, domain = county_table(scale, range(51), ATTRIBUTES)
    workload = small_workload()
    strategy = hdmm(workload, noise="gaussian", seed=0)
    with tempfile.TemporaryDirectory() as folder:
        write_county_persons(Path(folder) / "persons", scale, progress=False)
        done = _release(geography, table, domain, workload, strategy, budget, SHARES, Path(folder) / "persons")
    return {"units": geography.hierarchy.units, "rows": int(table["county"].size), "budget": str(budget),
            "hierarchical": done}


def sf1_unit_request() -> dict:
    """One unit's SF1 measurement through the kernel, on a small national table of the Person domain."""
    from ektelo_ng.census_persons import person_chunks

    workload = census.SF1()
    strategy = hdmm(workload.matrix, noise="gaussian", seed=0)
    table = next(person_chunks(20_000, seed=0, chunk_rows=20_000))
    table.pop("state")
    session = ek.protect(table, dict(zip(census.PERSON.names, census.PERSON.sizes)), ek.ZCDP(1))
    vector = session.source.vectorize()
    counting = session.transport = CountingTransport(session.transport)
    start = time.perf_counter()
    strategy.measure(vector, ek.ZCDP(1))
    seconds = time.perf_counter() - start
    units = 1 + 51 + 3143
    return {"strategy_rows": strategy.matrix.shape[0], "cells": strategy.matrix.shape[1],
            "request_bytes": counting.sent, "reply_bytes": counting.received, "measure_seconds": round(seconds, 3),
            "county_scale_units": units, "county_scale_reply_gib": round(units * counting.received / 2**30, 2),
            "county_scale_measure_hours": round(units * seconds / 3600, 2)}  # fmt: skip


def estimate_county_scale() -> dict:
    """The hierarchical estimate alone at county scale: 3,195 units x 4,151 answers (SF1's), synthetic local
    answers, the three levels at noise scales 4, 2 and 1; then the non-negative integers."""
    from ektelo_ng.operators.hierarchy import nonnegative_integers, shared_gls

    geography = nation_states_counties()
    tree, answers = geography.hierarchy, census.SF1().matrix.shape[0]
    local = np.random.default_rng(0).normal(100.0, 10.0, (tree.units, answers))
    scales = np.array([4.0, 2.0, 1.0])[tree.depth]
    start = time.perf_counter()
    fit = shared_gls(tree, local, scales)
    middle = time.perf_counter()
    nonnegative_integers(tree, fit.answers)
    return {"units": tree.units, "answers_per_unit": answers, "estimate_seconds": round(middle - start, 2),
            "nonnegative_integers_seconds": round(time.perf_counter() - middle, 2)}  # fmt: skip


CASES = {
    "small-3-states-gaussian": lambda: small([8, 39, 45], 1e-3, ek.ZCDP(0.5)),
    "small-3-states-laplace": lambda: small([8, 39, 45], 1e-3, ek.PureDP(1)),
    "small-6-states-gaussian": lambda: small([7, 8, 19, 29, 39, 45], 1e-3, ek.ZCDP(0.5)),
    "sf1-unit-request": sf1_unit_request,
    "estimate-county-scale": estimate_county_scale,
    "nation-counties-duckdb": lambda: nation_counties_duckdb(1e-4, ek.ZCDP(0.5)),
}


if __name__ == "__main__":
    main(CASES)
