"""The accountant against an independent computation of ektelo's composition rules.

Independent rule: the privacy loss at a node is what was measured there, plus each ordinary
child's loss scaled by its stability (c for pure DP, c^2 for zCDP), plus for each partition
the max of its parts' losses. Random lineages and charges must match it exactly, never
exceed the total, and leave everything unchanged when refused.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kernel.accountant import Accountant, BudgetExceeded
from kernel.privacy import PureDP, ZCDP

stabilities = st.sampled_from([Fraction(1), Fraction(2), Fraction(1, 2), Fraction(3), Fraction(10**9)])
costs = st.sampled_from([Fraction(1, 10), Fraction(1, 4), Fraction(1, 3), Fraction(1), Fraction(0)])


class BudgetMachine(RuleBasedStateMachine):
    @initialize(kind=st.sampled_from([PureDP, ZCDP]), total=st.sampled_from([Fraction(1), Fraction(5, 2)]))
    def start(self, kind, total):
        self.kind = kind
        self.accountant = Accountant(kind(total), "root")
        self.total = total
        # independent model: children per node, measured cost per node
        self.children: dict[str, list[tuple[str, Fraction]]] = {"root": []}
        self.partitions: dict[str, list[str]] = {}
        self.measured: dict[str, Fraction] = {"root": Fraction(0)}
        self.count = 0

    def _new(self, parent, stability, is_partition=False):
        self.count += 1
        name = f"n{self.count}"
        self.accountant.add(name, parent, stability, is_partition)
        self.children[parent].append((name, stability))
        self.children[name] = []
        self.measured[name] = Fraction(0)
        return name

    def _sources(self):
        return sorted(n for n in self.children if n not in self.partitions)

    @rule(data=st.data(), stability=stabilities)
    def derive(self, data, stability):
        parent = data.draw(st.sampled_from(self._sources()))
        self._new(parent, stability)

    @rule(data=st.data(), parts=st.integers(1, 3))
    def split(self, data, parts):
        parent = data.draw(st.sampled_from(self._sources()))
        node = self._new(parent, Fraction(1), is_partition=True)
        self.partitions[node] = [self._new(node, Fraction(1)) for _ in range(parts)]

    def loss(self, node) -> Fraction:
        scale = (lambda c: c) if self.kind is PureDP else (lambda c: c * c)
        total = self.measured[node]
        for child, stability in self.children[node]:
            if child in self.partitions:
                parts = [self.loss(part) for part in self.partitions[child]]
                total += scale(stability) * max(parts)
            else:
                total += scale(stability) * self.loss(child)
        return total

    @rule(data=st.data(), cost=costs)
    def measure(self, data, cost):
        node = data.draw(st.sampled_from(self._sources()))
        before = {n: self.accountant.spent(n) for n in self._sources()}
        self.measured[node] += cost
        expected = self.loss("root")
        if expected > self.total:
            self.measured[node] -= cost
            with pytest.raises(BudgetExceeded):
                self.accountant.charge(node, cost)
            assert before == {n: self.accountant.spent(n) for n in self._sources()}  # nothing changed
        else:
            self.accountant.charge(node, cost)

    @invariant()
    def matches_independent_rule(self):
        if hasattr(self, "accountant"):
            assert self.accountant.spent() == self.loss("root")
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
