"""PHP: the kernel's private split points (scores and their sensitivity by brute force, exact privacy loss
over neighbours, selection frequencies, charge and refusals) and the PHP plan (exact spend, accuracy)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats
from scipy.special import softmax

import ektelo_ng as ek
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.kernel.limits import Work
from ektelo_ng.kernel.mechanisms.php import SENSITIVITY as SPLIT_SENSITIVITY
from ektelo_ng.kernel.mechanisms.php import scores as _scores


def split_scores(x, chunk=256):
    return _scores(x, Work(), chunk=chunk)
from ektelo_ng.operators.client import InvalidRequestError
from ektelo_ng.plans.php import php
from tests.helpers import neighbours

vectors = st.integers(2, 30).flatmap(lambda n: st.lists(st.integers(0, 9), min_size=n, max_size=n))


def deviation(x):
    return float(np.abs(x - x.mean()).sum())


@settings(max_examples=80, deadline=None)
@given(vectors)
def test_split_scores_and_their_sensitivity_by_brute_force(values):
    x = np.array(values, dtype=float)
    scores = split_scores(x, chunk=4)  # small chunks exercise the blocking
    np.testing.assert_allclose(scores, [-(deviation(x[:k]) + deviation(x[k:])) for k in range(1, x.size)], atol=1e-9)
    worst = max(np.abs(split_scores(y) - scores).max() for y in neighbours(x))
    assert worst <= SPLIT_SENSITIVITY + 1e-9


@settings(max_examples=40, deadline=None)
@given(vectors, st.sampled_from([0.1, 1.0, 3.0]))
def test_the_exact_privacy_loss_over_all_neighbours_is_at_most_epsilon(values, epsilon):
    x = np.array(values, dtype=float)

    def law(v, sensitivity):
        return softmax(epsilon * split_scores(v) / (2 * sensitivity))

    loss = max(np.abs(np.log(law(x, SPLIT_SENSITIVITY)) - np.log(law(y, SPLIT_SENSITIVITY))).max() for y in neighbours(x))
    assert loss <= epsilon + 1e-9


def test_the_sensitivity_bound_is_attained():
    """x = 0 vs one record in cell 0 of 64: the split after cell 63 moves by 2 (1 - 1/63)."""
    change = np.abs(split_scores(np.eye(64)[0]) - split_scores(np.zeros(64))).max()
    assert change == pytest.approx(2 * (1 - 1 / 63))


def _session(x, budget, seed=0):
    return ek.protect({"a": np.repeat(np.arange(x.size), x)}, ek.Domain.from_dict({"a": x.size}), budget, seed=seed)


def test_the_kernel_selects_with_the_stated_law_and_charges_epsilon_once_per_round():
    x = np.array([3, 3, 0, 0, 0, 8, 8, 8, 1])
    s = _session(x, ek.PureDP(10_000), seed=4)
    v = s.source.vectorize()
    runs = 4000
    picks = np.array([v.split_points([(0, 9)], 1)[0] for _ in range(runs)])
    assert s.budget.spent == ek.PureDP(runs)
    counts = np.bincount(picks - 1, minlength=8)
    expected = softmax(split_scores(x.astype(float)) / (2 * SPLIT_SENSITIVITY))
    assert stats.chisquare(counts, runs * expected).pvalue > 1e-6
    assert stats.chisquare(counts, runs * softmax(split_scores(x.astype(float)) / 2)).pvalue < 1e-6  # without the 2
    before = s.budget.spent
    assert len(v.split_points([(0, 3), (3, 6), (6, 9)], "1/2")) == 3
    assert s.budget.spent == before + ek.PureDP("1/2")  # disjoint intervals: parallel composition
    z = _session(x, ek.ZCDP(1))
    z.source.vectorize().split_points([(0, 9)], 1)
    assert z.budget.spent == ek.ZCDP("1/8")


@pytest.mark.parametrize("intervals", [[(0, 5), (4, 9)], [(5, 9), (0, 5)], [(0, 1)], [(3, 10)]])
def test_bad_intervals_are_refused_and_nothing_is_spent(intervals):
    s = _session(np.ones(9, int), ek.PureDP(1))
    with pytest.raises(InvalidRequestError, match="sorted, disjoint intervals"):
        s.source.vectorize().split_points(intervals, 1)
    assert s.budget.spent == ek.PureDP.zero()


def test_php_spends_its_budget_and_finds_the_steps():
    x = np.concatenate([np.full(40, 30), np.zeros(60, int), np.full(28, 5)])
    s = _session(x, ek.PureDP(400))
    estimate = php(s.source, Prefix(x.size), ek.PureDP(400), depth=4)
    assert s.budget.spent == ek.PureDP(400)
    assert np.abs(estimate - x).max() < 1.0
    low = _session(x, ek.PureDP("0.1"), seed=1)
    estimate = php(low.source, Prefix(x.size), ek.PureDP("0.1"))
    assert low.budget.spent == ek.PureDP("0.1") and np.all(np.isfinite(estimate))
    with pytest.raises(ValueError, match="depth must be between 1 and"):
        php(low.source, Prefix(x.size), ek.PureDP("0.1"), depth=math.ceil(math.log2(x.size)) + 1)


def test_php_stops_splitting_beyond_2000_intervals_in_dpbenchs_order():
    x = np.arange(4096)  # a ramp: at this budget every cluster is split, near its middle
    s = _session(x, ek.PureDP(4000))
    estimate = php(s.source, Prefix(x.size), ek.PureDP(4000))  # 11 levels: 1,024 clusters after 10, then 977 splits
    splits = [t for t in s.transcript() if t["op"] == "split_points"]
    assert len(splits) == 11 and s.budget.spent == ek.PureDP(4000)
    assert splits[-1]["intervals"] == {"length": 1024}  # the whole level is decided, for one charge
    (choice,) = [t for t in s.transcript() if t["op"] == "choose_partition"]
    assert choice["cuts"] == {"length": 2000}
    (measured,) = estimate.measurements
    assert measured.matrix.shape[0] == 2001  # the finest partition, at this budget


class ScriptedVector:
    """A stand-in for a vector handle whose split decisions come from a rule, to replay DPBench's queue."""

    def __init__(self, size, rule):
        self.size, self.rule, self.requests = size, rule, []

    def split_points(self, intervals, epsilon, split_penalty=None):
        self.requests.append(list(intervals))
        return [self.rule(a, b) for a, b in intervals]


def dpbench_queue(n, rule, max_depth, max_clusters=2000):
    """DPBench's Clustering.topDown, written from its description: a list of clusters, each with its level and a
    ready flag; the first cluster not ready is decided; a split replaces it by its two halves at the end of the list
    (ready if of one cell or of level max_depth); a decision appends the partition to the chain, a kept cluster only
    while some cluster is not ready. (It stops once every cluster is ready: DPBench would decide the last one again.)"""
    clusters, chain = [[0, n, 1, False]], []
    while len(clusters) < n and len(clusters) <= max_clusters:
        pending = [c for c in clusters if not c[3]]
        if not pending:
            break
        cluster = pending[0]
        cut = rule(cluster[0], cluster[1])
        if cut is None:
            cluster[3] = True
            if any(not c[3] for c in clusters):
                chain.append(None)
            continue
        clusters.remove(cluster)
        for a, b in ((cluster[0], cut), (cut, cluster[1])):
            clusters.append([a, b, cluster[2] + 1, b - a == 1 or cluster[2] + 1 == max_depth])
        chain.append(cut)
    return chain


@pytest.mark.parametrize("n, keep, max_clusters", [(64, 0.0, 2000), (64, 0.3, 2000), (300, 0.5, 2000),
                                                  (256, 0.2, 40), (4096, 0.1, 2000), (16, 0.0, 2000)])
def test_php_decides_clusters_level_by_level_in_the_order_dpbench_does(n, keep, max_clusters, monkeypatch):
    import ektelo_ng.plans.php as module

    monkeypatch.setattr(module, "MAX_INTERVALS", max_clusters + 1)
    rng = np.random.default_rng(n)
    decided = {}

    def rule(a, b):  # a fixed random decision per interval: kept whole with probability ``keep``
        if (a, b) not in decided:
            decided[a, b] = None if rng.random() < keep else int(rng.integers(a + 1, b))
        return decided[a, b]

    max_depth = int(math.log2(n))
    vector = ScriptedVector(n, rule)
    chain, levels = module.dpbench_chain(vector, Fraction(1), max_depth - 1, 1.0)
    assert chain == dpbench_queue(n, rule, max_depth, max_clusters)
    assert levels == len(vector.requests) <= max_depth - 1


def test_php_spends_its_levels_final_choice_and_counts_as_dpbench_and_php_plus_its_rounds():
    from ektelo_ng.plans.php import php_plus

    x = np.repeat(np.arange(100) % 7, 3) * 50
    s = _session(x, ek.PureDP(1))
    php(s.source, Prefix(x.size), ek.PureDP(1))  # 300 cells: int(log2 300) = 8 levels, 7 of them split
    splits = [t for t in s.transcript() if t["op"] == "split_points"]
    assert 1 <= len(splits) <= 7 and {t["epsilon"] for t in splits} == {"1/32"}  # eps / 2 / (2 * 8)
    assert [t["epsilon"] for t in s.transcript() if t["op"] == "choose_partition"] == ["1/4"]
    assert s.budget.spent == ek.PureDP(1)  # the counts take the rest: 1/2 and the levels not paid for
    s = _session(x, ek.PureDP(1))
    php_plus(s.source, Prefix(x.size), ek.PureDP(1))
    splits = [t for t in s.transcript() if t["op"] == "split_points"]
    assert len(splits) == 5 and {t["epsilon"] for t in splits} == {"1/10"}  # ceil(8.23 / 2) = 5
    assert s.budget.spent == ek.PureDP(1)


def test_php_clips_interval_means_at_zero_and_says_why_it_has_no_error_bars():
    x = np.r_[np.zeros(60, int), np.full(4, 3)]
    s = _session(x, ek.PureDP("0.05"), seed=2)
    estimate = php(s.source, Prefix(x.size), ek.PureDP("0.05"))
    assert np.all(np.asarray(estimate) >= 0) and "clipped at 0" in estimate.note


# ---- keeping an interval whole, and the final choice among a chain of partitions --------------------------------

from ektelo_ng.kernel.mechanisms.php import chain_check, chain_scores, chain_sensitivity  # noqa: E402
from ektelo_ng.kernel.mechanisms.php import sensitivity as split_sensitivity  # noqa: E402

chains = vectors.flatmap(lambda v: st.tuples(
    st.just(v),
    st.lists(st.one_of(st.none(), st.integers(1, len(v) - 1)), min_size=1, max_size=2 * len(v)).map(
        lambda cuts: [c for i, c in enumerate(cuts) if c is None or c not in cuts[:i]]),
    st.sampled_from([0.0, 0.5, 20.0])))


def partitions(n, cuts):
    """The chain's partitions as lists of (start, stop), by brute force."""
    made, out = {0, n}, []
    for cut in [None] + list(cuts):
        made |= {cut} if cut is not None else set()
        edges = sorted(made)
        out.append(list(zip(edges, edges[1:])))
    return out


def brute_chain_scores(x, cuts, penalty):
    return [-(sum(deviation(x[a:b]) for a, b in p) + penalty * len(p)) for p in partitions(x.size, cuts)]


def kernel_chain_scores(x, cuts, penalty):
    steps, _ = chain_check(list(cuts), x.size)
    return chain_scores(x.astype(float), steps, penalty, Work())


@settings(max_examples=80, deadline=None)
@given(chains)
def test_chain_scores_and_their_sensitivity_by_brute_force(chain):
    values, cuts, penalty = chain
    x = np.array(values, dtype=float)
    scores = kernel_chain_scores(x, cuts, penalty)
    np.testing.assert_allclose(scores, brute_chain_scores(x, cuts, penalty), atol=1e-9)
    worst = max(np.abs(kernel_chain_scores(y, cuts, penalty) - scores).max() for y in neighbours(x))
    assert worst <= SPLIT_SENSITIVITY + 1e-9


@settings(max_examples=40, deadline=None)
@given(chains, st.sampled_from([0.1, 1.0, 3.0]))
def test_the_chain_choice_loses_at_most_epsilon_over_all_neighbours(chain, epsilon):
    values, cuts, penalty = chain
    x = np.array(values, dtype=float)

    def law(v):
        return softmax(epsilon * kernel_chain_scores(v, cuts, penalty) / (2 * SPLIT_SENSITIVITY))

    assert max(np.abs(np.log(law(x)) - np.log(law(y))).max() for y in neighbours(x)) <= epsilon + 1e-9


@settings(max_examples=60, deadline=None)
@given(vectors, st.sampled_from([0.0, 1.0, 30.0]))
def test_keeping_an_interval_whole_scores_the_penalty_less_its_deviation(values, penalty):
    """DPBench's PHP weighs -dev(C) against -(dev(left) + dev(right) + b); adding b to both is the same law."""
    x = np.array(values, dtype=float)
    scores = _scores(x, Work(), penalty)
    expected = [penalty - deviation(x)] + [-(deviation(x[:k]) + deviation(x[k:])) for k in range(1, x.size)]
    np.testing.assert_allclose(scores, expected, atol=1e-9)
    worst = max(np.abs(_scores(y, Work(), penalty) - scores).max() for y in neighbours(x))
    assert worst <= SPLIT_SENSITIVITY + 1e-9


def test_counts_near_2_to_the_53_move_the_scores_by_more_than_2_and_within_the_charged_sensitivity():
    """Counts near 2^53 round their means and deviations: neighbours' float scores move by more than the nominal 2
    (the test's power), never by more than the sensitivity the kernel derives from the public bound."""
    bound = 2.0**53 - 1
    rng = np.random.default_rng(7)
    moved = []
    for _ in range(40):
        n = int(rng.integers(8, 33))
        x = np.zeros(n)
        cells = rng.choice(n, int(rng.integers(2, n)), replace=False)
        x[cells] = np.floor(rng.dirichlet(np.ones(cells.size)) * (bound - 2))
        cuts = [int(c) for c in rng.permutation(np.arange(1, n))[: n // 2]]
        chain, split = kernel_chain_scores(x, cuts, 3.0), _scores(x, Work(), 3.0)
        for y in neighbours(x):
            if y.sum() <= bound:
                moved.append(np.abs(kernel_chain_scores(y, cuts, 3.0) - chain).max())
                assert moved[-1] <= chain_sensitivity(n, bound, 3.0)
                assert np.abs(_scores(y, Work(), 3.0) - split).max() <= split_sensitivity(n, bound, 3.0)
    assert max(moved) > SPLIT_SENSITIVITY


def test_a_large_penalty_rounds_the_scores_it_joins_and_the_sensitivity_covers_it():
    """With a public penalty b = 2^60 the floats near b are 128 or 256 apart, so a deviation of 128 against 129
    (x = [128, 0] against [129, 0]) rounds b + dev, or b - dev, to values up to 256 apart: past the bounds without
    the penalty's term (the test's power), within the kernel's."""
    penalty, bound = 2.0**60, 1024.0
    chain_moves, split_moves = [], []
    for a in range(100, 400):
        x, y = np.array([a, 0.0]), np.array([a + 1, 0.0])
        chain_moves.append(np.abs(kernel_chain_scores(y, [1], penalty) - kernel_chain_scores(x, [1], penalty)).max())
        split_moves.append(np.abs(_scores(y, Work(), penalty) - _scores(x, Work(), penalty)).max())
    assert chain_sensitivity(2, bound, 0.0) < max(chain_moves) <= chain_sensitivity(2, bound, penalty)
    assert split_sensitivity(2, bound) < max(split_moves) <= split_sensitivity(2, bound, penalty)


def test_the_kernel_chooses_a_partition_with_the_stated_law_and_charges_epsilon():
    x = np.array([3, 3, 0, 0, 0, 8, 8, 8, 1])
    cuts, penalty = [5, None, 2, 8, 1], 1.5
    s = _session(x, ek.PureDP(10_000), seed=5)
    v = s.source.vectorize()
    runs = 4000
    picks = np.array([v.choose_partition(cuts, penalty, 1) for _ in range(runs)])
    assert s.budget.spent == ek.PureDP(runs)
    counts = np.bincount(picks, minlength=len(cuts) + 1)
    scores = kernel_chain_scores(x, cuts, penalty)
    assert stats.chisquare(counts, runs * softmax(scores / (2 * SPLIT_SENSITIVITY))).pvalue > 1e-6
    assert stats.chisquare(counts, runs * softmax(scores / 2)).pvalue < 1e-6  # without the factor 2
    z = _session(x, ek.ZCDP(1))
    z.source.vectorize().choose_partition(cuts, penalty, 1)
    assert z.budget.spent == ek.ZCDP("1/8")


def test_the_kernel_keeps_intervals_whole_with_the_stated_law():
    x = np.array([3, 3, 0, 0, 0, 8, 8, 8, 1])
    s = _session(x, ek.PureDP(10_000), seed=6)
    v = s.source.vectorize()
    runs = 3000
    picks = [v.split_points([(0, 9)], 1, split_penalty=4.0)[0] for _ in range(runs)]
    assert s.budget.spent == ek.PureDP(runs)
    counts = np.bincount([0 if k is None else k for k in picks], minlength=9)
    expected = softmax(_scores(x.astype(float), Work(), 4.0) / (2 * SPLIT_SENSITIVITY))
    assert stats.chisquare(counts, runs * expected).pvalue > 1e-6
    assert counts[0] > 0  # kept whole: a score of b - dev(x) = 4 - 26.9 against splits of -9.6 and below
    without_penalty = softmax(np.r_[-deviation(x), split_scores(x.astype(float))] / (2 * SPLIT_SENSITIVITY))
    assert stats.chisquare(counts, runs * without_penalty).pvalue < 1e-6  # the penalty is applied


@pytest.mark.parametrize("cuts", [[0], [9], [3, 3], [3, None, 5, 3]])
def test_chains_with_cuts_outside_or_repeated_are_refused_and_nothing_is_spent(cuts):
    s = _session(np.ones(9, int), ek.PureDP(1))
    with pytest.raises(InvalidRequestError, match="is not a new cut inside the 9 cells"):
        s.source.vectorize().choose_partition(cuts, 1.0, 1)
    assert s.budget.spent == ek.PureDP.zero()


def test_the_scores_hold_no_more_memory_than_their_cost_declares():
    """PHP red team, F1 and F2: a chain's scores held 24 n bytes against the 16 n declared (a float copy of the
    vector and two temporaries), and split scores on 8,192 cells 50.5 MB against 33.5 MB (the previous block alive
    while the next was built). Peaks measured by tracemalloc, the vector's float copy included."""
    import tracemalloc

    n = 1 << 20
    values = np.zeros(n, dtype=np.int64)
    values[::7] = 3
    steps, cost = chain_check([n - 1, None, n - 2, n // 2], n)
    tracemalloc.start()
    chain_scores(values.astype(np.float64), steps, 1.0, Work())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= cost.bytes + (1 << 16), (peak, cost.bytes)
    from ektelo_ng.kernel.mechanisms.php import check

    cost = check([(0, 8192)], 8192)
    tracemalloc.start()
    _scores(values[:8192].astype(np.float64), Work(), 20.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= cost.bytes, (peak, cost.bytes)
