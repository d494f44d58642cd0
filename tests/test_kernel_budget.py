"""The budget through the protocol: random transforms, splits and measurements on a real kernel session.

Spent budget must equal the independent model of ektelo's rules (tests/budget_model.py) after
every step, never exceed the total, and stay unchanged when a request is refused.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import ektelo_ng as ek
from ektelo_ng.operators.matrix import Identity
from tests.budget_model import BudgetModel


class KernelBudgetMachine(RuleBasedStateMachine):
    @initialize(total=st.sampled_from([Fraction(1), Fraction(3)]))
    def start(self, total):
        data = {"v": np.arange(12) % 12}
        self.session = ek.protect(data, ek.Domain.from_dict({"v": 12}), ek.PureDP(total), seed=0)
        self.total = total
        root = self.session.source.vectorize()
        self.model = BudgetModel(quadratic=False)
        self.handles = {"root": root}  # the vectorized table: stability 1 from the table does not change costs
        self.count = 0

    def _name(self):
        self.count += 1
        return f"n{self.count}"

    def _vector(self, data):
        name = data.draw(st.sampled_from(sorted(self.handles)))
        return name, self.handles[name]

    @rule(data=st.data(), factor=st.sampled_from([1, 2, 3]))
    def transform(self, data, factor):
        parent, handle = self._vector(data)
        name = self._name()
        self.handles[name] = handle.transform(Identity(handle.size) * float(factor))
        self.model.add(name, parent, Fraction(factor))

    @rule(data=st.data(), groups=st.integers(1, 3))
    def split(self, data, groups):
        parent, handle = self._vector(data)
        if handle.size < groups:
            return
        labels = np.arange(handle.size) % groups
        node, names = self._name(), [self._name() for _ in range(groups)]
        for name, part in zip(names, handle.split_by_partition(labels)):
            self.handles[name] = part
        self.model.split(node, parent, names)

    @rule(data=st.data(), epsilon=st.sampled_from([Fraction(1, 10), Fraction(1, 4), Fraction(1, 3)]))
    def measure(self, data, epsilon):
        name, handle = self._vector(data)
        before = self.session.budget.spent
        self.model.measured[name] += epsilon
        if self.model.loss() > self.total:
            self.model.measured[name] -= epsilon
            try:
                handle.laplace(Identity(handle.size), epsilon)
            except ek.BudgetExceededError:
                assert self.session.budget.spent == before
            else:
                raise AssertionError("an overspending request was answered")
        else:
            handle.laplace(Identity(handle.size), epsilon)

    @invariant()
    def spend_matches_the_rules(self):
        if hasattr(self, "session"):
            spent = self.session.budget.spent.epsilon
            assert spent == self.model.loss() and spent <= self.total


KernelBudgetMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=15, deadline=None)
TestKernelBudget = KernelBudgetMachine.TestCase
