"""The accountant against an independent model of ektelo's composition rules (tests/budget_model.py).

Random lineages and charges must match the model exactly, never exceed the total, and leave
everything unchanged when refused.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ektelo_ng.kernel.accountant import Accountant, BudgetExceeded
from ektelo_ng.kernel.privacy import PureDP, ZCDP
from tests.budget_model import BudgetModel

stabilities = st.sampled_from([Fraction(1), Fraction(2), Fraction(1, 2), Fraction(3), Fraction(10**9)])
costs = st.sampled_from([Fraction(1, 10), Fraction(1, 4), Fraction(1, 3), Fraction(1), Fraction(0)])


class BudgetMachine(RuleBasedStateMachine):
    @initialize(kind=st.sampled_from([PureDP, ZCDP]), total=st.sampled_from([Fraction(1), Fraction(5, 2)]))
    def start(self, kind, total):
        self.accountant = Accountant(kind(total), "root")
        self.model = BudgetModel(quadratic=kind is ZCDP)
        self.total = total
        self.count = 0

    def _name(self):
        self.count += 1
        return f"n{self.count}"

    @rule(data=st.data(), stability=stabilities)
    def derive(self, data, stability):
        parent, name = data.draw(st.sampled_from(self.model.sources())), self._name()
        self.accountant.add(name, parent, stability)
        self.model.add(name, parent, stability)

    @rule(data=st.data(), parts=st.integers(1, 3))
    def split(self, data, parts):
        parent, node = data.draw(st.sampled_from(self.model.sources())), self._name()
        names = [self._name() for _ in range(parts)]
        self.accountant.add(node, parent, Fraction(1), is_partition=True)
        for name in names:
            self.accountant.add(name, node, Fraction(1))
        self.model.split(node, parent, names)

    @rule(data=st.data(), cost=costs)
    def measure(self, data, cost):
        node = data.draw(st.sampled_from(self.model.sources()))
        before = {n: self.accountant.spent(n) for n in self.model.sources()}
        self.model.measured[node] += cost
        if self.model.loss() > self.total:
            self.model.measured[node] -= cost
            with pytest.raises(BudgetExceeded):
                self.accountant.charge(node, cost)
            assert before == {n: self.accountant.spent(n) for n in self.model.sources()}  # nothing changed
        else:
            self.accountant.charge(node, cost)

    @invariant()
    def matches_independent_rule(self):
        if hasattr(self, "accountant"):
            assert self.accountant.spent() == self.model.loss()
            assert self.accountant.spent() <= self.total


BudgetMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=25, deadline=None)
TestBudgetMachine = BudgetMachine.TestCase


def test_stability_multiplies_and_parallel_parts_take_the_max():
    a = Accountant(PureDP(10), "root")
    a.add("scaled", "root", Fraction(3))
    a.charge("scaled", Fraction(1))
    assert a.spent() == 3
    a.add("split", "root", Fraction(1), is_partition=True)
    for part in ("p1", "p2"):
        a.add(part, "split", Fraction(1))
    a.charge("p1", Fraction(2))
    a.charge("p2", Fraction(2))  # disjoint: no extra cost
    assert a.spent() == 5
    a.charge("p2", Fraction(1))  # now the max part grows by 1
    assert a.spent() == 6


def test_zcdp_stability_scales_quadratically():
    a = Accountant(ZCDP(100), "root")
    a.add("scaled", "root", Fraction(3))
    a.charge("scaled", Fraction(1, 2))
    assert a.spent() == Fraction(9, 2)


def test_a_billionfold_transform_is_charged_a_billion_times():
    a = Accountant(PureDP(1), "root")
    a.add("big", "root", Fraction(10**9))
    with pytest.raises(BudgetExceeded, match="nothing was measured or charged"):
        a.charge("big", Fraction(1, 10))
    assert a.spent() == 0
