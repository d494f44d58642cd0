"""Data-dependent plans (MWEM and variants, AHP, UGrid, AGrid) and HB-Striped: exact budgets, the
right shape, and the behaviour each plan exists for, on small seeded tables."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.selection import classic
from ektelo_ng.plans import grids, mwem, striped
from ektelo_ng.plans import catalog, info
from ektelo_ng.operators.measure import data_vector
from tests.helpers import spiky_table, true_vector

ADAPTIVE = ["MWEM", "MWEM-b", "MWEM-c", "MWEM-d", "AHP", "DAWA", "PHP", "PHP+", "EFPA", "SF", "SF+", "UGrid", "AGrid",
            "AGrid+", "HB-Striped", "DAWA-Striped"]
EPSILON = Fraction(1, 2)


def workload_for(shape):
    return wl.Prefix(shape[0]) if len(shape) == 1 else wl.RandomRange(shape, 50, seed=0)


CASES = [(name, shape) for name in ADAPTIVE for shape in [(64,), (16, 16)] if len(shape) in info[name].dimensions]
PUBLIC = [(name, shape) for name, shape in CASES if info[name].public_records]


@pytest.mark.parametrize("name, shape", CASES)
def test_plans_spend_exactly_their_budget_with_a_noisy_total(name, shape):
    columns, domain = spiky_table(shape)
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=1)
    estimate = catalog[name](session.source, workload_for(shape), ek.PureDP(EPSILON), **info[name].defaults).x
    assert estimate.shape == (domain.size,) and np.all(np.isfinite(estimate))
    assert session.budget.spent == ek.PureDP(EPSILON)


@pytest.mark.parametrize("name, shape", PUBLIC)
def test_plans_spend_exactly_their_budget_with_a_public_records(name, shape):
    columns, domain = spiky_table(shape)
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=2)
    params = {**info[name].defaults, "records": 2000}
    estimate = catalog[name](session.source, workload_for(shape), ek.PureDP(EPSILON), **params).x
    assert estimate.shape == (domain.size,) and np.all(np.isfinite(estimate))
    assert session.budget.spent == ek.PureDP(EPSILON)


def test_catalog_labels_the_plans_that_need_the_record_count():
    public = {name for name in ADAPTIVE if info[name].public_records}
    assert public == {"MWEM", "MWEM-b", "MWEM-c", "MWEM-d", "SF", "SF+", "UGrid", "AGrid", "AGrid+"}
    assert all(info[name].data_dependent for name in ADAPTIVE if name != "HB-Striped")
    assert not info["HB-Striped"].data_dependent  # its measurements never depend on the data


@pytest.mark.parametrize("params, message", [({"selection_share": 1}, "selection_share"), ({"selection_share": 0}, "selection_share")])
def test_budget_shares_must_lie_inside_the_unit_interval(params, message):
    columns, domain = spiky_table((64,))
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=0)
    with pytest.raises(ValueError, match=message):
        catalog["AHP"](session.source, wl.Prefix(64), ek.PureDP(EPSILON), **params)
    assert session.budget.spent == ek.PureDP.zero()


# ---- MWEM -----------------------------------------------------------------------------------


def test_mwem_noisy_total_comes_first_with_its_share_and_the_rounds_split_the_rest():
    columns, domain = spiky_table((64,))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=3)
    run = mwem.mwem(session.source, wl.Prefix(64), ek.PureDP(1), rounds=4, total_share="1/10")
    total, *rounds = run.measurements
    assert np.array_equal(total.matrix.dense(), np.ones((1, 64))) and len(rounds) == 4 and len(run.selected) == 4
    # Laplace std sqrt(2) / eps: the total got eps / 10, each round (9/10) eps / 8 for its measurement (the
    # exact sampler rounds scales up to 11 significant bits: at most 2^-10 more)
    assert total.noise_std == pytest.approx(math.sqrt(2) * 10, rel=2**-10)
    assert all(m.noise_std == pytest.approx(math.sqrt(2) * 8 / 0.9, rel=2**-10) for m in rounds)
    assert session.budget.spent == ek.PureDP(1)


def test_mwem_selects_badly_approximated_queries():
    columns, domain = spiky_table((64,))
    x = true_vector(columns, domain)
    W = wl.RandomRange((64,), 100, seed=1)
    scores = np.abs(W @ (x - x.sum() / x.size))  # the error of the uniform start at the public scale
    assert np.mean(scores >= 0.9 * scores.max()) <= 0.05  # so a random pick would rarely pass
    good = 0
    for seed in range(10):
        session = ek.protect(columns, domain, ek.PureDP(1), seed=seed)
        run = mwem.mwem(session.source, W, ek.PureDP(1), rounds=5, records=int(x.sum()))
        good += scores[run.selected[0]] >= 0.9 * scores.max()
    assert good >= 7  # random picks: P(>= 7 of 10) < 1e-7


def test_mwem_measures_each_workload_query_at_most_once_as_dpbench():
    columns, domain = spiky_table((64,))
    x = true_vector(columns, domain)
    W = wl.RandomRange((64,), 6, seed=2)
    for seed in range(3):  # a large budget: without the removal the worst query would come back
        session = ek.protect(columns, domain, ek.PureDP(50), seed=seed)
        run = mwem.mwem(session.source, W, ek.PureDP(50), rounds=6, records=int(x.sum()))
        assert sorted(run.selected) == list(range(6)) and session.budget.spent == ek.PureDP(50)
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    with pytest.raises(ValueError, match="at most once"):
        mwem.mwem(session.source, W, ek.PureDP(1), rounds=7, records=int(x.sum()))
    assert session.budget.spent == ek.PureDP.zero()


@pytest.mark.parametrize("inference", ["mw", "nnls"])
def test_inference_moves_the_estimate_toward_the_measurement(inference):
    columns, domain = spiky_table((64,))
    x = true_vector(columns, domain)
    session = ek.protect(columns, domain, ek.PureDP(20), seed=4)
    run = mwem.mwem(session.source, wl.Prefix(64), ek.PureDP(20), rounds=1, records=int(x.sum()), inference=inference)
    (measured,) = run.measurements
    before = np.abs(measured.matrix @ np.full(x.size, x.sum() / x.size) - measured.answers)[0]
    after = np.abs(measured.matrix @ run.x - measured.answers)[0]
    assert before > 100 and after < 0.05 * before


def test_nnls_variant_keeps_the_public_total_and_non_negativity():
    columns, domain = spiky_table((64,))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=5)
    estimate = catalog["MWEM-d"](session.source, wl.Prefix(64), ek.PureDP(1), rounds=4, records=2000).x
    assert estimate.sum() == pytest.approx(2000, rel=1e-3) and estimate.min() >= 0


def test_h2_augmentation_is_one_dimensional():
    columns, domain = spiky_table((16, 16))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    with pytest.raises(ValueError, match="1-D"):
        catalog["MWEM-b"](session.source, workload_for((16, 16)), ek.PureDP(1))
    assert session.budget.spent == ek.PureDP.zero()


def test_mwem_beats_uniform_on_spiky_data():
    columns, domain = spiky_table((64,))
    W = wl.Prefix(64)
    truth = W @ true_vector(columns, domain)
    errors = {"MWEM": [], "Uniform": []}
    for seed in range(3):
        for name in errors:
            session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=seed)
            errors[name].append(np.mean(np.abs(W @ catalog[name](session.source, W, ek.PureDP(EPSILON)).x - truth)))
    assert np.mean(errors["MWEM"]) < 0.25 * np.mean(errors["Uniform"])


# ---- AHP ------------------------------------------------------------------------------------


def test_ahp_beats_identity_on_sparse_piecewise_constant_data():
    counts = np.repeat([0, 0, 2, 0, 0, 0, 2, 0], 8)  # 32 records in two plateaus
    columns, domain = {"a": np.repeat(np.arange(64), counts)}, ek.Domain.from_dict({"a": 64})
    W = wl.Identity(64)
    errors = {"AHP": [], "Identity": []}
    for seed in range(20):  # heavy-tailed: over 300 seeds AHP averages 88, Identity 512, but one of the first 4 costs 1,113
        for name in errors:
            session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=seed)
            errors[name].append(np.sum((catalog[name](session.source, W, ek.PureDP(EPSILON)).x - counts) ** 2))
            assert session.budget.spent == ek.PureDP(EPSILON)
    assert np.mean(errors["AHP"]) < 0.5 * np.mean(errors["Identity"])


def test_ahp_estimate_is_constant_on_its_groups():
    columns, domain = spiky_table((64,))
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=6)
    estimate = catalog["AHP"](session.source, wl.Prefix(64), ek.PureDP(EPSILON)).x
    values = np.unique(np.round(estimate, 6))
    assert 1 <= values.size < 64  # cells grouped, each group spread evenly


# ---- grids ----------------------------------------------------------------------------------


def test_uniform_grid_spreads_each_cell_evenly():
    shape = (16, 16)
    columns, domain = spiky_table(shape)
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=7)
    estimate = grids.uniform_grid(session.source, workload_for(shape), ek.PureDP(EPSILON), records=500).x
    cells = classic.uniform_grid(shape, 500, float(EPSILON)).matrix
    assert cells.shape[0] == 36  # 3 wide, the last 1: uneven cells
    for lo, hi in zip(cells.lo, cells.hi):
        block = estimate.reshape(shape)[lo[0] : hi[0] + 1, lo[1] : hi[1] + 1]
        assert np.ptp(block) < 1e-6


@pytest.mark.parametrize("name, layout", [("AGrid", "dpbench"), ("AGrid+", "even")])
def test_adaptive_grid_measures_the_cells_of_its_layout(name, layout):
    """The level-2 cells AGrid measures are those of its layout (DPBench's or the even one), which differ here."""
    shape, scale = (16, 16), 1000
    columns, domain = spiky_table(shape)
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=3)
    estimate = catalog[name](session.source, workload_for(shape), ek.PureDP(EPSILON), **{**info[name].defaults, "records": scale})
    first, second = estimate.measurements
    level1 = classic.adaptive_grid_level1(shape, scale, float(EPSILON), layout=layout)
    level2 = classic.adaptive_grid_level2(level1, first.answers, float(EPSILON) / 2, layout=layout)
    other = classic.adaptive_grid_level1(shape, scale, float(EPSILON), layout="even" if layout == "dpbench" else "dpbench")
    assert first.answers.size == level1.shape[0] != other.shape[0]  # m1 = 10: 16 x 16 cells of 1, or 10 x 10 of 1-2
    assert second.answers.size == level2.shape[0]


@pytest.mark.parametrize("name", ["UGrid", "AGrid", "AGrid+"])
def test_grids_beat_uniform_on_spiky_data(name):
    shape = (16, 16)
    columns, domain = spiky_table(shape)
    W = workload_for(shape)
    truth = W @ true_vector(columns, domain)
    errors = {name: [], "Uniform": []}
    for seed in range(200):  # the gap is about 8%: 200 runs put it at about 4 standard errors
        for plan in errors:
            session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=seed)
            errors[plan].append(np.mean(np.abs(W @ catalog[plan](session.source, W, ek.PureDP(EPSILON)).x - truth)))
    assert np.mean(errors[name]) < 0.5 * np.mean(errors["Uniform"])


# ---- HB-Striped -----------------------------------------------------------------------------


@pytest.mark.parametrize("attribute", [0, 1])
def test_hb_striped_measures_every_stripe_with_the_whole_epsilon(attribute):
    shape = (8, 16)
    columns, domain = spiky_table(shape)
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=8)
    vector, dims = data_vector(session.source)
    measurements = striped.stripe_measurements(vector, dims, EPSILON, attribute)
    assert len(measurements) == math.prod(shape) // shape[attribute]
    assert session.budget.spent == ek.PureDP(EPSILON)  # not EPSILON times the number of stripes
    hb = classic.hb(shape[attribute]).matrix
    full_epsilon_std = math.sqrt(2) * hb.sensitivity("l1") / float(EPSILON)
    assert all(m.noise_std == pytest.approx(full_epsilon_std) for m in measurements)
    # together: the rows of HB-Striped_kron's Kronecker strategy, mapped back to the whole vector
    rows = np.vstack([m.matrix.dense() for m in measurements])
    expected = classic.stripe(shape, attribute).matrix.dense()
    assert sorted(map(tuple, rows)) == sorted(map(tuple, expected))


def test_hb_striped_least_squares_beats_identity_on_ranges():
    shape = (16, 16)
    columns, domain = spiky_table(shape)
    W = wl.Kronecker([wl.Prefix(16), wl.Identity(16)])  # long ranges along the striped attribute
    truth = W @ true_vector(columns, domain)
    errors = {"HB-Striped": [], "Identity": []}
    for seed in range(200):  # the gap is about 8%: 200 runs put it at about 4 standard errors
        for plan in errors:
            session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=seed)
            errors[plan].append(np.sum((W @ catalog[plan](session.source, W, ek.PureDP(EPSILON)).x - truth) ** 2))
    assert np.mean(errors["HB-Striped"]) < np.mean(errors["Identity"])
