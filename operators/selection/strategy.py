"""The Strategy contract every strategy selector returns, classic ones included.

A selector (HDMM, ResidualPlanner, QuerySmasher, or a classic one) decides *what* to measure
without looking at data or budget. Its Strategy says how good that choice is at unit noise (Laplace
with epsilon = 1; Gaussian with sigma = 1 per unit L2 sensitivity, i.e. pcost 1 or rho = 1/2),
measures it through the kernel, and turns the measurements into an Estimate with error bars:

- ``expected_error()`` / ``rmse()`` / ``variances(W)``: total squared error, root-mean squared error and
  each answer's variance over the workload, always at unit noise;
- ``at(budget)``: the same three at a budget (``operators.budget``: the strategy's noise spends what
  it can serve of it);
- ``measure(source, budget) -> list[Measurement]``: the kernel requests, spending exactly ``budget``;
- ``reconstruct(measurements) -> Estimate`` (``Estimate.answer(W)`` answers any workload);
- ``simulate(data, budget, seed)``: the same with numpy noise on a data vector you hold (for
  studying error, never for release: nothing goes through the kernel).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..budget import Budget, as_budget, variance_factor
from ..measurement import NoiseKind

Noise = NoiseKind


class Strategy(ABC):
    """What a selector returns: its expected error at unit noise, and how to measure and reconstruct."""

    noise: Noise

    @property
    @abstractmethod
    def num_queries(self) -> int:
        """Number of workload queries the error is averaged over."""

    @abstractmethod
    def expected_error(self) -> float:
        """Total squared error over the workload at unit noise (eps = 1, or sigma = 1 per unit L2 sensitivity)."""

    def rmse(self) -> float:
        """Root mean squared error per workload query at unit noise."""
        return math.sqrt(self.expected_error() / self.num_queries)

    @abstractmethod
    def variances(self, W=None) -> np.ndarray:
        """Each answer's variance at unit noise (default: the workload's answers)."""

    def at(self, budget: Budget) -> AtBudget:
        """This strategy's errors when measured with ``budget``."""
        budget = as_budget(budget)
        return AtBudget(self, budget, variance_factor(budget, self.noise))

    @abstractmethod
    def measure(self, source, budget: Budget) -> list:
        """Measure the strategy through the kernel with exactly ``budget``: a list of Measurements."""

    @abstractmethod
    def reconstruct(self, measurements):
        """An Estimate (answers with error bars) from this strategy's measurements."""

    @abstractmethod
    def simulate(self, data, budget: Budget, seed=None):
        """``reconstruct`` of a simulated measurement: numpy noise on data you hold, never the kernel."""


@dataclass(frozen=True)
class AtBudget:
    """A strategy's errors at a budget: its unit-noise figures times ``factor`` (1 / eps^2, or 1 / (2 rho))."""

    strategy: Strategy
    budget: Budget
    factor: float

    def expected_error(self) -> float:
        return self.strategy.expected_error() * self.factor

    def rmse(self) -> float:
        return self.strategy.rmse() * math.sqrt(self.factor)

    def variances(self, W: Any = None) -> np.ndarray:
        return self.strategy.variances(W) * self.factor

    def max_variance(self) -> float:
        """The largest variance of a workload answer."""
        return float(np.max(self.variances()))
