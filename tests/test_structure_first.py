"""StructureFirst: the kernel's bucket costs (against enumeration of every bucketing) and the sensitivity of
its scores under clipping, the selection law, charge and refusals, and the plan."""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats
from scipy.special import softmax

import ektelo_ng as ek
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.kernel.limits import Work
from ektelo_ng.kernel.mechanisms.structure_first import bucket_costs, interval_sse
from ektelo_ng.operators.client import InvalidRequestError
from ektelo_ng.plans.structure_first import bucket_trees, structure_epsilon, structure_first, structure_first_plus

BOUND = 6
vectors = st.integers(2, 7).flatmap(lambda n: st.lists(st.integers(0, BOUND), min_size=n, max_size=n))


def sse(v):
    return float(((v - v.mean()) ** 2).sum()) if v.size else 0.0


def brute_best(x, j, q):
    """The least total SSE of x[:q] in j non-empty buckets, over every choice of cut points."""
    if q < j:
        return np.inf
    return min(sum(sse(x[a:b]) for a, b in zip((0, *cuts), (*cuts, q))) for cuts in combinations(range(1, q), j - 1))


def scores(x, j):
    """Every score the sampler can use at step j: best_j(q) + SSE(q, right) for q < right."""
    table, best = bucket_costs(x, j, Work())
    n = x.size
    return np.array([best[j - 1][q] + table[q, r] for r in range(1, n + 1) for q in range(j, r)])


@settings(max_examples=60, deadline=None)
@given(vectors)
def test_bucket_costs_match_enumeration(values):
    x = np.array(values, dtype=float)
    n = x.size
    table, best = bucket_costs(x, n, Work())
    for a in range(n):
        for b in range(a + 1, n + 1):
            assert table[a, b] == pytest.approx(sse(x[a:b]), abs=1e-9)
    for j in range(1, n + 1):
        for q in range(n + 1):
            assert best[j - 1][q] == pytest.approx(brute_best(x, j, q), abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(vectors)
def test_scores_move_by_at_most_2f_plus_1_between_clipped_neighbours(values):
    x = np.array(values, dtype=float)
    for j in range(1, x.size):
        base = scores(x, j)
        for cell in range(x.size):
            for step in (1, -1):
                y = x.copy()
                y[cell] = np.clip(y[cell] + step, 0, BOUND)  # clipping keeps neighbours within one unit
                assert np.abs(scores(y, j) - base).max() <= 2 * BOUND + 1 + 1e-9


def _session(x, budget, seed=0):
    return ek.protect({"a": np.repeat(np.arange(x.size), x)}, ek.Domain.from_dict({"a": x.size}), budget, seed=seed)


def test_the_kernel_samples_the_stated_law_and_charges_epsilon():
    x = np.array([4, 4, 5, 0, 1, 0, 6, 6])
    s = _session(x, ek.PureDP(10_000), seed=8)
    v = s.source.vectorize()
    runs = 4000
    picks = np.array([v.structure_first(2, BOUND, 1)[0] for _ in range(runs)])
    assert s.budget.spent == ek.PureDP(runs)
    table = interval_sse(x.astype(float), Work())
    cost = np.array([table[0, q] + table[q, x.size] for q in range(1, x.size)])
    counts = np.bincount(picks - 1, minlength=x.size - 1)
    assert stats.chisquare(counts, runs * softmax(-cost / (2 * (2 * BOUND + 1)))).pvalue > 1e-6
    assert stats.chisquare(counts, runs * softmax(-cost / (2 * BOUND + 1))).pvalue < 1e-6  # without the 2
    cuts = v.structure_first(4, BOUND, 1)
    assert len(cuts) == 3 and 0 < cuts[0] < cuts[1] < cuts[2] < x.size
    z = _session(x, ek.ZCDP(1))
    z.source.vectorize().structure_first(3, BOUND, 1)
    assert z.budget.spent == ek.ZCDP("1/8")


def test_too_many_buckets_are_refused_and_nothing_is_spent():
    s = _session(np.ones(4, int), ek.PureDP(1))
    with pytest.raises(InvalidRequestError, match="5 buckets need at least as many cells"):
        s.source.vectorize().structure_first(5, 1, 1)
    assert s.budget.spent == ek.PureDP.zero()


def test_structure_first_plus_spends_its_budget_and_finds_the_steps():
    x = np.concatenate([np.full(20, 30), np.zeros(30, int), np.full(14, 8)])
    s = _session(x, ek.PureDP(5000))
    estimate = structure_first_plus(s.source, Prefix(x.size), ek.PureDP(5000), buckets=3, bound=40)
    assert s.budget.spent == ek.PureDP(5000)
    assert np.abs(estimate - x).max() < 1.0
    low = _session(x, ek.PureDP("0.1"), seed=1)
    estimate = structure_first_plus(low.source, Prefix(x.size), ek.PureDP("0.1"))  # bound from a noisy total
    assert low.budget.spent == ek.PureDP("0.1") and np.all(np.isfinite(estimate))
    with pytest.raises(ValueError, match="buckets must be between 2 and"):
        structure_first_plus(low.source, Prefix(x.size), ek.PureDP("0.1"), buckets=1000)


def test_the_authors_structure_epsilon_rule():
    """Brute force over the authors' 19 grid points; with DPBench's bound (10^4 N / n) the rule takes eps / 20."""
    def rule(n, k, eps, f):
        e1 = [eps * i / 20 for i in range(1, 20)]
        v = [8 * (k - 1) ** 2 * (2 * f + 1) ** 2 / (e * (8 * (k - 1) * (2 * f + 1) - e * n * f * f))
             + 2 * k / (eps - e) ** 2 for e in e1]
        return e1[int(np.argmin(v))]

    for n, k, f in ((256, 26, 1e4 * 1e3 / 256), (4096, 410, 1e4 * 1e7 / 4096), (64, 7, 0.01), (64, 7, 0.2), (20, 2, 3)):
        got = structure_epsilon(n, k, Fraction(1, 10), f)
        assert float(got) == pytest.approx(rule(n, k, 0.1, f)) and got.denominator % 10 == 0
    assert structure_epsilon(4096, 410, Fraction(1, 10), 1e4 * 1e3 / 4096) == Fraction(1, 200)
    assert structure_epsilon(64, 7, Fraction(1, 10), 0.01) > Fraction(1, 200)  # a small bound moves it


@pytest.mark.parametrize("cuts", [[0, 1], [0, 5], [0, 1, 3, 8, 20], [0, 16, 17, 40]])
def test_bucket_trees_are_the_authors_padded_binary_trees_scaled_to_l1_one(cuts):
    M = bucket_trees(cuts)
    dense = M.dense()
    assert np.allclose(np.abs(dense).sum(axis=0), 1.0)  # every column: its bucket's h levels at 1 / h
    rows = []
    for start, stop in zip(cuts, cuts[1:]):
        h = int(np.ceil(np.log2(stop - start))) + 1
        for level in range(h):
            for lo in range(start, stop, 2**level):
                row = np.zeros(cuts[-1])
                row[lo:min(lo + 2**level, stop)] = 1 / h
                rows.append(row)
    assert sorted(map(tuple, dense.round(12))) == sorted(map(tuple, np.array(rows).round(12)))


def test_structure_first_as_dpbench_spends_its_budget_and_resolves_every_cell():
    """k = ceil(n / 10) buckets, each a binary tree down to its cells: with a large budget every cell is
    estimated (no averaging within buckets, unlike SF+), and the plan spends exactly its budget."""
    x = np.concatenate([np.full(20, 30), np.zeros(30, int), np.full(14, 8), np.arange(16)])
    s = _session(x, ek.PureDP(20_000))
    estimate = structure_first(s.source, Prefix(x.size), ek.PureDP(20_000), records=int(x.sum()))
    assert s.budget.spent == ek.PureDP(20_000)
    assert np.abs(estimate - x).max() < 0.5
    low = _session(x, ek.PureDP("0.1"), seed=2)
    estimate = structure_first(low.source, Prefix(x.size), ek.PureDP("0.1"))  # N from a noisy total
    assert low.budget.spent == ek.PureDP("0.1") and np.all(np.isfinite(estimate))
    tiny = _session(np.array([3, 0, 5]), ek.PureDP(1000))  # one bucket: no structure step, all on the tree
    assert np.abs(np.asarray(structure_first(tiny.source, Prefix(3), ek.PureDP(1000), records=8)) - [3, 0, 5]).max() < 0.5
    assert tiny.budget.spent == ek.PureDP(1000)


def test_blocked_sse_and_dynamic_program_equal_the_plain_formulas_across_blocks():
    """n = 600 spans several 256-wide blocks of interval_sse and bucket_costs."""
    x = np.random.default_rng(4).poisson(3.0, 600).astype(float)
    c1, c2 = np.cumsum(np.append(0.0, x)), np.cumsum(np.append(0.0, x * x))
    a, b = np.meshgrid(np.arange(601), np.arange(601), indexing="ij")
    with np.errstate(divide="ignore", invalid="ignore"):
        plain = np.where(b > a, np.maximum((c2[b] - c2[a]) - (c1[b] - c1[a]) ** 2 / (b - a), 0.0), np.inf)
    table, best = bucket_costs(x, 4, Work())
    np.testing.assert_array_equal(table, plain)
    expected = [plain[0]]
    for _ in range(3):
        expected.append(np.min(expected[-1][:, None] + plain, axis=0))
    for got, want in zip(best, expected):
        np.testing.assert_array_equal(got, want)
