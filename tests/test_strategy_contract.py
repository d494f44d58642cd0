"""One strategy contract and one budget currency, checked on every Strategy subclass.

Every Strategy: ``expected_error()`` / ``rmse()`` / ``variances()`` at unit noise; ``at(budget)`` the same at a
budget, which must be the variance the kernel's measurement then delivers; ``measure(source, budget)`` a list of
Measurements spending exactly the budget; ``reconstruct(measurements)`` an Estimate answering the workload;
``simulate(data, budget, seed)``. Every budget-taking place refuses a bare number.
"""

from __future__ import annotations

import inspect
import math
from fractions import Fraction

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.budget import ApproxDP, as_budget, for_noise, share, variance_factor
from ektelo_ng.operators.estimate import Estimate
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.operators.matrix import Identity, Kronecker, Total, VStack
from ektelo_ng.operators.measurement import Measurement
from ektelo_ng.operators.privacy import zcdp_for_approx_dp
from ektelo_ng.operators.selection import classic, query_smasher, residual_planner
from ektelo_ng.operators.selection.hdmm import opt_kron, opt_marginals, opt_plus
from ektelo_ng.operators.selection.linear import LinearStrategy
from ektelo_ng.operators.selection.strategy import Strategy

SIZES = {"a": 4, "b": 3, "c": 2}
CELLS = 24


def _table(rows: int = 400, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.integers(0, size, rows) for name, size in SIZES.items()}


def _kron_workload():
    return Kronecker([Prefix(4), Identity(3), Total(2)])


STRATEGIES = {
    "LinearStrategy laplace": lambda: LinearStrategy(classic.hb((CELLS,)).matrix, Prefix(CELLS), "laplace"),
    "LinearStrategy gaussian": lambda: LinearStrategy(classic.hb((CELLS,)).matrix, Prefix(CELLS), "gaussian"),
    "KroneckerStrategy": lambda: opt_kron(_kron_workload(), "laplace", seed=0),
    "MarginalStrategy": lambda: opt_marginals(wl.AllKway(list(SIZES.values()), 2), "gaussian", seed=0),
    "UnionStrategy": lambda: opt_plus(VStack([_kron_workload(), Kronecker([Identity(4), Total(3), Identity(2)])]),
                                      "laplace", seed=0),
    "ResidualPlannerStrategy": lambda: residual_planner(list(SIZES.values()), [(0, 1), (1, 2)]),
    "QuerySmasherStrategy": lambda: query_smasher(list(SIZES.values()), [((0, 1), np.tril(np.ones((12, 12))))]),
}


def _concrete_subclasses(cls) -> set[str]:
    found = set()
    for sub in cls.__subclasses__():
        if not inspect.isabstract(sub):
            found.add(sub.__name__)
        found |= _concrete_subclasses(sub)
    return found


def test_every_strategy_subclass_is_in_the_contract():
    covered = {name.split()[0] for name in STRATEGIES}
    assert _concrete_subclasses(Strategy) <= covered


def _budgets(noise: str) -> list:
    """Every budget kind this noise can serve, each with a unit-to-budget variance factor of about 4."""
    budgets = [ek.ZCDP("1/8"), ApproxDP(1.0, 1e-6)]
    return budgets + [ek.PureDP("1/2")] if noise == "laplace" else budgets


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_strategy_keeps_the_one_contract(name):
    strategy = STRATEGIES[name]()
    assert [p for p in inspect.signature(strategy.measure).parameters][:2] == ["source", "budget"]
    required = [p for p in inspect.signature(strategy.reconstruct).parameters.values() if p.default is p.empty]
    assert [p.name for p in required] == ["measurements"]
    assert list(inspect.signature(strategy.simulate).parameters)[:3] == ["data", "budget", "seed"]

    unit = strategy.expected_error()
    assert math.isfinite(unit) and unit > 0
    assert strategy.rmse() == pytest.approx(math.sqrt(unit / strategy.num_queries), rel=1e-12)
    for budget in _budgets(strategy.noise):
        at = strategy.at(budget)
        spent = for_noise(budget, strategy.noise)
        expected = 1 / float(spent.epsilon) ** 2 if isinstance(spent, ek.PureDP) else 1 / (2 * float(spent.rho))
        assert at.factor == pytest.approx(expected, rel=1e-12)
        assert at.expected_error() == pytest.approx(unit * expected, rel=1e-12)
        assert at.rmse() == pytest.approx(strategy.rmse() * math.sqrt(expected), rel=1e-12)
        assert np.allclose(at.variances(), strategy.variances() * expected, rtol=1e-12)
    if strategy.noise == "gaussian":
        with pytest.raises(ValueError, match="cannot satisfy pure epsilon-DP"):
            strategy.at(ek.PureDP(1))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("kind", ["zcdp", "approx", "pure"])
def test_the_kernel_delivers_the_variance_at_budget_predicts(name, kind):
    """measure spends exactly the budget, and the variance the estimate reports from the kernel's applied noise is
    what ``at(budget)`` predicted before any data was read."""
    strategy = STRATEGIES[name]()
    budget = {"zcdp": ek.ZCDP("1/8"), "approx": ApproxDP(1.0, 1e-6), "pure": ek.PureDP("1/2")}[kind]
    if strategy.noise == "gaussian" and kind == "pure":
        session = ek.protect(_table(), SIZES, budget, seed=0)
        with pytest.raises(ValueError, match="cannot satisfy pure epsilon-DP"):
            strategy.measure(session.source, budget)
        assert session.budget.spent.value == 0
        return
    session = ek.protect(_table(), SIZES, budget, seed=0)
    measurements = strategy.measure(session.source, budget)
    assert measurements and all(isinstance(m, Measurement) for m in measurements)
    total = session.budget.total.value
    assert total * (1 - Fraction(1, 10**9)) <= session.budget.spent.value <= total
    estimate = strategy.reconstruct(measurements)
    assert isinstance(estimate, Estimate)
    assert len(estimate.answer()) == strategy.num_queries
    predicted, delivered = strategy.at(budget).variances(), estimate.variances()
    # the kernel rounds each noise scale up to 11 significant bits (kernel.noise.supported_scale): at most 2^-10
    ratio = delivered / predicted
    assert np.all(ratio >= 1 - 1e-6) and np.all(ratio <= (1 + 2**-10) ** 2 * (1 + 1e-9)), (ratio.min(), ratio.max())


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_bare_number_is_refused_by_every_strategy(name):
    strategy = STRATEGIES[name]()
    session = ek.protect(_table(), SIZES, ek.ZCDP(1), seed=0)
    for call in (lambda: strategy.at(1.0), lambda: strategy.measure(session.source, 1),
                 lambda: strategy.simulate(np.ones(CELLS), 0.5, seed=0)):
        with pytest.raises(ValueError, match="not a budget"):
            call()
    assert session.budget.spent.value == 0


def test_approx_dp_is_converted_once_by_the_one_rule():
    budget = ApproxDP(1.0, 1e-6)
    rho = budget.zcdp()
    assert rho == zcdp_for_approx_dp(1.0, 1e-6)
    assert float(rho.rho) == pytest.approx(0.024356, abs=1e-6)  # pcost 0.0487, everywhere
    assert variance_factor(budget, "gaussian") == pytest.approx(1 / (2 * float(rho.rho)))
    session = ek.protect(_table(), SIZES, budget)
    assert session.budget.total == rho
    assert residual_planner(list(SIZES.values()), [(0, 1)]).at(budget).factor == variance_factor(rho, "gaussian")


@pytest.mark.parametrize("value", [1, 1.0, Fraction(1, 2), "1", (1.0, 1e-6), None])
def test_a_bare_value_is_not_a_budget_and_the_error_says_what_to_write(value):
    with pytest.raises(ValueError, match=r"ek\.ApproxDP") as raised:
        as_budget(value)
    assert "PureDP" in str(raised.value) or "ApproxDP(" in str(raised.value)
    with pytest.raises(ValueError, match="not a budget|bare pair"):
        ek.protect(_table(), SIZES, value)


@pytest.mark.parametrize("value, ok", [(0.25, True), ("1/3", True), (Fraction(1, 2), True), (0, False), (1, False),
                                       (1.5, False), ("x", False), (ek.PureDP(1), False)])
def test_a_share_is_a_fraction_strictly_between_0_and_1(value, ok):
    if ok:
        assert 0 < share(value, "selection_share") < 1
    else:
        with pytest.raises(ValueError, match="selection_share is a share of the budget"):
            share(value, "selection_share")


def test_approx_dp_refuses_bad_values_by_name():
    for epsilon, delta, field in ((0, 1e-6, "epsilon"), (math.inf, 1e-6, "epsilon"), (1, 0, "delta"),
                                  (1, 1, "delta"), ("1", 1e-6, "epsilon")):
        with pytest.raises(ValueError, match=f"ApproxDP {field}"):
            ApproxDP(epsilon, delta)


def test_a_bare_number_is_refused_wherever_a_budget_is_taken(tmp_path):
    """Every entry point that takes a budget: the session, a served kernel's child, the advice, what a noise spends,
    the error at a budget, a marginal plan's rho, and the command line's grammar."""
    from ektelo_ng.grammar import parse_budget
    from ektelo_ng.operators import measure
    from ektelo_ng.session import kernel_process

    session = ek.protect(_table(), SIZES, ek.ZCDP(1), seed=0)
    calls = {
        "protect": lambda: ek.protect(_table(), SIZES, 1.0),
        "kernel_process": lambda: kernel_process(tmp_path / "t.csv", tmp_path / "d.json", 1).__enter__(),
        "advise": lambda: ek.advise([4], Prefix(4), 1.0, time_limit=5),
        "for_noise": lambda: for_noise(0.5, "laplace"),
        "variance_factor": lambda: variance_factor(Fraction(1, 2), "gaussian"),
        "table_and_rho": lambda: measure.table_and_rho(session.source, 0.5, "ResidualPlanner"),
    }
    for where, call in calls.items():
        with pytest.raises(ValueError, match="not a budget") as raised:
            call()
        assert "ek.PureDP(epsilon)" in str(raised.value), where
    with pytest.raises(ValueError, match="cannot read the budget '1'"):
        parse_budget("1")
    assert session.budget.spent.value == 0
