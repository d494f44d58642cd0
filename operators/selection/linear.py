"""LinearStrategy: one strategy matrix, measured once with the whole budget and answered by least squares.

Every classic selector returns one (identity, total, prefix, h2, hb, privelet, greedy_h, quadtree,
uniform_grid, stripe), and HDMM's strategies are ones with a structured solver. The expected
error and the variances are exact at unit noise (operators.error, operators.covariance):

    Laplace:  answer variance = 2 ||A||_1^2 w^T (A^T A)^+ w     Gaussian:  ||A||_2^2 w^T (A^T A)^+ w

and divide by epsilon^2 (Laplace) or by pcost = 2 rho (Gaussian) at a budget (``at``). The strategy's noise is
what it measures with; a plan that may use either picks it from the budget (``operators.budget.noise_of``).
"""

from __future__ import annotations

import numpy as np

from ..matrix import Matrix
from ...kernel.privacy import ZCDP
from .. import measure
from ..budget import Budget, for_noise
from ..covariance import LeastSquaresCovariance
from ..error import expected_error, noise_constant
from ..estimate import VectorEstimate
from ..inference import least_squares
from ..measurement import Measurement
from .strategy import Noise, Strategy

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

    def with_noise(self, noise: Noise) -> LinearStrategy:
        """The same matrix measured with ``noise`` (a plain LinearStrategy: its errors by the generic formulas)."""
        return self if noise == self.noise else LinearStrategy(self.matrix, self.workload, noise, self.name)

    def expected_error(self, W: Matrix | None = None) -> float:
        """Total squared error at unit noise over the strategy's workload, or over ``W``."""
        return expected_error(self._workload(W), self.matrix, self.noise)

    def rmse(self, W: Matrix | None = None) -> float:
        """Root mean squared error at unit noise over the strategy's workload (by ``expected_error()``, which a
        selector may know in closed form), or over ``W``."""
        return float(np.sqrt(self.expected_error(W) / self._workload(W).shape[0]))

    def variances(self, W: Matrix | None = None) -> np.ndarray:
        """Each answer's variance at unit noise."""
        constant, norm = noise_constant(self.noise)
        unit = Measurement(self.matrix, np.zeros(self.matrix.shape[0]), 1.0, self.noise)
        diagonal = LeastSquaresCovariance([unit], self.matrix.shape[1]).variances(self._workload(W))
        return constant * self.matrix.sensitivity(norm) ** 2 * diagonal

    def measure(self, source, budget: Budget, *, shape=None) -> list[Measurement]:
        """One kernel request on ``source`` (a table handle, vectorized, or a vector handle) with this strategy's
        noise, spending what it serves of ``budget`` (``operators.budget.for_noise``)."""
        vector, _ = measure.data_vector(source, shape)
        spent = for_noise(budget, self.noise)
        if isinstance(spent, ZCDP):
            return [measure.gaussian(vector, self.matrix, rho=spent.rho)]
        return [measure.laplace(vector, self.matrix, spent.epsilon)]

    def reconstruct(self, measurements) -> VectorEstimate:
        """The least-squares estimate of the data vector, answering the strategy's workload by default."""
        return self._estimate(list(measurements), "")

    def _estimate(self, measurements: list[Measurement], note: str) -> VectorEstimate:
        return VectorEstimate(self._solve(measurements), measurements, workload=self.workload, note=note)

    def _solve(self, measurements: list[Measurement]) -> np.ndarray:
        return least_squares(measurements, size=self.matrix.shape[1])

    def simulate(self, data, budget: Budget, seed=None) -> VectorEstimate:
        """Numpy noise at the kernel's scale for ``budget`` on ``data`` (a vector you hold), reconstructed."""
        x = np.asarray(data, dtype=np.float64).ravel()
        spent, rng = for_noise(budget, self.noise), np.random.default_rng(seed)
        exact = self.matrix @ x
        if isinstance(spent, ZCDP):
            sd = self.matrix.sensitivity("l2") / np.sqrt(2 * float(spent.rho))
            noisy = exact + rng.normal(0.0, sd, exact.size)
        else:
            b = self.matrix.sensitivity("l1") / float(spent.epsilon)
            noisy, sd = exact + rng.laplace(0.0, b, exact.size), np.sqrt(2) * b
        return self._estimate([Measurement(self.matrix, noisy, sd, self.noise)], "simulated (numpy noise)")

    def __repr__(self) -> str:
        return f"LinearStrategy({self.name}, {self.matrix.shape[0]} x {self.matrix.shape[1]})"

