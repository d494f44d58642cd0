"""DPBench plans DPCube, DPCube+, MWEM* and AHP*: exact budgets, both kd-tree partitions against brute-force
references, the DPCube estimates against their closed forms, and the tuned tables' choices."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.operators.matrix import Identity
from ektelo_ng.operators import measure
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.partition import grid, kd_partition, sse_kd_partition
from ektelo_ng.plans import ahp, mwem
from ektelo_ng.plans import catalog, info
from ektelo_ng.operators.measure import data_vector

EPSILON = Fraction(1, 2)
NEW = ["DPCube", "DPCube+", "MWEM*", "AHP*"]


def table_of(counts):
    """The records a histogram counts (one column per axis) and the domain."""
    counts = np.asarray(counts)
    cells = np.repeat(np.arange(counts.size), counts.ravel())
    columns = {f"a{i}": codes for i, codes in enumerate(np.unravel_index(cells, counts.shape))}
    return columns, ek.Domain.from_dict({f"a{i}": s for i, s in enumerate(counts.shape)})


def skewed_counts(shape, records=2000, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.pareto(1.0, shape) * (rng.random(shape) < 0.5) + 1e-3
    return rng.multinomial(records, (weights / weights.sum()).ravel()).reshape(shape)


def workload_for(shape):
    return wl.Prefix(shape[0]) if len(shape) == 1 else wl.RandomRange(shape, 50, seed=0)


def leaf(entry: dict) -> str:
    """The kind of the one leaf a transcript entry's matrix (a stack of one single-leaf block) is made of."""
    (block,) = entry["matrix"]["blocks"]
    (factor,) = block["factors"]
    return factor["kind"]


def ops(session, op):
    return [entry for entry in session.transcript() if entry["op"] == op]


# ---- every new plan: exact budget, right size ---------------------------------------------------


CASES = [(name, shape, scale) for name in NEW for shape in [(64,), (16, 16)] for scale in [None, 2000]
         if len(shape) in info[name].dimensions and (scale is None or info[name].public_records)]


@pytest.mark.parametrize("name, shape, scale", CASES)
def test_plans_spend_exactly_their_budget(name, shape, scale):
    columns, domain = table_of(skewed_counts(shape))
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=1)
    params = {**info[name].defaults, **({} if scale is None else {"records": scale})}
    estimate = catalog[name](session.source, workload_for(shape), ek.PureDP(EPSILON), **params).x
    assert estimate.shape == (domain.size,) and np.all(np.isfinite(estimate))
    assert session.budget.spent == ek.PureDP(EPSILON)


def test_catalog_entries():
    assert info["DPCube"].dimensions == info["DPCube+"].dimensions == info["MWEM*"].dimensions == (1, 2)
    assert info["AHP*"].dimensions == (1, 2) and info["DPCube"].defaults == {"gz": 11, "alpha": 0.5}
    assert info["MWEM*"].public_records and info["AHP*"].public_records
    assert not info["DPCube"].public_records and not info["DPCube+"].public_records
    assert catalog["MWEM*"] is mwem.mwem_star and catalog["AHP*"] is ahp.ahp_star


# ---- kd_partition (DPCube+) ---------------------------------------------------------------------------------


def reference_kd(values, b, factor):
    """DPCube's kd-tree written plainly, loop by loop, as a set of (lo, hi) boxes."""
    values = np.asarray(values, dtype=float)
    d = values.ndim

    def cells(lo, hi):
        return [values[idx] for idx in itertools.product(*[range(a, z + 1) for a, z in zip(lo, hi)])]

    def build(lo, hi, preferred):
        box = cells(lo, hi)
        m = len(box)
        mean = sum(box) / m
        if m == 1 or max(box) == min(box) or sum((v - mean) ** 2 for v in box) / (m - 1) <= factor * 2 * b * b:
            return {(tuple(lo), tuple(hi))}
        sides = [z - a + 1 for a, z in zip(lo, hi)]
        axis = preferred
        for step in range(d):  # the first longest side, starting from the preferred one
            candidate = (preferred + step) % d
            if sides[candidate] > sides[axis]:
                axis = candidate
        slices = []
        for j in range(lo[axis], hi[axis] + 1):
            lo_j, hi_j = list(lo), list(hi)
            lo_j[axis] = hi_j[axis] = j
            slices.append(sum(max(v, 0.0) for v in cells(lo_j, hi_j)))
        total, k, running = sum(slices), None, 0.0
        for count, mass in enumerate(slices, start=1):
            running += mass
            if k is None and running >= total / 2:
                k = count
        k = sides[axis] // 2 if total == 0 else k
        k = min(max(k, 1), sides[axis] - 1)
        lower_hi, upper_lo = list(hi), list(lo)
        lower_hi[axis], upper_lo[axis] = lo[axis] + k - 1, lo[axis] + k
        following = (axis + 1) % d
        return build(lo, lower_hi, following) | build(upper_lo, hi, following)

    return build([0] * d, [s - 1 for s in values.shape], 0)


def boxes_of(ranges):
    return {(tuple(lo), tuple(hi)) for lo, hi in zip(ranges.lo.tolist(), ranges.hi.tolist())}


@pytest.mark.parametrize("shape", [(40,), (9, 12), (16, 16)])
@pytest.mark.parametrize("seed", range(3))
def test_kd_partition_matches_the_reference_and_tiles_the_domain(shape, seed):
    rng = np.random.default_rng(seed)
    truth = np.repeat(rng.choice([0.0, 4.0, 30.0], 4), -(-np.prod(shape) // 4))[: np.prod(shape)].reshape(shape)
    noisy = truth + rng.laplace(0.0, 2.0, shape)
    boxes = kd_partition(noisy, 2.0)
    assert boxes_of(boxes) == reference_kd(noisy, 2.0, 2.0)
    assert 1 < boxes.shape[0] < np.prod(shape)  # the case exercises both splitting and stopping
    assert np.array_equal(boxes.dense().sum(axis=0), np.ones(np.prod(shape)))  # disjoint, covering


@pytest.mark.parametrize("shape", [(32,), (8, 8)])
def test_noise_free_uniform_counts_stay_one_box(shape):
    boxes = kd_partition(np.full(shape, 7.0), 0.0)
    assert boxes_of(boxes) == {((0,) * len(shape), tuple(s - 1 for s in shape))}


def test_a_step_is_split_at_the_step_and_each_side_stays_whole_once_uniform():
    boxes = boxes_of(kd_partition(np.repeat([5.0, 50.0], 8), 0.0))
    # median of the mass (440): cut after cell 11, then 9, then 8: each box lies on one side of the step
    assert boxes == {((0,), (7,)), ((8,), (8,)), ((9,), (9,)), ((10,), (11,)), ((12,), (15,))}
    # when the step holds half the mass, the median is the step: two boxes
    assert boxes_of(kd_partition(np.repeat([6.0, 2.0], [2, 6]), 0.0)) == {((0,), (1,)), ((2,), (7,))}
    counts = np.full((8, 8), 2.0)
    counts[:, :2] = 6.0
    boxes = boxes_of(kd_partition(counts, 0.0))
    # rows first (equal sides): all rows weigh the same, cut after row 3; then columns, at the step
    assert boxes == {((0, 0), (3, 1)), ((0, 2), (3, 7)), ((4, 0), (7, 1)), ((4, 2), (7, 7))}


def test_the_uniformity_rule_is_sample_variance_against_twice_the_squared_noise_scale():
    values = np.array([0.0, 2.0])  # sample variance exactly 2 = 2 b^2 with b = 1
    assert kd_partition(values, 1.0, variance_factor=1.0).shape[0] == 1
    assert kd_partition(values, 1.0, variance_factor=0.99).shape[0] == 2
    assert kd_partition(values, 0.5, variance_factor=3.99).shape[0] == 2  # 3.99 * 2 * 0.25 < 2


@pytest.mark.parametrize("args, message", [
    ((np.array([]), 1.0), "non-empty"), ((np.array([1.0, np.nan]), 1.0), "finite"),
    ((np.ones(3), -1.0), "noise_scale"), ((np.ones(3), 1.0, -2.0), "variance_factor"),
])
def test_kd_partition_refuses_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        kd_partition(*args)


# ---- sse_kd_partition (DPCube) ---------------------------------------------------------------------


def reference_sse_kd(values, penalty):
    """DPBench's DPCube kd-tree written plainly: every cut's cost summed cell by cell, as a set of boxes."""
    values = np.asarray(values, dtype=float)
    d = values.ndim

    def cost(lo, hi):
        box = [values[idx] for idx in itertools.product(*[range(a, z + 1) for a, z in zip(lo, hi)])]
        mean = sum(box) / len(box)
        return sum((v - mean) ** 2 for v in box)

    def build(lo, hi):
        sides = [z - a + 1 for a, z in zip(lo, hi)]
        axis = max(a for a in range(d) if sides[a] == max(sides))  # the last longest side
        best, where = None, None
        for k in range(1, sides[axis]):
            lower_hi, upper_lo = list(hi), list(lo)
            lower_hi[axis], upper_lo[axis] = lo[axis] + k - 1, lo[axis] + k
            total = cost(lo, lower_hi) + cost(upper_lo, hi)
            if best is None or total < best - 1e-9:
                best, where = total, (lower_hi, upper_lo)
        if best is None or not best + penalty < cost(lo, hi):
            return {(tuple(lo), tuple(hi))}
        return build(lo, where[0]) | build(where[1], hi)

    return build([0] * d, [s - 1 for s in values.shape])


@pytest.mark.parametrize("shape", [(40,), (9, 12), (13, 7), (16, 16)])
@pytest.mark.parametrize("seed", range(3))
def test_sse_kd_partition_matches_the_reference_and_tiles_the_domain(shape, seed):
    rng = np.random.default_rng(seed)
    blocks = grid(shape, 3)  # blocky values, as DPCube's grid gives, with distinct levels
    values = (rng.choice([0.0, 4.0, 30.0], blocks.groups) + rng.normal(0, 1, blocks.groups))[blocks.labels]
    values = values.reshape(shape)
    boxes = sse_kd_partition(values, 20.0)
    assert boxes_of(boxes) == reference_sse_kd(values, 20.0)
    assert 1 < boxes.shape[0] < np.prod(shape)  # the case exercises both cutting and stopping
    assert np.array_equal(boxes.dense().sum(axis=0), np.ones(np.prod(shape)))  # disjoint, covering


def test_a_step_is_cut_only_when_it_lowers_the_squared_error_by_more_than_the_penalty():
    # a zeros and b cells of height h: cutting at the step lowers the cost by a b h^2 / (a + b) = 3 * 5 * 4 / 8
    values = np.repeat([0.0, 2.0], [3, 5])
    assert boxes_of(sse_kd_partition(values, 7.49)) == {((0,), (2,)), ((3,), (7,))}
    assert boxes_of(sse_kd_partition(values, 7.5)) == {((0,), (7,))}  # not more than the penalty: one box
    # no cut lowers a constant box's cost: it stays whole even without a penalty
    assert boxes_of(sse_kd_partition(np.full((5, 4), 3.0), 0.0)) == {((0, 0), (4, 3))}


def test_sse_kd_partition_cuts_the_longer_side_and_columns_on_ties_and_the_first_best_cut():
    values = np.zeros((4, 4))
    values[:, 2:] = 10.0  # only a cut between columns 1 and 2 lowers the cost: columns are cut on ties
    assert boxes_of(sse_kd_partition(values, 1.0)) == {((0, 0), (3, 1)), ((0, 2), (3, 3))}
    tall = np.zeros((5, 4))
    tall[:, 2:] = 10.0  # more rows than columns: only rows may be cut, and no row cut helps
    assert boxes_of(sse_kd_partition(tall, 1.0)) == {((0, 0), (4, 3))}
    # cutting [4, 2, 0] after cell 0 or after cell 1 leaves cost 2 either way (down from 8): the first is taken,
    # and the part of cost 2 is not cut again (penalty 3); the same holds mirrored
    for values in ([4.0, 2.0, 0.0], [0.0, 2.0, 4.0]):
        assert boxes_of(sse_kd_partition(np.array(values), 3.0)) == {((0,), (0,)), ((1,), (2,))}


@pytest.mark.parametrize("args, message", [
    ((np.array([]), 1.0), "non-empty"), ((np.array([1.0, np.inf]), 1.0), "finite"), ((np.ones(3), -1.0), "penalty"),
])
def test_sse_kd_partition_refuses_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        sse_kd_partition(*args)


# ---- DPCube ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("counts", [np.repeat([3, 30, 0, 12, 5], [11, 11, 20, 2, 16]), skewed_counts((23, 15), 3000)])
def test_dpcube_spreads_each_boxs_noisy_count_evenly(counts):
    columns, domain = table_of(counts)
    plan_session = ek.protect(columns, domain, ek.PureDP(1), seed=7)
    estimate = catalog["DPCube"](plan_session.source, workload_for(counts.shape), ek.PureDP(1)).x
    laplaces = ops(plan_session, "laplace")
    assert [e["epsilon"] for e in laplaces] == ["1/2", "1/2"] and leaf(laplaces[1]) == "ranges"
    # the same requests on an identically seeded kernel give the same noisy answers
    session = ek.protect(columns, domain, ek.PureDP(1), seed=7)
    vector, _ = data_vector(session.source)
    blocks = grid(counts.shape, 11)
    coarse = measure.laplace(vector, blocks.matrix(), Fraction(1, 2)).answers
    spread = np.array([coarse[g] / blocks.sizes[g] for g in blocks.labels]).reshape(counts.shape)
    boxes = sse_kd_partition(spread, 2.0)
    z = measure.laplace(vector, boxes, Fraction(1, 2)).answers
    expected = np.zeros(counts.shape)
    for lo, hi, total in zip(boxes.lo, boxes.hi, z):
        cells = tuple(slice(a, b + 1) for a, b in zip(lo, hi))
        expected[cells] = total / expected[cells].size
    assert 1 < boxes.shape[0] < counts.size
    np.testing.assert_allclose(estimate, expected.ravel(), atol=1e-6)


def test_dpcube_with_negligible_noise_gives_the_mean_of_each_block_of_gz_cells():
    counts = np.concatenate([np.arange(11), np.full(11, 40), np.arange(5) * 3])  # blocks of 11, 11 and 5 cells
    columns, domain = table_of(counts)
    session = ek.protect(columns, domain, ek.PureDP(10**7), seed=0)
    estimate = catalog["DPCube"](session.source, wl.Prefix(27), ek.PureDP(10**7)).x
    # the grid is constant within a block, so no box is cut inside one: DPCube keeps the blocks' means
    np.testing.assert_allclose(estimate, np.repeat([5.0, 40.0, 6.0], [11, 11, 5]), atol=1e-3)
    session = ek.protect(columns, domain, ek.PureDP(10**7), seed=0)
    estimate = catalog["DPCube"](session.source, wl.Prefix(27), ek.PureDP(10**7), gz=1).x
    np.testing.assert_allclose(estimate, counts, atol=1e-3)  # blocks of one cell: the data


@pytest.mark.parametrize("params, message", [
    ({"alpha": 1}, "alpha"), ({"alpha": 0}, "alpha"), ({"gz": 0}, "gz"), ({"gz": 2.5}, "gz"), ({"gz": True}, "gz"),
])
def test_dpcube_refuses_bad_parameters_before_spending(params, message):
    columns, domain = table_of(skewed_counts((16,)))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    with pytest.raises(ValueError, match=message):
        catalog["DPCube"](session.source, wl.Prefix(16), ek.PureDP(1), **params)
    assert session.budget.spent == ek.PureDP.zero()


# ---- DPCube+ --------------------------------------------------------------------------------------


@pytest.mark.parametrize("counts", [np.repeat([0, 9, 2, 2, 40, 0, 7, 1], 8), skewed_counts((12, 10), 3000)])
def test_dpcube_plus_with_negligible_noise_recovers_the_data(counts):
    columns, domain = table_of(counts)
    session = ek.protect(columns, domain, ek.PureDP(10**7), seed=0)
    estimate = catalog["DPCube+"](session.source, workload_for(counts.shape), ek.PureDP(10**7)).x
    assert np.max(np.abs(estimate - counts.ravel())) < 1e-3


def test_dpcube_plus_is_the_weighted_least_squares_of_cells_and_boxes():
    counts = np.repeat([3, 30, 0, 12], 16)
    columns, domain = table_of(counts)
    plan_session = ek.protect(columns, domain, ek.PureDP(1), seed=7)
    estimate = catalog["DPCube+"](plan_session.source, wl.Prefix(64), ek.PureDP(1)).x
    laplaces = ops(plan_session, "laplace")
    assert [e["epsilon"] for e in laplaces] == ["1/2", "1/2"] and leaf(laplaces[1]) == "ranges"
    # the same requests on an identically seeded kernel give the same noisy answers
    session = ek.protect(columns, domain, ek.PureDP(1), seed=7)
    vector, _ = data_vector(session.source)
    y = measure.laplace(vector, Identity(64), Fraction(1, 2)).answers
    boxes = kd_partition(y, 2.0)
    z = measure.laplace(vector, boxes, Fraction(1, 2)).answers
    # closed form: cells (variance s1) and disjoint box sums (variance s2) add one shift per box,
    # delta = s1 (z - sum y) / (s2 + m s1); here s1 = s2 = 2 * 2^2
    expected = y.copy()
    for (lo,), (hi,), total in zip(boxes.lo, boxes.hi, z):
        m = hi - lo + 1
        expected[lo:hi + 1] += (total - y[lo:hi + 1].sum()) / (1 + m)
    assert 1 < boxes.shape[0] < 64
    np.testing.assert_allclose(estimate, expected, atol=1e-6)


def test_dpcube_plus_refuses_a_bad_share_before_spending():
    columns, domain = table_of(skewed_counts((16,)))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    with pytest.raises(ValueError, match="selection_share"):
        catalog["DPCube+"](session.source, wl.Prefix(16), ek.PureDP(1), selection_share=1)
    assert session.budget.spent == ek.PureDP.zero()


# ---- MWEM* -----------------------------------------------------------------------------------------


def mwem_star_rounds(counts, epsilon, **params):
    columns, domain = table_of(counts)
    session = ek.protect(columns, domain, ek.PureDP(epsilon), seed=3)
    estimate = mwem.mwem_star(session.source, wl.Prefix(counts.size), ek.PureDP(epsilon), **params).x
    assert session.budget.spent == ek.PureDP(epsilon) and estimate.shape == (counts.size,)
    return len(ops(session, "worst_approx"))


@pytest.mark.parametrize("dims", [1, 2])
def test_mwem_star_reads_dpbench_tables_by_linear_interpolation(dims):
    rows = mwem.MWEM_STAR_ROUNDS[dims]
    for (low, rounds), (high, after) in zip(rows, rows[1:]):
        assert mwem.by_signal(rows, low) == rounds
        assert mwem.by_signal(rows, (low + high) / 2) == (rounds + after) / 2
    assert mwem.by_signal(rows, 1e30) == rows[-1][1]


def test_mwem_star_runs_the_rounds_dpbench_would_for_a_public_records():
    counts = skewed_counts((64,), 500)  # 64 prefix queries: MWEM measures each at most once
    # signal 0.2 * 500 = 100: T = 4; 0.1 * 500 = 50: int(2 + 2 * 40 / 90) = 2; 2 * 500 = 1000: T = 8
    for epsilon, rounds in ((Fraction(1, 5), 4), (Fraction(1, 10), 2), (Fraction(2), 8)):
        assert mwem_star_rounds(counts, epsilon, records=500) == rounds
    assert mwem_star_rounds(counts.reshape(8, 8), 1, records=500, shape=(8, 8)) == 12  # the 2-D table


def test_mwem_star_interpolates_its_table_and_a_noisy_total_picks_the_rounds():
    counts = skewed_counts((16,), 2000)
    table = ((0, 1), (200, 2), (2000, 3), (20000, 4))
    assert mwem_star_rounds(counts, 1, records=2000, table=table) == 3  # signal exactly 2000
    assert mwem_star_rounds(counts, 1, records=1999, table=table) == 2  # int(2.9994)
    assert mwem_star_rounds(counts, 1, records=11000, table=table) == 3  # int(3.5)
    # noisy total with eps 1/20: noise scale 20, so eps * total lies far inside [200, 20000)
    assert mwem_star_rounds(counts, 1, table=table, total_share="1/20") in (2, 3)
    assert mwem_star_rounds(counts, 1, table=((0, 2), (3000, 5))) in (3, 4)  # int(2 + 3 * (2000 +- noise) / 3000)


def test_run_takes_the_rounds_from_the_record_count():
    columns, domain = table_of(skewed_counts((16,), 2000))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    run = mwem.mwem(session.source, wl.Prefix(16), ek.PureDP(1), rounds=lambda records: int(records) // 500, records=2000)
    assert len(run.selected) == 4 and len(run.measurements) == 4
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    with pytest.raises(ValueError, match="rounds must be a positive number, got 0"):
        mwem.mwem(session.source, wl.Prefix(16), ek.PureDP(1), rounds=lambda records: 0, records=2000)


@pytest.mark.parametrize("params, message", [
    ({"table": ((1, 5),)}, r"increasing from 0, got \[1.0\]"),
    ({"table": ((0, 5), (100, 6), (50, 7))}, r"increasing from 0, got \[0.0, 100.0, 50.0\]"),
    ({"table": ((0, 0),)}, "rounds must be a positive number, got 0"),
    ({"table": (5,)}, "rows"),
    ({"records": -3}, "public record count"),
    ({"total_share": 1}, "total_share"),
])
def test_mwem_star_refuses_bad_parameters_before_spending(params, message):
    columns, domain = table_of(skewed_counts((16,)))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    with pytest.raises(ValueError, match=message):
        mwem.mwem_star(session.source, wl.Prefix(16), ek.PureDP(1), **params)
    assert session.budget.spent == ek.PureDP.zero()


# ---- AHP* ------------------------------------------------------------------------------------------


def ahp_star_partition_epsilon(counts, epsilon, **params):
    columns, domain = table_of(counts)
    session = ek.protect(columns, domain, ek.PureDP(epsilon), seed=4)
    ahp.ahp_star(session.source, wl.Prefix(counts.size), ek.PureDP(epsilon), **params)
    assert session.budget.spent == ek.PureDP(epsilon)
    histogram = [e for e in ops(session, "laplace") if leaf(e) == "identity"][0]
    return Fraction(histogram["epsilon"])


def test_ahp_star_takes_rho_from_its_table_and_runs_on_what_the_total_leaves():
    counts = skewed_counts((32,), 1000)
    table = ((0, (0.5, 0.35)), (400, (0.75, 1.0)))
    assert ahp_star_partition_epsilon(counts, 1, records=1000, table=table) == Fraction(3, 4)
    assert ahp_star_partition_epsilon(counts, Fraction(1, 5), records=1000, table=table) == Fraction(1, 8)  # 0.625
    # noisy total with 1/10 of eps = 1: signal ~ 1000 picks rho 0.75 of the remaining 9/10
    assert ahp_star_partition_epsilon(counts, 1, total_share="1/10", table=table) == Fraction(27, 40)
    # DPBench's 1-D table: signal 0.1 * 1000 = 100 gives rho 0.7; 1 * 1000 = 1000 gives 0.9
    assert ahp_star_partition_epsilon(counts, Fraction(1, 10), records=1000) == Fraction(7, 100)
    assert ahp_star_partition_epsilon(counts, 1, records=1000) == Fraction(9, 10)


@pytest.mark.parametrize("table, message", [
    (((0, (1.0, 0.35)),), "selection_share"), (((0, (0.5, -1.0)),), "eta"), (((0, 0.5),), r"\(selection_share, eta\)"),
    (((10, (0.5, 0.35)),), "increasing from 0"),
])
def test_ahp_star_refuses_bad_tables_before_spending(table, message):
    columns, domain = table_of(skewed_counts((16,)))
    session = ek.protect(columns, domain, ek.PureDP(1), seed=0)
    with pytest.raises(ValueError, match=message):
        ahp.ahp_star(session.source, wl.Prefix(16), ek.PureDP(1), records=100, table=table)
    assert session.budget.spent == ek.PureDP.zero()
