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
    return _scores(x, Work(), chunk)
from ektelo_ng.operators.client import InvalidRequestError
from ektelo_ng.plans.php import php

vectors = st.integers(2, 30).flatmap(lambda n: st.lists(st.integers(0, 9), min_size=n, max_size=n))


def deviation(x):
    return float(np.abs(x - x.mean()).sum())


def neighbours(x):
    for j in range(x.size):
        yield x + np.eye(x.size)[j]
        if x[j] >= 1:
            yield x - np.eye(x.size)[j]


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


def test_php_stops_splitting_beyond_2001_intervals_left_to_right_as_dpbench(monkeypatch):
    import ektelo_ng.plans.php as module

    x = np.arange(4096)  # a ramp: at this budget the splits are close to the middle, as the scores favour
    s = _session(x, ek.PureDP(4000))
    estimate = php(s.source, Prefix(x.size), ek.PureDP(4000))  # 11 rounds: 1,024 intervals after 10, then 977 splits
    splits = [t for t in s.transcript() if t["op"] == "split_points"]
    assert len(splits) == 11 and s.budget.spent == ek.PureDP(4000)
    assert splits[-1]["intervals"] == {"length": 977}  # the transcript abbreviates long lists
    (measured,) = estimate.measurements
    assert measured.matrix.shape[0] == 2001
    monkeypatch.setattr(module, "MAX_INTERVALS", 6)  # the same rule on a size whose requests the transcript shows
    s = _session(np.arange(64), ek.PureDP(4000))
    php(s.source, Prefix(64), ek.PureDP(4000), depth=3)
    rounds = [t["intervals"] for t in s.transcript() if t["op"] == "split_points"]
    assert rounds == [[[0, 64]], [[0, 32], [32, 64]], [[0, 16], [16, 32]]]


def test_php_bisects_int_log2_n_minus_1_times_as_dpbench_and_php_plus_ceil_log2_n_over_2():
    from ektelo_ng.plans.php import php_plus

    x = np.repeat(np.arange(100) % 7, 3)
    for plan, rounds in ((php, 7), (php_plus, 5)):  # 300 cells: int(log2 300) - 1 = 7, ceil(8.23 / 2) = 5
        s = _session(x, ek.PureDP(1))
        plan(s.source, Prefix(x.size), ek.PureDP(1))
        splits = [t for t in s.transcript() if t["op"] == "split_points"]
        assert len(splits) == rounds and {t["epsilon"] for t in splits} == {str(Fraction(1, 2 * rounds))}
        assert s.budget.spent == ek.PureDP(1)
