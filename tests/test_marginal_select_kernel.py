"""The kernel's ``marginal_select`` (docs/privacy/marginal-selection.md), tried as a hostile analyst would, through
the JSON protocol: estimates at the float limits, huge weights and offsets, recodings, requests that fail on some
data and not on others, other analysts' handles, big requests refused before any row is read; then the law of its
draws, an empirical audit on neighbouring tables with power, and its charge."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.limits import Limits
from ektelo_ng.kernel.mechanisms import exponential, marginals
from ektelo_ng.kernel.privacy import PureDP, ZCDP
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.kernel.table import load_table

from .test_adversarial import array

ALPHA = 1e-6


def kernel_of(columns: dict[str, list[int]], sizes: dict[str, int], budget=PureDP(100), seed=7, **options) -> Kernel:
    return Kernel(load_table({k: np.array(v) for k, v in columns.items()}, Domain.from_dict(sizes)), budget, seed=seed,
                  **options)


def send(kernel: Kernel, request: dict) -> dict:
    return json.loads(kernel.handle_json(json.dumps(request)))


def root(kernel: Kernel) -> str:
    return send(kernel, {"op": "root"})["source"]


def request(source: str, candidates, estimates, weights=None, offsets=None, epsilon="1", recode=None) -> dict:
    out = {"op": "marginal_select", "source": source, "candidates": candidates,
           "estimates": [array(np.asarray(e, dtype=float)) for e in estimates],
           "weights": weights or [1.0] * len(candidates), "offsets": offsets or [0.0] * len(candidates),
           "epsilon": epsilon}
    if recode is not None:
        out["recode"] = {name: array(np.asarray(v), "int64") for name, v in recode.items()}
    return out


def spent(kernel: Kernel) -> Fraction:
    reply = send(kernel, {"op": "budget"})["spent"]
    return Fraction(reply[next(k for k in reply if k != "kind")])


def seen_by_sampler(columns, sizes, message) -> tuple[np.ndarray, float]:
    """The scores and the sensitivity the kernel hands its sampler for ``message`` (built on the table's root)."""
    seen = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exponential, "select", lambda source, scores, eps, sens: seen.append((scores, sens)) or 0)
        kernel = kernel_of(columns, sizes)
        reply = send(kernel, message(root(kernel)))
        assert reply["kind"] == "selected", reply
    return seen[0]


def one_column(counts: list[int]) -> dict[str, list[int]]:
    return {"a": list(np.repeat(np.arange(len(counts)), counts))}


# ---- the attack: rounding at the float limits ----------------------------------------------------------------------


def test_an_estimate_at_2_to_the_60_cannot_move_a_score_by_more_than_the_charged_sensitivity():
    """With estimate 2^60 in an empty cell, ||c - e||_1 = 2^60 + 128 rounds to 2^60 (a tie, to even) and 2^60 + 129
    to 2^60 + 256: one record moves the float score by 256 weights. A sensitivity of the largest weight alone (the
    real-number argument) would let an epsilon-1 selection leak like epsilon 256; the kernel's covers it."""
    def message(source):
        return request(source, [["a"], ["b"]], [[2.0**60, 0, 0, 0], [0, 0]])

    sizes = {"a": 4, "b": 2}
    first, sensitivity = seen_by_sampler({**one_column([0, 128, 0, 0]), "b": [0] * 128}, sizes, message)
    second, _ = seen_by_sampler({**one_column([0, 129, 0, 0]), "b": [0] * 129}, sizes, message)
    gap = np.abs(first - second).max()
    assert gap == 256  # the attack is real: far beyond the weight
    assert gap <= sensitivity


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=2, max_size=6), st.integers(0, 5),
       st.lists(st.floats(-2.0**70, 2.0**70), min_size=6, max_size=6), st.floats(2.0**-30, 2.0**30),
       st.floats(-2.0**80, 2.0**80))
def test_scores_on_neighbours_differ_by_at_most_the_charged_sensitivity(counts, cell, estimate, weight, offset):
    cell = cell % len(counts)
    estimate = estimate[:len(counts)]
    moved = list(counts)
    moved[cell] += 1

    def message(source):
        return request(source, [["a"]], [estimate], [weight], [offset])

    sizes = {"a": len(counts)}
    (first,), sensitivity = seen_by_sampler(one_column(counts), sizes, message)
    (second,), _ = seen_by_sampler(one_column(moved), sizes, message)
    assert abs(first - second) <= sensitivity
    exact = Fraction(weight) * sum(abs(Fraction(c) - Fraction(e)) for c, e in zip(counts, estimate)) - Fraction(offset)
    assert abs(Fraction(first) - exact) <= (sensitivity - weight) / 2  # the rounding the sensitivity adds, halved


@pytest.mark.parametrize("weight, estimate, offset", [
    (2.0**-400, [5e-324, 1e-308, 0.0, 2.0**-1000], 1e-308),  # products and distances near underflow
    (2.0**-400, [2.0**398, 0.0, 0.0, 0.0], -2.0**399),  # the largest norm with the smallest weight
    (2.0**399, [1.5, 2.0**-1074, 3.0, 2.0**100], 2.0**399),  # the largest weight: scores near 2^800
])
def test_scores_at_the_float_extremes_stay_within_the_charged_sensitivity(weight, estimate, offset):
    """Subnormal estimates and products that underflow, and the largest norms, weights and offsets accepted: the
    float scores of neighbours differ by at most Delta, and each lies within its rounding bound of the exact one."""
    def message(source):
        return request(source, [["a"]], [estimate], [weight], [offset])

    counts = [0, 3, 1, 0]
    (first,), sensitivity = seen_by_sampler(one_column(counts), {"a": 4}, message)
    (second,), _ = seen_by_sampler(one_column([0, 4, 1, 0]), {"a": 4}, message)
    assert abs(Fraction(first) - Fraction(second)) <= Fraction(sensitivity)
    exact = Fraction(weight) * sum(abs(Fraction(c) - Fraction(e)) for c, e in zip(counts, estimate)) - Fraction(offset)
    assert abs(Fraction(first) - exact) <= (Fraction(sensitivity) - Fraction(weight)) / 2


def test_with_no_budget_left_a_selection_is_refused_before_any_row_is_read(monkeypatch):
    """An analyst who has spent everything sends a large selection (600 candidates of 4,096 cells, recoded: 13 MB,
    within the 16 MiB a request may be): the charge is planned from public amounts first, so it is refused with
    nothing built and nothing charged."""
    built = []
    kernel = kernel_of({"a": [0, 1], "b": [1, 2]}, {"a": 64, "b": 64}, budget=PureDP(1))
    source = root(kernel)
    assert send(kernel, {"op": "noisy_count", "source": source, "epsilon": "1"})["kind"] == "answer"
    backend = type(kernel._sources.get(kernel._sources.root, object).backend)
    monkeypatch.setattr(backend, "histogram", lambda *args: built.append(args))
    reply = send(kernel, request(source, [["a", "b"]] * 600, [np.zeros((64, 32))] * 600,
                                 recode={"b": np.arange(64) // 2}))
    assert reply["kind"] == "error" and reply["error"] == "budget_exceeded", reply
    assert not built and spent(kernel) == 1


def test_after_the_charge_nothing_fails_on_an_empty_table_or_at_the_largest_values(monkeypatch):
    """Steps after the charge cannot fail differently with the data: an empty table and its one-record neighbour,
    each asked for estimates of L1 norm 2^399 (the largest accepted: 2^400), the extreme weights and offsets and a
    recoding, are both scored, charged alike, and do the same counted work."""
    replies, works = [], []
    for columns in ({"a": [], "b": []}, {"a": [3], "b": [1]}):
        kernel = kernel_of(columns, {"a": 4, "b": 2})
        steps = []
        original = marginals.steps
        monkeypatch.setattr(marginals, "steps", lambda *args: steps.append(args) or original(*args))
        message = request(root(kernel), [["a"], ["a", "b"]], [np.full(2, 2.0**398), np.full((2, 2), -2.0**397)],
                          [2.0**400, 2.0**-400], [2.0**400, -2.0**400], recode={"a": [0, 0, 1, 1]})
        replies.append(send(kernel, message)["kind"])
        works.append(steps)
        assert spent(kernel) == 1
        monkeypatch.undo()
    assert replies == ["selected", "selected"] and works[0] == works[1] and works[0]


def test_the_kernel_scores_recoded_marginals_in_the_tables_attribute_order():
    columns = {"a": [0, 1, 2, 2, 3], "b": [1, 0, 1, 1, 0]}
    estimate = np.array([[0.5, 1.0], [0.25, 2.0]])  # axes (a recoded: 0,1 -> 0 and 2,3 -> 1), then b

    def message(source):
        return request(source, [["b", "a"]], [estimate], [2.0], [1.0], recode={"a": [0, 0, 1, 1]})

    (score,), _ = seen_by_sampler(columns, {"a": 4, "b": 2}, message)
    counts = np.array([[1, 1], [1, 2]])
    assert score == 2.0 * np.abs(counts - estimate).sum() - 1.0


# ---- refusals: same on neighbours, nothing charged, nothing read ----------------------------------------------------


@pytest.mark.parametrize("mutate, says", [
    (lambda r: r.update(estimates=[array(np.zeros(3))]), "shape"),
    (lambda r: r.update(estimates=[array(np.full(4, np.inf))]), "finite"),
    (lambda r: r.update(estimates=[array(np.zeros(4, dtype=np.int64), "int64")]), "float64"),
    (lambda r: r.update(estimates=[array(np.full(4, 2.0**399))]), "2^400"),
    (lambda r: r.update(weights=[2.0**401]), "weights"),
    (lambda r: r.update(weights=[0.0]), "weights"),
    (lambda r: r.update(offsets=[-2.0**401]), "offsets"),
    (lambda r: r.update(weights=[1.0, 1.0]), "one estimate, weight and offset"),
    (lambda r: r.update(candidates=[["zz"]]), "unknown"),
    (lambda r: r.update(recode={"a": array(np.array([0, 2, 2, 2]), "int64")}), "every new value"),
    (lambda r: r.update(recode={"a": array(np.array([0, 1]), "int64")}), "each of its 4 values"),
    (lambda r: r.update(epsilon="1e-300"), "between"),
])
def test_bad_requests_are_refused_alike_on_neighbours_with_nothing_charged(mutate, says):
    replies = []
    for counts in ([3, 0, 1, 2], [3, 1, 1, 2]):
        kernel = kernel_of(one_column(counts), {"a": 4})
        message = request(root(kernel), [["a"]], [np.zeros(4)])
        mutate(message)
        replies.append(send(kernel, message))
        assert spent(kernel) == 0
    assert replies[0] == replies[1] and replies[0]["kind"] == "error"
    assert says in replies[0]["message"], replies[0]["message"]


def test_another_analysts_handle_is_unknown():
    mine, theirs = kernel_of(one_column([1, 2]), {"a": 2}), kernel_of(one_column([1, 2]), {"a": 2})
    reply = send(mine, request(root(theirs), [["a"]], [np.zeros(2)]))
    assert reply["kind"] == "error" and spent(mine) == 0


def test_too_much_scoring_is_refused_before_any_row_is_read(monkeypatch):
    """4,096 candidates of a 2^12-cell marginal each: 2^24 cells of histograms, refused by the work limit (a small
    one here) with no histogram built."""
    built = []
    kernel = kernel_of({"a": [0, 1], "b": [1, 2]}, {"a": 64, "b": 64}, limits=Limits(work=1 << 20))
    monkeypatch.setattr(type(kernel._sources.get(kernel._sources.root, object).backend), "histogram", lambda *args: built.append(args))
    message = request(root(kernel), [["a", "b"]] * 4096, [np.zeros((64, 64))] * 4096)
    reply = send(kernel, message)
    assert reply["kind"] == "error" and not built and spent(kernel) == 0


def test_recoding_is_counted_per_axis_before_any_row_is_read(monkeypatch):
    """Recoding merges a marginal one axis at a time, each a pass over its cells (about 9 ns a cell): a candidate of
    20 binary attributes, every one recoded, is 20 passes over 2^20 cells, 0.18 s where the cost model charged one
    scoring pass (64 steps a cell: 2.7 ns a step, twice the kernel's calibrated worst). Under a work limit that
    covers scoring the marginal alone, the same request without recoding runs and with it is refused unread."""
    from ektelo_ng.kernel.limits import OBJECT_STEPS

    names = [f"x{i}" for i in range(20)]
    scoring_alone = 64 * 2**20 + OBJECT_STEPS
    replies = []
    for recode in (None, {name: [0, 1] for name in names}):
        built = []
        kernel = kernel_of({name: [0, 1] for name in names}, {name: 2 for name in names},
                           limits=Limits(work=scoring_alone + 8 * OBJECT_STEPS))
        backend = type(kernel._sources.get(kernel._sources.root, object).backend)
        original = backend.histogram
        monkeypatch.setattr(backend, "histogram", lambda *args: built.append(1) or original(*args))
        replies.append(send(kernel, request(root(kernel), [names], [np.zeros((2,) * 20)], recode=recode)))
        replies[-1]["built"] = len(built)
        monkeypatch.undo()
    assert replies[0]["kind"] == "selected", replies[0]
    assert replies[1]["kind"] == "error" and replies[1]["built"] == 0, replies[1]


# ---- the law, the audit, the charge -------------------------------------------------------------------------------


COLUMNS = {"a": [0, 0, 0, 1, 1, 2], "b": [0, 1, 0, 1, 1, 1]}
SIZES = {"a": 3, "b": 2}


def selections(columns, runs: int, epsilon: str, candidates, estimates, weights, sensitivity_of=None) -> np.ndarray:
    with pytest.MonkeyPatch.context() as patch:
        if sensitivity_of is not None:
            patch.setattr(marginals, "sensitivity", sensitivity_of)
        kernel = kernel_of(columns, SIZES, budget=PureDP(10**6), seed=len(columns["a"]))
        source = root(kernel)
        picks = [send(kernel, request(source, candidates, estimates, weights, epsilon=epsilon))["index"]
                 for _ in range(runs)]
    return np.bincount(picks, minlength=len(candidates))


def test_draws_follow_the_exponential_mechanism_and_not_a_halved_sensitivity():
    candidates, estimates, weights = [["a"], ["b"], ["a", "b"]], [np.ones(3), np.zeros(2), np.ones((3, 2))], [1.0, 0.5, 2.0]
    runs = 3000
    picks = selections(COLUMNS, runs, "1", candidates, estimates, weights)
    scores, sensitivity = seen_by_sampler(COLUMNS, SIZES, lambda s: request(s, candidates, estimates, weights))
    law = lambda factor: runs * np.exp(scores / (factor * sensitivity)) / np.exp(scores / (factor * sensitivity)).sum()  # noqa: E731
    assert stats.chisquare(picks, law(2)).pvalue > ALPHA
    assert stats.chisquare(picks, law(1)).pvalue < ALPHA


def audit_ratio(sensitivity_of, runs: int) -> float:
    """Lower confidence bound (5 standard errors) of the largest ratio P(pick | D) / P(pick | D') over two
    candidates whose scores move apart by the full weight: D' adds a record at a = 2, b = 1."""
    candidates, estimates, weights = [["a"], ["b"]], [np.array([3.0, 2.0, 1.0]), np.array([2.0, 5.0])], [1.0, 1.0]
    moved = {"a": COLUMNS["a"] + [2], "b": COLUMNS["b"] + [1]}
    counts = [selections(c, runs, "2", candidates, estimates, weights, sensitivity_of) for c in (COLUMNS, moved)]
    lower = []
    for i in (0, 1):
        for a, b in ((counts[0][i], counts[1][i]), (counts[1][i], counts[0][i])):
            ratio = a / b
            lower.append(ratio - 5 * ratio * math.sqrt(1 / a + 1 / b))
    return max(lower)


def test_an_audit_on_neighbouring_tables_accepts_the_kernel_and_rejects_a_quarter_of_its_sensitivity():
    """On D both estimates are exact but for b's second cell, one above the count; D' adds that record's pair
    (a = 2, b = 1), so a's distance grows by 1 and b's shrinks by 1: their scores move 2 weights apart. At epsilon 2
    the kernel's picks stay within e^2 (ratio about e); with a quarter of the sensitivity they move by e^4 > e^2."""
    assert audit_ratio(None, 4000) <= math.exp(2)
    assert audit_ratio(lambda weights, offsets, norms, size: 0.25, 4000) > math.exp(2)


@pytest.mark.parametrize("budget, charged", [(PureDP(1), Fraction(1, 4)), (ZCDP(1), Fraction(1, 128))])
def test_a_selection_is_charged_epsilon_or_its_bounded_range_zcdp(budget, charged):
    kernel = kernel_of(COLUMNS, SIZES, budget=budget)
    reply = send(kernel, request(root(kernel), [["a"]], [np.zeros(3)], epsilon="1/4"))
    assert reply["kind"] == "selected" and spent(kernel) == charged
