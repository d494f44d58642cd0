"""ektelo_ng.census_hierarchy end to end through the kernel: nation, 3 states and their 20 counties, a 4-cell Person
domain. Each level is charged once (parallel composition over its units), the levels add, and the release is the
hierarchical estimate with the dense GLS variances."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.census_counties import county_table
from ektelo_ng.census_hierarchy import CountingTransport, estimate_levels, level_budgets, measure_levels, release_levels
from ektelo_ng.operators.confidence import bound_halfwidths, normal_halfwidths
from ektelo_ng.operators.geography import nation_states_counties
from ektelo_ng.operators.hierarchy import largest_shares, unit_weights
from ektelo_ng.operators.matrix import Identity, Kronecker, Total, VStack
from ektelo_ng.operators.selection.hdmm import hdmm

STATES = [8, 39, 45]  # D.C. (one county-equivalent), Rhode Island (5 counties), Vermont (14)
DOMAIN_CELLS = {"hispanic": 2, "sex": 2}
WORKLOAD = VStack([Kronecker([Total(2), Total(2)]), Kronecker([Identity(2), Total(2)]),
                   Kronecker([Total(2), Identity(2)]), Kronecker([Identity(2), Identity(2)])])  # fmt: skip


@pytest.fixture(scope="module")
def tiny():
    geography = nation_states_counties(states=STATES)
    table, domain = county_table(2e-3, STATES, list(DOMAIN_CELLS))
    counties = geography.county[geography.units("county")]
    truth_cells = np.bincount(table["county"] * 4 + table["hispanic"] * 2 + table["sex"], minlength=counties.size * 4)
    return geography, table, domain, truth_cells.reshape(counties.size, 4)


def _session(tiny, budget, seed=1):
    _, table, domain, _ = tiny
    session = ek.protect(table, domain, budget, seed=seed)
    session.transport = CountingTransport(session.transport)
    return session


def _unit_truth(geography, truth_cells):
    """Every unit's true cells: a county's own, a state's and the nation's the sums."""
    tree = geography.hierarchy
    cells = np.zeros((tree.units, 4))
    cells[geography.units("county")] = truth_cells
    for v in reversed(range(1, tree.units)):
        if tree.children[v]:
            cells[v] = cells[tree.parent == v].sum(axis=0)
    cells[0] = cells[tree.parent == 0].sum(axis=0)
    return cells


def _dense_variances(geography, strategy, scales, measured):
    """Each unit's answer variances by dense GLS over the counties' cells: the stacked design, inverted."""
    tree, A, W = geography.hierarchy, strategy.matrix.dense(), WORKLOAD.dense()
    leaves = geography.units("county")
    S = np.zeros((tree.units, leaves.size))
    for j, leaf in enumerate(leaves):
        v = leaf
        while v >= 0:
            S[v, j], v = 1, tree.parent[v]
    maps = [np.kron(S[v : v + 1], np.eye(4)) for v in range(tree.units)]
    information = sum(maps[v].T @ A.T @ A @ maps[v] / scales[v] for v in np.flatnonzero(measured))
    inverse = np.linalg.inv(information)
    return np.array([np.diag(W @ M @ inverse @ M.T @ W.T) for M in maps])


def test_each_level_is_charged_once_and_the_estimate_is_consistent_with_dense_variances(tiny):
    geography, _, _, truth_cells = tiny
    tree = geography.hierarchy
    strategy = hdmm(WORKLOAD, noise="gaussian", seed=0)
    session = _session(tiny, ek.ZCDP(Fraction(1, 2)))
    vector = session.source.vectorize()
    shares = (0.2, 0.3, 0.5)
    budgets = level_budgets(ek.ZCDP(Fraction(1, 2)), shares)
    assert [b.rho for b in budgets] == [Fraction(1, 10), Fraction(3, 20), Fraction(1, 4)]
    before = session.transport.requests
    measured = measure_levels(vector, geography, strategy, WORKLOAD, budgets)
    # one read of the budget left, two reductions (nation, states), two splits (states, counties), one Gaussian
    # batch a level
    assert session.transport.requests - before == 1 + 2 + 2 + 3
    # 1 + 3 + 20 units measured, but the kernel charged each level once: sequentially 0.1 + 3 x 0.15 + 20 x 0.25
    # would be over the total of 0.5 and refused
    assert session.budget.spent.rho == Fraction(1, 2)
    assert measured.measured.all()
    done = estimate_levels(geography, measured)
    for v in np.flatnonzero(tree.children):
        np.testing.assert_allclose(done.answers[tree.parent == v].sum(axis=0), done.answers[v], atol=1e-8)
    np.testing.assert_allclose(done.variances, _dense_variances(geography, strategy, measured.scales, measured.measured),
                               rtol=1e-9)  # fmt: skip
    # each level's scale is the Gaussian variance its rho gives the strategy, ||A||_2^2 / (2 rho), which the kernel
    # rounds up a little (its discrete noise's scale)
    for level, budget in zip(("nation", "state", "county"), budgets):
        exact = strategy.matrix.sensitivity("l2") ** 2 / (2 * float(budget.rho))
        scales = measured.scales[geography.units(level)]
        assert np.all((exact <= scales) & (scales <= exact * 1.005)) and np.ptp(scales) == 0
    truth = _unit_truth(geography, truth_cells) @ WORKLOAD.dense().T
    z = (done.answers - truth) / np.sqrt(done.variances)
    assert np.all(np.abs(z) < 6)  # Gaussian errors past 6 sd: < 1e-9 each, 216 answers (the noise is seeded)
    assert done.method == "exact (normal)"
    covered = (done.lower <= truth) & (truth <= done.upper)
    assert covered.mean() > 0.8


def test_the_requests_and_a_laplace_release(tiny, tmp_path):
    geography = tiny[0]
    strategy = hdmm(WORKLOAD, noise="laplace", seed=0)
    session = _session(tiny, ek.PureDP(1))
    vector = session.source.vectorize()
    before = session.transport.requests
    done = release_levels(vector, geography, strategy, WORKLOAD, ek.PureDP(1), (1, 1, 2))
    # one read of the budget left, two reductions, two splits and one Laplace measurement per unit
    assert session.transport.requests - before == 1 + 2 + 2 + geography.hierarchy.units
    assert session.budget.spent.epsilon == 1
    assert done.method.startswith("bound")
    # the bound is tightened by each answer's largest Laplace term's share, which enumeration confirms exactly
    measured = measure_levels(_session(tiny, ek.PureDP(1)).source.vectorize(), geography, strategy, WORKLOAD,
                              level_budgets(ek.PureDP(1), (1, 1, 2)))  # fmt: skip
    G = unit_weights(geography.hierarchy, measured.scales, measured.measured)
    Q = WORKLOAD.dense() @ np.linalg.pinv(strategy.matrix.dense())
    terms = (G[:, :, None, None] * Q[None, None, :, :]) ** 2 * measured.scales[None, :, None, None]  # v, u, j, k
    exact = terms.max(axis=(1, 3)) / terms.sum(axis=(1, 3))
    shares = largest_shares(geography.hierarchy, measured.scales)[:, None] * measured.answer_shares
    np.testing.assert_allclose(shares, exact, rtol=1e-9)
    tight = estimate_levels(geography, measured)
    loose = bound_halfwidths(tight.variances, 0.95)
    halfwidths = (tight.upper - tight.lower) / 2
    assert np.all(halfwidths <= loose * (1 + 1e-12)) and np.all(halfwidths >= normal_halfwidths(tight.variances, 0.95))
    tables = ["T"] + ["H"] * 2 + ["S"] * 2 + ["HS"] * 4
    path = done.write(tmp_path / "release.csv", labels={"table": tables, "line": [str(j) for j in range(9)]})
    lines = path.read_text().splitlines()
    assert lines[0] == "level,fips,name,table,line,answer,std,lower,upper,method" and len(lines) == 1 + 24 * 9
    assert lines[1].startswith("nation,US,United States,T,0,") and lines[-1].startswith("county,50027,Windsor County,HS,8,")
    assert "query" in done.columns() and len(done.columns()["query"]) == 24 * 9
    with pytest.raises(ValueError, match="2 table labels for 9 answers"):
        done.columns({"table": ["a", "b"]})


def test_an_unmeasured_level_and_refusals_before_any_spend(tiny):
    geography = tiny[0]
    strategy = hdmm(WORKLOAD, noise="gaussian", seed=0)
    session = _session(tiny, ek.ZCDP(1))
    vector = session.source.vectorize()
    with pytest.raises(ValueError, match="Gaussian noise cannot satisfy pure"):
        release_levels(vector, geography, strategy, WORKLOAD, ek.PureDP(1), (1, 1, 1))
    with pytest.raises(ValueError, match="workload has 5 columns"):
        release_levels(vector, geography, strategy, Identity(5), ek.ZCDP(1), (1, 1, 1))
    with pytest.raises(ValueError, match="shares"):
        level_budgets(ek.ZCDP(1), (0, 0, 0))
    with pytest.raises(ValueError, match="the levels spend rho = 2 but the session has 1 left"):
        release_levels(vector, geography, strategy, WORKLOAD, ek.ZCDP(2), (1, 1, 1))
    assert session.budget.spent.rho == 0
    done = release_levels(vector, geography, strategy, WORKLOAD, ek.ZCDP(1), (0, 1, 1))  # no national measurement
    assert session.budget.spent.rho == 1
    tree = geography.hierarchy
    np.testing.assert_allclose(done.answers[0], done.answers[tree.parent == 0].sum(axis=0), atol=1e-8)
    np.testing.assert_allclose(done.variances[0], done.variances[tree.parent == 0].sum(axis=0), rtol=1e-9)


def test_every_county_of_the_country_from_parquet_with_duckdb(tmp_path):
    """3,195 units, 3,143 of them counties, from Parquet files by state counted by DuckDB: each level in one
    Gaussian batch, charged once."""
    pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    from ektelo_ng.census_counties import county_person_domain, write_county_persons

    folder = write_county_persons(tmp_path / "persons", 2e-5, seed=3, progress=False)
    full = {"state": 51, **dict(zip(county_person_domain().names, county_person_domain().sizes))}
    session = ek.protect(str(folder), full, ek.ZCDP(1), backend="duckdb", seed=2)
    session.transport = CountingTransport(session.transport)
    vector = session.source.vectorize(["county", *DOMAIN_CELLS])
    geography = nation_states_counties()
    strategy = hdmm(WORKLOAD, noise="gaussian", seed=0)
    done = release_levels(vector, geography, strategy, WORKLOAD, ek.ZCDP(1), (1, 1, 2))
    assert session.transport.requests == 2 + 1 + 2 + 2 + 3  # root, vectorize; budget left, reduce x 2, split x 2, 3
    assert session.budget.spent.rho == 1
    tree = geography.hierarchy
    states = geography.units("state")
    np.testing.assert_allclose(done.answers[0], done.answers[states].sum(axis=0), atol=1e-7)
    for state in states[:5]:
        np.testing.assert_allclose(done.answers[state], done.answers[tree.parent == state].sum(axis=0), atol=1e-7)
