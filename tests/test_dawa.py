"""DAWA: the kernel's noisy dyadic deviations (sensitivity by brute force, charge, noise scale, a privacy
audit on neighbouring inputs with power against the reference code's noise), the public partition (against
brute-force enumeration) and the DAWA / DAWA-Striped plans (exact spend, accuracy)."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

import ektelo_ng as ek
from ektelo_ng.operators.matrix import Kronecker
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.kernel.limits import Work
from ektelo_ng.kernel.mechanisms.dawa import deviations
from ektelo_ng.kernel.mechanisms.dawa import prepare as prepare_dyadic_deviations


def dyadic_deviations(x):
    return deviations(np.asarray(x, dtype=float), Work())
from ektelo_ng.kernel.noise import NoiseSource
from ektelo_ng.kernel.privacy import PureDP
from ektelo_ng.operators.client import InvalidRequestError
from ektelo_ng.operators.partition import dawa_partition, stripe
from ektelo_ng.operators.workload import RandomRange
from ektelo_ng.plans.dawa import _stripe_workloads, dawa, dawa_striped


def blocks(n):
    """The aligned dyadic blocks (start, stop) of widths 2, 4, .. 2^K >= n, in the kernel's order."""
    out, width = [], 2
    while width // 2 < n:
        out += [(s, min(s + width, n)) for s in range(0, n, width)]
        width *= 2
    return out


def deviation(x):
    return float(np.abs(x - x.mean()).sum())


def claimed_sensitivity(n):
    return sum(2 * (1 - 2.0**-k) for k in range(1, math.ceil(math.log2(n)) + 1))


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 40).flatmap(lambda n: st.lists(st.integers(0, 9), min_size=n, max_size=n)), st.booleans())
def test_dyadic_deviations_and_their_sensitivity_by_brute_force(values, fractional):
    x = np.array(values, dtype=float) * (0.37 if fractional else 1.0)
    n = x.size
    costs = dyadic_deviations(x)
    np.testing.assert_allclose(costs, [deviation(x[a:b]) for a, b in blocks(n)], atol=1e-9)
    sensitivity = prepare_dyadic_deviations(n, 400, Fraction(1), PureDP).scale  # scale at eps = 1, <= 400 records
    worst = max(np.abs(dyadic_deviations(x + sign * np.eye(n)[j]) - costs).sum() for j in range(n) for sign in (1, -1))
    assert worst <= claimed_sensitivity(n) + 1e-9 <= sensitivity


def test_the_sensitivity_is_attained_so_per_block_noise_is_too_small():
    """All-zero vector vs one record in cell 0: every level's block changes by its full 2 (1 - 1/L)."""
    n = 64
    change = np.abs(dyadic_deviations(np.eye(n)[0]) - dyadic_deviations(np.zeros(n))).sum()
    assert change == pytest.approx(claimed_sensitivity(n))
    assert change > 2  # the reference code's per-interval scale 2/eps under-noises


def test_the_kernel_charges_epsilon_and_noises_at_the_stated_scale():
    rng = np.random.default_rng(0)
    n = 1024
    cells = rng.integers(0, n, 5000)
    s = ek.protect({"a": cells}, ek.Domain.from_dict({"a": n}), ek.PureDP(100), seed=3)
    x = s.source.vectorize()
    answers = [x.dyadic_deviations("1/2") for _ in range(10)]
    assert s.budget.spent == ek.PureDP(5)
    answer = answers[0]
    # plus the bound on the costs' float error (docs/privacy/arithmetic.md) and the exact sampler's lattice
    assert claimed_sensitivity(n) / 0.5 <= answer.scale <= claimed_sensitivity(n) / 0.5 * 1.01
    exact = dyadic_deviations(np.bincount(cells, minlength=n).astype(float))
    residuals = np.concatenate([a.values - exact for a in answers])
    law = stats.laplace(scale=answer.scale)
    assert stats.kstest(residuals, law.cdf).pvalue > 1e-6
    for wrong in (0.7, 1.3):
        assert stats.kstest(residuals, stats.laplace(scale=wrong * answer.scale).cdf).pvalue < 1e-6
    z = ek.protect({"a": cells}, ek.Domain.from_dict({"a": n}), ek.ZCDP(1), seed=3)
    z.source.vectorize().dyadic_deviations("1/2")
    assert z.budget.spent == ek.ZCDP("1/8")  # eps-DP Laplace is eps^2/2-zCDP
    one = ek.protect({"a": cells[:3] % 1}, ek.Domain.from_dict({"a": 1}), ek.PureDP(1))
    with pytest.raises(InvalidRequestError, match="at least 2 cells"):
        one.source.vectorize().dyadic_deviations(1)
    assert one.budget.spent == ek.PureDP.zero()


def test_privacy_audit_on_neighbouring_inputs():
    """x = 0 vs x' = e_0 on 4 cells: costs (0, 0, 0) vs (1, 0, 1.5). For E = {every noisy cost <= 0}, Laplace's
    lower tail gives P(E | x) / P(E | x') = exp(2.5 / b): exactly e^eps at the kernel's scale b = 2.5 / eps,
    and e^1.25 > e at the reference code's b = 2 / eps. The audit accepts when the ratio's 5-standard-error
    lower bound is at most e^eps."""
    epsilon, runs = Fraction(1), 200_000
    prepared = prepare_dyadic_deviations(4, 1, epsilon, PureDP)
    inputs = [np.zeros(4), np.eye(4)[0]]

    def audit(scale):
        mechanism = type(prepared)("laplace", scale, prepared.grid, prepared.cost)
        hits = [
            np.all(mechanism.release(np.tile(dyadic_deviations(x), runs), NoiseSource.seeded(seed)).reshape(runs, 3) <= 0,
                   axis=1).sum()
            for seed, x in enumerate(inputs)
        ]
        ratio = hits[0] / hits[1]
        return ratio - 5 * ratio * math.sqrt(1 / hits[0] + 1 / hits[1]) <= math.e

    assert audit(prepared.scale)
    assert not audit(2.0 / float(epsilon))


def _all_dyadic_partitions(start, width, n):
    """Every partition of [start, start + width) ∩ [0, n) into aligned dyadic blocks."""
    stop = min(start + width, n)
    if stop - start <= 1:
        return [[(start, stop)]] if stop > start else [[]]
    half = width // 2
    splits = [a + b for a, b in product(_all_dyadic_partitions(start, half, n), _all_dyadic_partitions(start + half, half, n))]
    return [[(start, stop)]] + splits


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.floats(-5, 20), min_size=len(blocks(n)), max_size=len(blocks(n))))),
    st.sampled_from([0.1, 0.5, 2.0]))
def test_dawa_partition_is_the_cheapest_dyadic_partition(case, epsilon2):
    n, costs = case
    cost_of = {}
    for block, cost in zip(blocks(n), costs):  # a block cut short by n recurs one width up: the cheaper counts
        cost_of[block] = min(cost, cost_of.get(block, cost))
    penalty = 1 / epsilon2

    def total(partition):
        return sum(penalty + (max(cost_of[b], 0.0) if b[1] - b[0] > 1 else 0.0) for b in partition)

    width = 2 ** math.ceil(math.log2(n))
    best = min(total(p) for p in _all_dyadic_partitions(0, width, n))
    chosen = dawa_partition(costs, n, epsilon2)
    groups = [tuple(int(i) for i in np.flatnonzero(chosen.labels == g)[[0, -1]] + [0, 1]) for g in range(chosen.groups)]
    assert all(b in cost_of or b[1] - b[0] == 1 for b in groups)  # every group is an aligned dyadic block
    assert total(groups) == pytest.approx(best)


def test_dawa_partition_refuses_mismatched_costs():
    with pytest.raises(ValueError, match="expected 7 finite dyadic costs for 8 cells"):
        dawa_partition(np.zeros(5), 8, 1.0)


def _session(x, budget, seed=0):
    shape = x.shape
    coords = np.nonzero(x)
    columns = {f"a{k}": np.repeat(c, x[coords]) for k, c in enumerate(coords)}
    return ek.protect(columns, ek.Domain.from_dict({f"a{k}": n for k, n in enumerate(shape)}), budget, seed=seed)


def test_dawa_spends_its_budget_and_recovers_piecewise_data():
    x = np.concatenate([np.full(96, 40), np.zeros(128, int), np.full(32, 7)])
    s = _session(x, ek.PureDP(1000))
    estimate = dawa(s.source, Prefix(x.size), ek.PureDP(1000))
    assert s.budget.spent == ek.PureDP(1000)
    np.testing.assert_allclose(estimate, x, atol=0.5)
    small = _session(x, ek.PureDP("0.1"), seed=1)
    estimate = dawa(small.source, Prefix(x.size), ek.PureDP("0.1"))
    assert small.budget.spent == ek.PureDP("0.1") and np.all(np.isfinite(estimate))


@pytest.mark.parametrize("attribute", [0, 1])
def test_stripe_workloads_are_the_workload_on_each_stripe(attribute):
    """W S_g^T for every stripe: column slices of W made sparse (boxes), or implicit products (Kronecker)."""
    stripes = stripe((4, 6), attribute)
    for W in (RandomRange((4, 6), 30, seed=3), Kronecker([Prefix(4), Prefix(6)])):
        parts = list(_stripe_workloads(W, stripes))
        assert len(parts) == stripes.groups
        for g, part in enumerate(parts):
            np.testing.assert_array_equal(part.dense(), W.dense() @ stripes.selection(g).dense().T)


def test_dawa_in_2d_through_the_hilbert_order_and_dawa_striped():
    rng = np.random.default_rng(5)
    x = rng.poisson(4, (16, 16))
    x[:8] = 0
    workloads = (Kronecker([Prefix(16), Prefix(16)]), RandomRange((16, 16), 200, seed=1))
    for W, plan in product(workloads, (dawa, dawa_striped)):  # implicit products; boxes made sparse
        s = _session(x, ek.PureDP(500))
        estimate = plan(s.source, W, ek.PureDP(500))
        assert s.budget.spent == ek.PureDP(500)  # DAWA-Striped: parallel composition over the stripes
        if plan is dawa:  # truncated toward zero as DPBench's 2-D engine: integers, each within 1 of its count
            assert np.array_equal(estimate.x, np.trunc(estimate.x)) and "int32" in estimate.note
            assert np.abs(estimate - x.ravel()).max() <= 1.0
        else:
            assert np.abs(estimate - x.ravel()).max() < 1.0
    rectangle = _session(np.ones((4, 8), int), ek.PureDP(1))
    with pytest.raises(ValueError, match="square grid"):
        dawa(rectangle.source, Kronecker([Prefix(4), Prefix(8)]), ek.PureDP(1))
    assert rectangle.budget.spent == ek.PureDP.zero()
