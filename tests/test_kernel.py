"""The kernel through its public front door: each weakness of the reference kernel attempted, bad
input refused without changing anything, charges tied to the noise actually used."""

from __future__ import annotations

import ast
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import ektelo_ng as ek
from ektelo_ng.operators.client import InvalidRequestError, UnknownSourceError
from ektelo_ng.operators.matrix import Dense, Identity, Kronecker, Total
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.operators.predicates import attr
from ektelo_ng.operators.specs import to_spec

DOMAIN = ek.Domain.from_dict({"sex": ["F", "M"], "age": 8, "zone": 5})


def table(rows=400, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "sex": np.where(rng.random(rows) < 0.5, "F", "M"),
        "age": rng.integers(0, 8, rows),
        "zone": rng.integers(0, 5, rows),
    }


def truth(data, attributes=("sex", "age", "zone")):
    codes = {"sex": (np.asarray(data["sex"]) == "M").astype(int), "age": data["age"], "zone": data["zone"]}
    sizes = {"sex": 2, "age": 8, "zone": 5}
    flat = np.ravel_multi_index([codes[a] for a in attributes], [sizes[a] for a in attributes])
    return np.bincount(flat, minlength=math.prod(sizes[a] for a in attributes))


def session(budget=ek.PureDP(1), seed=None, **kwargs):
    return ek.protect(table(), DOMAIN, budget, seed=seed, **kwargs)


# ---- the happy path ----------------------------------------------------------------------


def test_vectorize_and_measure_with_exact_charge():
    s = session(seed=1)
    x = s.source.vectorize()
    assert x.kind == "vector" and x.size == DOMAIN.size
    answer = x.laplace(Identity(x.size), Fraction(1, 4))
    assert answer.charge == ek.PureDP("1/4")
    assert answer.scale == pytest.approx(4.0, rel=1e-12) and answer.scale >= 4.0
    assert s.budget.spent == ek.PureDP("1/4") and s.budget.remaining == ek.PureDP("3/4")
    assert np.abs(answer.values - truth(table())).max() < 4 * 25  # Laplace(4) tail beyond 100: < 1e-10 per cell


def test_where_and_project_count_the_right_rows():
    s = session(budget=ek.PureDP(100), seed=2)
    data = table()
    older_women = s.source.where((attr("age") >= 3) & (attr("sex") == "F")).project(["age"]).vectorize()
    answer = older_women.laplace(Identity(8), 50)
    expected = np.bincount(data["age"][(data["age"] >= 3) & (np.asarray(data["sex"]) == "F")], minlength=8)
    assert np.abs(answer.values - expected).max() < 2


# ---- the reference kernel's weaknesses (notes/prior-art.md) ----------------------------


def test_a_millionfold_transform_is_charged_a_million_times():
    """(Transforms are exact: 10^6 times up to 2^32 records stays below 2^53.)"""
    s = session(budget=ek.PureDP(10**6))
    x = s.source.vectorize()
    big = x.transform(Identity(x.size) * 1e6)
    big.laplace(Identity(x.size), Fraction(1, 10))
    assert s.budget.spent == ek.PureDP(10**5)
    small = session(budget=ek.PureDP(1))
    y = small.source.vectorize().transform(Identity(x.size) * 1e6)
    with pytest.raises(ek.BudgetExceededError, match="nothing was measured"):
        y.laplace(Identity(x.size), Fraction(1, 10))
    assert small.budget.spent == ek.PureDP.zero()


def test_a_heavily_weighted_measurement_gets_proportional_noise():
    s = session(seed=3)
    x = s.source.vectorize()
    answer = x.laplace(Identity(x.size) * 1e9, 1)
    assert answer.scale >= 1e9  # the kernel's own L1 sensitivity sets the noise
    assert answer.charge == ek.PureDP(1)


@pytest.mark.parametrize(
    "matrix",
    [
        Dense([[1, 1, 0], [1, 0, 1]]),  # cell 0 in two groups (repeated cell)
        Dense([[1e9, 0, 0], [0, 1, 1]]),  # weighted group
        Dense([[1, 0, 0], [0, 1, 0]]),  # cell 2 in no group
    ],
)
def test_non_partitions_are_refused(matrix):
    s = session()
    x = s.source.project(["sex"]).vectorize().transform(Dense([[1, 0], [0, 1], [1, 1]]))
    for method in (x.split_by_partition, x.reduce_by_partition):
        with pytest.raises(ValueError, match="not a partition"):  # by the client: the kernel takes labels only
            method(matrix)


def test_partitions_compose_in_parallel():
    s = session(budget=ek.PureDP(1))
    x = s.source.vectorize()
    parts = x.split_by_partition(np.arange(x.size) % 3)
    for part in parts:
        part.laplace(Identity(part.size), 1)  # each part may spend the whole budget
    assert s.budget.spent == ek.PureDP(1)
    with pytest.raises(ek.BudgetExceededError):
        x.noisy_count(Fraction(1, 100))


@pytest.mark.parametrize("epsilon", [Fraction(1, 3), Fraction(2, 7), Fraction(1)])
def test_the_charge_is_the_noise_actually_used(epsilon):
    s = session(budget=ek.PureDP(3))
    x = s.source.vectorize()
    M = Kronecker([Identity(2), Prefix(8), Total(5)])
    answer = x.laplace(M, epsilon)
    assert answer.charge.epsilon == epsilon
    assert answer.scale == pytest.approx(M.sensitivity("l1") / float(epsilon), rel=1e-12)


def test_gaussian_charge_follows_sigma_and_the_kernels_sensitivity():
    s = session(budget=ek.ZCDP(10))
    x = s.source.vectorize()
    M = Identity(x.size) * 3.0
    answer = x.gaussian(M, sigma=2.0)
    # rho = Delta_2^2 / (2 sigma'^2), sigma' the smallest scale >= sigma the exact sampler draws (here sigma,
    # a power of two): exactly 9/8 for this integer matrix on counts, up to the accountant's grid
    assert answer.scale == 2.0
    assert answer.charge.rho == Fraction(9, 8)
    by_rho = x.gaussian(Identity(x.size), rho=Fraction(1, 2))
    assert by_rho.charge == ek.ZCDP("1/2") and by_rho.scale == 1.0
    with pytest.raises(InvalidRequestError, match="zCDP session"):
        session().source.vectorize().gaussian(Identity(x.size), rho=1)


def test_secure_noise_has_no_seed_and_seeded_mode_is_flagged_everywhere():
    secure_a, secure_b = session(budget=ek.PureDP(10)), session(budget=ek.PureDP(10))
    a = secure_a.source.vectorize().laplace(Identity(DOMAIN.size), 1)
    b = secure_b.source.vectorize().laplace(Identity(DOMAIN.size), 1)
    assert not a.seeded and not np.array_equal(a.values, b.values)
    assert all(not e["seeded"] for e in secure_a.transcript())
    seeded_a, seeded_b = session(seed=7), session(seed=7)
    c = seeded_a.source.vectorize().laplace(Identity(DOMAIN.size), 1)
    d = seeded_b.source.vectorize().laplace(Identity(DOMAIN.size), 1)
    assert c.seeded and np.array_equal(c.values, d.values)
    assert all(e["seeded"] for e in seeded_a.transcript())


def test_a_client_cannot_choose_the_seed_through_the_protocol():
    s = session()
    x = s.source.vectorize()
    request = {"op": "laplace", "source": x.id, "matrix": to_spec(Identity(x.size)).model_dump(mode="json"),
               "epsilon": "1/2", "seed": 1}
    reply = json.loads(s.transport(json.dumps(request)))
    assert reply["kind"] == "error" and "seed" in reply["message"]
    assert s.budget.spent == ek.PureDP.zero()


def test_answers_lie_on_the_release_grid():
    s = session(budget=ek.PureDP(5), seed=4)
    x = s.source.vectorize()
    weighted = x.laplace(Dense(np.random.default_rng(0).normal(size=(6, x.size))), 1)
    codes = weighted.values / weighted.grid
    assert np.array_equal(codes, np.rint(codes))
    counts = x.laplace(Prefix(x.size), 1)
    assert counts.grid <= 1 and np.array_equal(counts.values / counts.grid, np.rint(counts.values / counts.grid))


def test_no_string_is_ever_evaluated():
    s = session()
    with pytest.raises(InvalidRequestError, match="malformed request"):
        s.request(_raw({"op": "where", "source": s.source.id, "predicate": "age > 3"}))
    for path in Path("kernel").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"eval", "exec", "compile", "__import__"}, f"{path} calls {node.func.id}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.split(".")[0] in {"pickle", "marshal", "shelve", "dill"} for n in names), path


class _raw:
    """A pre-serialized request, to send malformed messages through a real session."""

    def __init__(self, payload):
        self.payload = payload

    def model_dump_json(self):
        return json.dumps(self.payload)


# ---- bad input: a clear error and nothing changed --------------------------------------


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"sex": ["F"], "age": [9], "zone": [0]}, "age"),
        ({"sex": ["F"], "age": [1], "zone": [float("nan")]}, "zone"),
        ({"sex": ["X"], "age": [1], "zone": [0]}, "sex"),
        ({"sex": ["F"], "age": [1]}, "zone"),
        ({"sex": ["F"], "age": [1], "zone": [0], "income": [3]}, "income"),
    ],
)
def test_bad_tables_are_refused_with_the_column_named(bad, message):
    with pytest.raises(ValueError, match=message):
        ek.protect(bad, DOMAIN, ek.PureDP(1))


@pytest.mark.parametrize("epsilon", [0, -1, float("nan"), float("inf"), "abc"])
def test_bad_epsilons_are_refused(epsilon):
    s = session()
    x = s.source.vectorize()
    with pytest.raises(ValueError):
        x.laplace(Identity(x.size), epsilon)
    assert s.budget.spent == ek.PureDP.zero()


def test_unknown_and_foreign_handles_are_refused():
    s, other = session(), session()
    foreign = other.source.vectorize()
    foreign._session = s  # a handle from another kernel sent to this one
    with pytest.raises(UnknownSourceError):
        foreign.laplace(Identity(foreign.size), 1)
    with pytest.raises(InvalidRequestError, match="malformed"):
        s.request(_raw({"op": "vectorize", "source": "not-a-handle"}))
    assert s.budget.spent == ek.PureDP.zero()


def test_operations_on_the_wrong_source_kind_or_shape():
    s = session()
    x = s.source.vectorize()
    with pytest.raises(InvalidRequestError, match="needs a table"):
        x.vectorize()
    with pytest.raises(InvalidRequestError, match="needs a vector"):
        s.source.laplace(Identity(DOMAIN.size), 1)
    with pytest.raises(InvalidRequestError, match="columns but the vector has"):
        x.laplace(Identity(x.size + 1), 1)
    with pytest.raises(InvalidRequestError, match="unknown attribute"):
        s.source.project(["income"])
    with pytest.raises(InvalidRequestError):
        s.source.project(["age"]).where(attr("sex") == "F")  # sex was projected away
    assert s.budget.spent == ek.PureDP.zero()


@pytest.mark.parametrize(
    "payload",
    ["not json", "{}", '{"op": "laplace"}', '{"op": "budget", "extra": 1}', '{"op": "nope"}', "[1, 2]"],
)
def test_malformed_messages_get_an_error_response(payload):
    s = session()
    reply = json.loads(s.transport(payload))
    assert reply["kind"] == "error" and reply["error"] == "invalid_request"


def test_overspend_is_refused_before_noise_and_changes_nothing():
    s = session(budget=ek.PureDP(1))
    x = s.source.vectorize()
    x.laplace(Identity(x.size), Fraction(3, 4))
    lineage_before = s.lineage().number_of_nodes()
    with pytest.raises(ek.BudgetExceededError):
        x.laplace(Identity(x.size), Fraction(1, 2))
    assert s.budget.spent == ek.PureDP("3/4")
    assert s.lineage().number_of_nodes() == lineage_before
    assert [e["outcome"] for e in s.transcript() if e["op"] == "laplace"] == ["ok", "budget_exceeded"]


def test_lineage_and_transcript_are_public_json():
    s = session(budget=ek.PureDP(100))
    x = s.source.vectorize()
    x.transform(Prefix(x.size)).laplace(Identity(x.size), 1)
    graph = s.lineage()
    stabilities = sorted(d["stability"] for _, _, d in graph.edges(data=True))
    assert stabilities == ["1", str(x.size)]
    json.dumps(s.transcript())
    entry = [e for e in s.transcript() if e["op"] == "laplace"][0]
    assert entry["charge"] == "1" and "values" not in json.dumps(entry)
    assert s.budget.per_source[x.id] == ek.PureDP(x.size)


def test_zcdp_budget_has_an_approximate_dp_view():
    s = session(budget=ek.ZCDP("1/2"))
    x = s.source.vectorize()
    x.gaussian(Identity(x.size), rho=Fraction(1, 2))
    assert 0 < s.budget.approx_dp(1e-6) < 1 / 2 + 2 * math.sqrt(0.5 * math.log(1e6))


# ---- statistical checks of the released noise (false-failure rate 1e-6 each) -----------


def _scale_accepted(residuals, scale, noise):
    law = stats.laplace(scale=scale) if noise == "laplace" else stats.norm(scale=scale)
    return stats.kstest(residuals, law.cdf).pvalue > 1e-6


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_released_noise_has_the_stated_scale_and_the_test_has_power(noise):
    budget = ek.PureDP(10) if noise == "laplace" else ek.ZCDP(10)
    s = ek.protect({"v": np.zeros(1, dtype=int)}, ek.Domain.from_dict({"v": 20000}), budget, seed=11)
    x = s.source.vectorize()  # one record, in cell 0
    M = Identity(x.size) * 0.37  # non-integral answers exercise the grid rounding
    answer = x.laplace(M, 1) if noise == "laplace" else x.gaussian(M, rho=Fraction(1, 2))
    residuals = answer.values - M @ np.eye(1, x.size).ravel()
    assert _scale_accepted(residuals, answer.scale, noise)
    assert not _scale_accepted(residuals, 0.7 * answer.scale, noise)
    assert not _scale_accepted(residuals, 1.3 * answer.scale, noise)


def test_worst_approx_charges_its_epsilon_and_favours_the_worst_query():
    s = session(budget=ek.PureDP(100), seed=9)
    x = s.source.project(["age"]).vectorize()
    truth = np.bincount(table()["age"], minlength=8)
    estimate = truth.astype(float)
    estimate[5] += 60  # query 5 is badly approximated
    picks = [x.worst_approx(Identity(8), estimate, 1) for _ in range(50)]
    assert np.mean(np.array(picks) == 5) > 0.9
    assert s.budget.spent == ek.PureDP(50)
    zcdp = session(budget=ek.ZCDP(1)).source.vectorize()
    zcdp.worst_approx(Identity(zcdp.size), np.zeros(zcdp.size), 1)
    assert zcdp.session.budget.spent == ek.ZCDP("1/8")  # eps-DP exponential mechanism is eps^2/8-zCDP
    with pytest.raises(InvalidRequestError, match="estimate must be"):
        x.worst_approx(Identity(8), np.zeros(3), 1)


def test_vectorize_on_attributes_is_the_projected_histogram_in_one_step():
    s = session(budget=ek.PureDP(10**6), seed=2)
    direct = s.source.vectorize(["age", "zone"])
    projected = s.source.project(["zone", "age"]).vectorize()
    truth = np.zeros((8, 5))
    np.add.at(truth, (table()["age"], table()["zone"]), 1)
    for vector in (direct, projected):  # noise of scale 2e-6 rounds away
        np.testing.assert_array_equal(vector.laplace(Identity(40), 5 * 10**5).values.round(), truth.ravel())
    lineage = s.lineage()
    assert lineage.nodes[direct.id]["attributes"] == ["age", "zone"]
    assert lineage.edges[s.source.id, direct.id]["stability"] == "1"
    with pytest.raises(InvalidRequestError):
        s.source.vectorize(["no_such_attribute"])


def test_releasing_a_handle_frees_it_and_its_descendants_and_keeps_the_spend():
    s = session(budget=ek.PureDP(1))
    x = s.source.vectorize()
    child = x.transform(Identity(x.size))
    child.noisy_count(Fraction(1, 4))
    other = s.source.vectorize()
    assert x.release() == 2  # x and its transform
    for handle in (x, child):
        with pytest.raises(UnknownSourceError, match="released"):
            handle.noisy_count(Fraction(1, 4))
    other.noisy_count(Fraction(1, 4))  # a sibling is untouched
    assert s.budget.spent == ek.PureDP(Fraction(1, 2))
