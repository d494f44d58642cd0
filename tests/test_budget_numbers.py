"""Numbers as a denial of service (issue #15, class 3): bounded parsing and fixed grids.

Every budget number a client sends is checked for size (digits, exponent) before a Fraction is built,
requested amounts are rounded down onto a fixed grid when they are read, and the accountant keeps every
spend on its kind's grid, rounding up. So no reply can grow without bound, and the recorded loss is never
below the exact one (docs/privacy/numbers.md).
"""

from __future__ import annotations

import ast
import json
import math
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.operators import privacy
from ektelo_ng.kernel.accountant import Accountant, BudgetExceeded
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.privacy import (
    AMOUNT_GRID, DIGIT_LIMIT, EXPONENT_LIMIT, MAX_AMOUNT, PureDP, ZCDP, on_grid, requested_amount, to_fraction,
)
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.kernel.table import load_table
from ektelo_ng.operators.client import ResponseAdapter
from ektelo_ng.operators.privacy import split_amount
from tests.budget_model import BudgetModel

SIXTY_BYTES = "1e-" + "9" * 57
HOSTILE = [SIXTY_BYTES, "1e-10000000", "1/1" + "7" * 5000, "1" * 5000, "1e400", "-1e400", "0." + "0" * 5000 + "1"]
NOT_AMOUNTS = ["-0", "nan", "inf", "-inf", "Infinity", "1/0", "0x10", "1_000", "", "1/3e5", "1 / 3"]


def kernel(budget) -> tuple[Kernel, str]:
    k = Kernel(load_table({"a": np.array([1, 2, 3])}, Domain.from_sizes([4], names=["a"])), budget)
    root = json.loads(k.handle_json('{"op": "root"}'))["source"]
    return k, json.loads(k.handle_json(json.dumps({"op": "vectorize", "source": root})))["source"]


def request(field: str, value, source: str) -> dict:
    if field == "epsilon":
        return {"op": "laplace", "source": source, "matrix": IDENTITY, "epsilon": value}
    return {"op": "gaussian", "source": source, "matrix": IDENTITY, field: value}


IDENTITY = {"kind": "stack", "blocks": [{"factors": [{"kind": "identity", "n": 4}]}]}


def digits(value: Fraction) -> int:
    return max(len(str(abs(value.numerator))), len(str(value.denominator)))


# ---- bounded parsing -----------------------------------------------------------------------------


@pytest.fixture
def parsed(monkeypatch) -> list[int]:
    """The length of every string the kernel reads as a number (``Fraction(text)``, ``int(text)``): the work of
    reading an amount, counted instead of timed."""
    from ektelo_ng.kernel import privacy

    lengths: list[int] = []
    real = privacy.Fraction

    def counting(*args, **kwargs):
        lengths.extend(len(a) for a in args if isinstance(a, str))
        return real(*args, **kwargs)

    monkeypatch.setattr(privacy, "Fraction", counting)
    monkeypatch.setattr(privacy, "int", lambda *a: lengths.extend(len(v) for v in a if isinstance(v, str)) or int(*a),
                        raising=False)
    return lengths


@pytest.mark.parametrize("field", ["epsilon", "rho", "sigma"])
@pytest.mark.parametrize("value", HOSTILE)
def test_huge_numbers_are_refused_at_once_naming_the_limit(field, value, parsed):
    k, x = kernel(ZCDP(1))
    text = json.dumps(request(field, value, x))
    reply = json.loads(k.handle_json(text))
    assert max(parsed, default=0) <= DIGIT_LIMIT + 8  # refused on its length: nothing longer was ever read
    assert reply["kind"] == "error" and reply["error"] == "invalid_request"
    message = reply["message"]
    assert field in message
    assert (f"exponents between -{EXPONENT_LIMIT} and {EXPONENT_LIMIT}" in message
            or f"at most {DIGIT_LIMIT}" in message and "digits" in message), message
    assert len(message) < 400  # the value is shown shortened, never echoed whole


def test_the_sixty_byte_epsilon_message_names_its_exponent_and_the_limit():
    k, x = kernel(PureDP(1))
    limit = "the kernel accepts exponents between -20 and 20"
    message = json.loads(k.handle_json(json.dumps(request("epsilon", "1e-10000000", x))))["message"]
    assert f"epsilon '1e-10000000' has an exponent of -10000000; {limit}" in message
    assert len(SIXTY_BYTES) == 60
    message = json.loads(k.handle_json(json.dumps(request("epsilon", SIXTY_BYTES, x))))["message"]
    assert f"(60 characters) has an exponent of -99999999999...; {limit}" in message


@pytest.mark.parametrize("field", ["epsilon", "rho", "sigma"])
@pytest.mark.parametrize("value", NOT_AMOUNTS)
def test_non_numbers_zero_and_infinities_are_refused_clearly(field, value, parsed):
    k, x = kernel(ZCDP(1))
    reply = json.loads(k.handle_json(json.dumps(request(field, value, x))))
    assert max(parsed, default=0) <= DIGIT_LIMIT + 8
    assert reply["kind"] == "error" and field in reply["message"]
    assert any(words in reply["message"] for words in ("must be positive", "finite float; could not read"))


def test_amounts_that_round_to_zero_and_amounts_above_the_limit_are_refused():
    with pytest.raises(ValueError, match="is below 6.36e-84, the smallest amount the kernel charges"):
        requested_amount("epsilon", "1/" + "9" * 100)
    with pytest.raises(ValueError, match=r"above 1e20, the largest amount"):
        requested_amount("epsilon", 10**20 + 1)
    with pytest.raises(ValueError, match="above 1e20"):
        PureDP(10**21)
    with pytest.raises(ValueError, match=f"more than {DIGIT_LIMIT} digits"):
        to_fraction("rho", Fraction(1, 10**300))
    with pytest.raises(ValueError, match="exponent of -30"):
        PureDP(1e-30)  # a float is read through its repr
    assert requested_amount("epsilon", MAX_AMOUNT) == MAX_AMOUNT


def test_usual_amounts_stay_exact():
    for text, exact in [("1/3", Fraction(1, 3)), ("0.1", Fraction(1, 10)), ("1/64", Fraction(1, 64)),
                        ("1e-20", Fraction(1, 10**20)), ("2.5e3", Fraction(2500)), (" 7/49 ", Fraction(1, 7))]:
        assert requested_amount("epsilon", text) == exact
    for value in (0.1, 1 / 3, 1e-20, 123456.789, 2.0**-60, 1e20):
        assert requested_amount("epsilon", Fraction(value)) == Fraction(value)  # binary floats are on the grid
    for value in (0.1, 1 / 3, 1e-20, 123456.789, 1e20):
        assert requested_amount("epsilon", value) == Fraction(repr(value))  # a float is read by its repr


# ---- the grids: properties -----------------------------------------------------------------------

fractions = st.fractions(min_value=Fraction(1, 10**15), max_value=10**15, max_denominator=10**40)
floats = st.floats(min_value=1e-20, max_value=1e20)
decimals = st.builds(lambda m, e: f"{m}e{e}", st.integers(1, 10**40), st.integers(-EXPONENT_LIMIT, EXPONENT_LIMIT))
amounts = st.one_of(fractions, floats, decimals, fractions.map(str))


@settings(max_examples=500, deadline=None)
@given(amounts)
def test_an_accepted_amount_is_on_the_grid_at_most_the_request_and_positive(value):
    exact = to_fraction("epsilon", value)
    try:
        amount = requested_amount("epsilon", value)
    except ValueError as error:
        assert exact > MAX_AMOUNT and "above 1e20" in str(error)
        return
    assert AMOUNT_GRID % amount.denominator == 0
    assert 0 < amount <= exact and exact - amount < Fraction(1, AMOUNT_GRID)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(fractions, floats), min_size=1, max_size=50))
def test_sums_and_zcdp_squares_of_amounts_stay_on_the_grids(values):
    epsilons = [requested_amount("epsilon", v) for v in values if to_fraction("epsilon", v) <= MAX_AMOUNT]
    assert AMOUNT_GRID % sum(epsilons, Fraction(0)).denominator == 0
    assert sum((PureDP(e) for e in epsilons), PureDP.zero()).epsilon == sum(epsilons, Fraction(0))
    squares = sum((e * e / 2 + e * e / 8 for e in epsilons), Fraction(0))  # Laplace and exponential under zCDP
    assert ZCDP.grid % squares.denominator == 0
    assert ZCDP.model_validate({"rho": squares}).rho == squares  # a zCDP budget holds them exactly


stabilities = st.one_of(
    st.sampled_from([Fraction(1), Fraction(2), Fraction(1, 3), Fraction(10**9)]),
    st.floats(1e-6, 1e6).map(lambda f: Fraction(f) * (1 + Fraction(1, 2**40))),  # as the kernel derives them
    st.fractions(min_value=Fraction(1, 100), max_value=100, max_denominator=10**30),
)
costs = st.one_of(
    fractions.filter(lambda f: f <= 10),
    st.floats(0.01, 10).map(lambda s: Fraction(1.5 + 2.0**-20) ** 2 / (2 * Fraction(s) ** 2)),  # sigma charges
)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([PureDP, ZCDP]), st.data())
def test_the_accountant_never_records_less_than_the_exact_loss_and_stays_on_its_grid(kind, data):
    accountant = Accountant(kind(1000), "root")
    model = BudgetModel(quadratic=kind is ZCDP)
    for step in range(data.draw(st.integers(1, 30))):
        node = data.draw(st.sampled_from(model.sources()))
        if data.draw(st.booleans()):
            stability = data.draw(stabilities)
            accountant.add(f"n{step}", node, stability)
            model.add(f"n{step}", node, stability)
        elif data.draw(st.booleans()):
            parts = [f"n{step}.{i}" for i in range(data.draw(st.integers(1, 3)))]
            accountant.add(f"n{step}", node, Fraction(1), is_partition=True)
            for part in parts:
                accountant.add(part, f"n{step}", Fraction(1))
            model.split(f"n{step}", node, parts)
        else:
            cost = data.draw(costs)
            try:
                accountant.charge(node, cost)
            except BudgetExceeded:
                continue
            model.measured[node] += cost
        assert accountant.spent() >= model.loss()
        assert all(kind.grid % value.denominator == 0 for value in accountant.per_source().values())
    assert accountant.spent() <= accountant.total.value


def test_a_stability_times_a_charge_is_rounded_up_onto_the_grid():
    for kind in (PureDP, ZCDP):
        accountant = Accountant(kind(1), "root")
        stability = Fraction(1, 67) * (1 + Fraction(1, 2**40))  # 67: a prime above 64, off every grid
        accountant.add("child", "root", stability)
        accountant.charge("child", Fraction(1, 7))
        exact = Fraction(1, 7) * (stability if kind is PureDP else stability * stability)
        assert accountant.spent() == on_grid(exact, kind.grid, up=True) > exact


def test_a_zigzag_of_stabilities_cannot_grow_a_sources_spend_without_bound():
    accountant = Accountant(PureDP(1), "root")
    parent = "root"
    for i, stability in enumerate([Fraction(1, 10**300)] * 3 + [Fraction(10**300)] * 3):
        accountant.add(f"n{i}", parent, stability)
        parent = f"n{i}"
    with pytest.raises(BudgetExceeded, match="above the limit of 1e\\+20 at any source"):
        accountant.charge(parent, Fraction(1, 10))
    assert all(value == 0 for value in accountant.per_source().values())


@settings(max_examples=5, deadline=None)
@given(st.sampled_from([PureDP, ZCDP]), st.integers(0, 2**32))
def test_budgets_stay_short_after_a_thousand_random_charges(kind, seed):
    rng = random.Random(seed)
    accountant = Accountant(kind(10**6), "root")
    names = ["root"]
    for i in range(1000):
        if rng.random() < 0.1:
            accountant.add(f"n{i}", rng.choice(names), Fraction(rng.uniform(0.01, 100)) * (1 + Fraction(1, 2**40)))
            names.append(f"n{i}")
        amount = rng.choice([Fraction(1, rng.randrange(100_003, 400_000)), Fraction(rng.random()),
                             Fraction(rng.randrange(1, 10**30), rng.randrange(1, 10**30))])
        try:
            accountant.charge(rng.choice(names), requested_amount("epsilon", amount))
        except (BudgetExceeded, ValueError):
            pass
    values = [accountant.spent(), accountant.total.value - accountant.spent(), *accountant.per_source().values()]
    for value in values:
        shown = str(accountant.as_budget(value).value)
        assert digits(Fraction(shown)) < DIGIT_LIMIT and len(shown) < 2 * DIGIT_LIMIT


def test_every_reply_stays_printable_and_parses_back_after_a_thousand_odd_requests():
    rng = random.Random(5)
    k, x = kernel(ZCDP(10**6))
    for i in range(1000):
        if i % 2:
            epsilon = f"1/{rng.randrange(10**5, 10**9)}"
            reply = k.handle_json(json.dumps({"op": "noisy_count", "source": x, "epsilon": epsilon}))
        else:
            reply = k.handle_json(json.dumps(request("sigma", rng.uniform(0.5, 50), x)))
        assert json.loads(reply)["kind"] == "answer", reply
    for op in ("budget", "lineage", "transcript"):
        reply = k.handle_json(json.dumps({"op": op}))
        parsed = ResponseAdapter.validate_json(reply)  # as a client reads it
        assert parsed.kind == op and len(reply) < 10**6
    budget = ResponseAdapter.validate_json(k.handle_json('{"op": "budget"}'))
    assert all(digits(b.value) <= len(str(ZCDP.grid)) + 8 for b in (budget.spent, budget.remaining))


def test_the_epsilon_the_mechanism_uses_is_the_epsilon_charged():
    k, x = kernel(PureDP(1))
    asked = "0.1234567890123456789012345678901234567"  # more places than the grid holds
    reply = json.loads(k.handle_json(json.dumps(request("epsilon", asked, x))))
    charged = Fraction(reply["charge"]["epsilon"])
    assert charged == requested_amount("epsilon", asked) < Fraction(asked)
    assert reply["scale"] >= 1 / float(charged)  # identity: L1 sensitivity 1, noise set from the charged epsilon
    assert json.loads(k.handle_json('{"op": "budget"}'))["spent"]["epsilon"] == str(charged)


# ---- splitting a budget, and public names -----------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.one_of(fractions.filter(lambda f: f <= 10**6), floats.filter(lambda f: f <= 1e6)),
       st.lists(st.one_of(st.floats(1e-9, 1e9), st.fractions(min_value=Fraction(1, 10**6), max_value=10**6)),
                min_size=1, max_size=40))
def test_a_split_budget_adds_up_exactly_and_each_part_is_on_the_grid(budget, weights):
    total = requested_amount("epsilon", budget)
    parts = split_amount(PureDP(total), weights)
    assert sum(parts) == total and all(AMOUNT_GRID % part.denominator == 0 and part >= 0 for part in parts)
    whole = sum(Fraction(w) for w in weights)
    assert all(abs(part - total * Fraction(w) / whole) < Fraction(1, AMOUNT_GRID) for part, w in zip(parts, weights))
    assert all(requested_amount("epsilon", part) == part for part in parts if part > 0)


def test_operators_use_only_public_kernel_names():
    tree = ast.parse(Path(privacy.__file__).read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.level == 2 and (node.module or "").startswith("kernel") for alias in node.names]  # ..kernel
    assert imported and not [name for name in imported if name.startswith("_")]
    assert math.lcm(*range(1, 65)) * 2**120 * 10**EXPONENT_LIMIT == AMOUNT_GRID


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-9), (0.1, 1e-6), (8.0, 1e-5), (0.01, 1e-12), (1e5, 1e-9),
                                            (1e-6, 1e-9)])
def test_the_zcdp_budget_for_an_epsilon_delta_is_the_largest_that_converts_back_within_it(epsilon, delta):
    from ektelo_ng.operators.privacy import zcdp_for_approx_dp, zcdp_to_approx_dp

    rho = zcdp_for_approx_dp(epsilon, delta).rho
    assert zcdp_to_approx_dp(rho, delta) <= epsilon
    assert zcdp_to_approx_dp(float(rho) * (1 + 1e-9), delta) > epsilon * (1 - 1e-9)  # not much more would fit



def test_a_tiny_rho_converts_at_once():
    """The root was found to an absolute 1e-14 and then nudged up one ulp at a time: for rho = 1e-20 (epsilon
    about 3e-10) that was some 1e11 steps."""
    from ektelo_ng.operators.privacy import zcdp_delta, zcdp_to_approx_dp, zcdp_to_approx_dp_classic

    eps = zcdp_to_approx_dp(1e-20, 1e-12)
    assert 0 < eps <= zcdp_to_approx_dp_classic(1e-20, 1e-12) and zcdp_delta(1e-20, eps) <= 1e-12
    assert zcdp_delta(1e-20, eps * (1 - 1e-9)) > 1e-12  # and it is the tight epsilon, not a loose one
