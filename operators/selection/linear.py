"""LinearStrategy: one strategy matrix, measured once with the whole budget and answered by least squares.

Every classic selector returns one (identity, total, prefix, h2, hb, privelet, greedy_h, quadtree,
uniform_grid, stripe), and HDMM's strategies are ones with a structured solver. The expected
error and the variances are exact at unit noise (operators.error, operators.covariance):

    Laplace:  answer variance = 2 ||A||_1^2 w^T (A^T A)^+ w     Gaussian:  ||A||_2^2 w^T (A^T A)^+ w

and divide by epsilon^2 (Laplace) or by pcost = 2 rho (Gaussian) at a budget.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..matrix import Matrix
from ...kernel.privacy import PureDP, ZCDP
from .. import measure
from ..covariance import LeastSquaresCovariance
from ..error import expected_error, noise_constant
from ..estimate import VectorEstimate
from ..inference import least_squares
from ..measurement import Measurement
from .strategy import Noise, Strategy

Budget = PureDP | ZCDP | float | int | Fraction | str


def as_budget(budget: Budget) -> PureDP | ZCDP:
    """A PureDP or ZCDP as given, or a bare number read as a pure-DP epsilon."""
    return budget if isinstance(budget, (PureDP, ZCDP)) else PureDP(budget)


def noise_of(budget: Budget) -> Noise:
    """The noise a budget measures with: Laplace for pure DP, Gaussian for zCDP."""
    return "gaussian" if isinstance(as_budget(budget), ZCDP) else "laplace"


def unit_scale(budget: Budget | None) -> float:
    """The factor from unit-noise variances to a budget's: 1 / epsilon^2, or 1 / pcost = 1 / (2 rho)."""
    if budget is None:
        return 1.0
    budget = as_budget(budget)
    return 1.0 / float(budget.epsilon) ** 2 if isinstance(budget, PureDP) else 1.0 / (2 * float(budget.rho))


class LinearStrategy(Strategy):
    """Measure ``matrix`` once; ``workload`` (optional) is what its error is reported for."""

    def __init__(self, matrix: Matrix, workload: Matrix | None = None, noise: Noise = "laplace", name: str = ""):
        if noise not in ("laplace", "gaussian"):
            raise ValueError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
        if workload is not None and workload.shape[1] != matrix.shape[1]:
            raise ValueError(f"the strategy has {matrix.shape[1]} columns but the workload {workload.shape[1]}")
        self.matrix, self.workload, self.noise, self.name = matrix, workload, noise, name or "linear"

    @property
    def shape(self) -> tuple[int, int]:
        return self.matrix.shape

    @property
    def num_queries(self) -> int:
        return self._workload(None).shape[0]

    def _workload(self, W: Matrix | None) -> Matrix:
        if W is None:
            if self.workload is None:
                raise ValueError(f"the {self.name} strategy was chosen without a workload: pass one")
            return self.workload
        if W.shape[1] != self.matrix.shape[1]:
            raise ValueError(f"the workload has {W.shape[1]} columns but the strategy {self.matrix.shape[1]}")
        return W

    def expected_error(self, W: Matrix | None = None) -> float:
        return expected_error(self._workload(W), self.matrix, self.noise)

    def rmse(self, W: Matrix | None = None) -> float:
        W = self._workload(W)
        return float(np.sqrt(self.expected_error(W) / W.shape[0]))

    def variances(self, W: Matrix | None = None, budget: Budget | None = None) -> np.ndarray:
        """Each answer's variance, at unit noise (of this strategy's noise) or at ``budget`` (with the noise
        that budget measures with: Laplace for pure DP, Gaussian for zCDP)."""
        noise = self.noise if budget is None else noise_of(budget)
        constant, norm = noise_constant(noise)
        unit = Measurement(self.matrix, np.zeros(self.matrix.shape[0]), 1.0, noise)
        diagonal = LeastSquaresCovariance([unit], self.matrix.shape[1]).variances(self._workload(W))
        return constant * self.matrix.sensitivity(norm) ** 2 * unit_scale(budget) * diagonal

    def measure(self, source, budget: Budget, *, shape=None) -> list[Measurement]:
        """One kernel request on ``source`` (a table handle, vectorized, or a vector handle)."""
        vector, _ = measure.data_vector(source, shape)
        budget = as_budget(budget)
        if isinstance(budget, ZCDP):
            return [measure.gaussian(vector, self.matrix, rho=budget.rho)]
        return [measure.laplace(vector, self.matrix, budget.epsilon)]

    def reconstruct(self, measurements, workload: Matrix | None = None, note: str = "") -> VectorEstimate:
        measurements = list(measurements)
        return VectorEstimate(self._solve(measurements), measurements,
                              workload=workload if workload is not None else self.workload, note=note)

    def _solve(self, measurements: list[Measurement]) -> np.ndarray:
        return least_squares(measurements, size=self.matrix.shape[1])

    def simulate(self, data, budget: Budget, seed=None) -> VectorEstimate:
        """Numpy noise at the kernel's scale for ``budget`` on ``data`` (a vector you hold), reconstructed."""
        x = np.asarray(data, dtype=np.float64).ravel()
        budget, rng = as_budget(budget), np.random.default_rng(seed)
        exact = self.matrix @ x
        if isinstance(budget, ZCDP):
            sd = self.matrix.sensitivity("l2") / np.sqrt(2 * float(budget.rho))
            noisy, kind = exact + rng.normal(0.0, sd, exact.size), "gaussian"
        else:
            b = self.matrix.sensitivity("l1") / float(budget.epsilon)
            noisy, kind, sd = exact + rng.laplace(0.0, b, exact.size), "laplace", np.sqrt(2) * b
        return self.reconstruct([Measurement(self.matrix, noisy, sd, kind)], note="simulated (numpy noise)")

    def __repr__(self) -> str:
        return f"LinearStrategy({self.name}, {self.matrix.shape[0]} x {self.matrix.shape[1]})"

