"""The Strategy interface every strategy selector returns, classic ones included.

A selector (HDMM, ResidualPlanner, QuerySmasher, or a classic one) decides *what* to measure
without looking at data. Its Strategy says how good that choice is at unit noise (Laplace with
epsilon = 1; Gaussian with pcost 1, i.e. sigma = 1 per unit L2 sensitivity), measures it
through the kernel, and turns the measurements into an Estimate with error bars:

- ``expected_error()`` / ``rmse()``: total / root-mean squared error over the workload;
- ``variances(W)``: each workload answer's variance;
- ``measure(source, budget) -> list[Measurement]``: the kernel requests, spending exactly ``budget``;
- ``reconstruct(measurements) -> Estimate``;
- ``simulate(x, budget, seed)``: the same with numpy noise on a data vector you hold (for
  studying error, never for release: nothing goes through the kernel).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

from ..measurement import NoiseKind

Noise = NoiseKind


class Strategy(ABC):
    """What a selector returns: its expected error, and how to measure and reconstruct."""

    noise: Noise

    @property
    @abstractmethod
    def num_queries(self) -> int:
        """Number of workload queries the error is averaged over."""

    @abstractmethod
    def expected_error(self) -> float:
        """Total squared error over the workload at unit noise (eps = 1, or pcost = 1)."""

    def rmse(self) -> float:
        """Root mean squared error per workload query at unit noise."""
        return math.sqrt(self.expected_error() / self.num_queries)

    @abstractmethod
    def variances(self, W=None):
        """Each answer's variance at unit noise (default: the workload's answers)."""

    @abstractmethod
    def measure(self, source, budget) -> list:
        """Measure the strategy through the kernel with exactly ``budget``: a list of Measurements."""

    @abstractmethod
    def reconstruct(self, measurements):
        """An Estimate (answers with error bars) from this strategy's measurements."""

    @abstractmethod
    def simulate(self, data, budget, seed=None):
        """``reconstruct`` of a simulated measurement: numpy noise on data you hold, never the kernel."""
