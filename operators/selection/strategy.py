"""The Strategy interface shared by every strategy selector.

A selector (HDMM, ResidualPlanner, QuerySmasher, or a classic one) decides *what* to
measure without looking at data. Its result says how good the choice is at unit noise
(Laplace with epsilon = 1; Gaussian with pcost 1, i.e. sigma = 1 per unit L2 sensitivity)
and how to turn noisy measurements back into answers.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Literal

Noise = Literal["laplace", "gaussian"]


class Strategy(ABC):
    """What a selector returns: the expected error of its plan and how to reconstruct."""

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
