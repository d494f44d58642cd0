"""What the HDMM optimizers return: LinearStrategies with their exact error and a structured reconstruction.

Each class computes the error with the structure it has (never a dense N x N matrix):
a Kronecker strategy factorizes per attribute and per workload product (J Thm 6), a marginal
strategy uses the eigen form of marginal Grams, and a union of Kronecker products (OPT_+)
carries the error of answering each product from its own block (J Def. 19), an upper bound
on the error of the global least squares that ``reconstruct`` computes (Gauss-Markov: the
best linear unbiased estimate uses all the measurements).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np

from ...matrix import Kronecker, Matrix, VStack
from ...matrices import MarginalStack
from ...algebra import pinv
from . import marginals as marg
from .blocks import AttributeBlocks
from .gram import Term
from ...error import noise_constant
from ...inference import least_squares
from ...measurement import Measurement
from ..linear import LinearStrategy
from ..strategy import Noise

class HDMMStrategy(LinearStrategy):
    """A selected strategy for a workload: ``matrix`` is sensitivity-normalized (||A||_K = 1).

    ``expected_error()`` is the optimizer's (computed with the strategy's structure); ``reconstruct``
    solves one measurement of ``matrix`` with that structure too, and anything else by least squares.
    """

    def __init__(self, workload: Matrix, matrix: Matrix, noise: Noise, error: float, optimizer: str):
        noise_constant(noise)
        super().__init__(matrix, workload, noise, name=f"HDMM {optimizer}")
        self.optimizer = optimizer
        self._error = float(error)

    def expected_error(self, W: Matrix | None = None) -> float:
        return self._error if W is None else super().expected_error(W)

    def _solve(self, measurements: list[Measurement]) -> np.ndarray:
        if len(measurements) == 1 and measurements[0].matrix is self.matrix:
            return self._structured_solve(measurements[0].answers)
        return super()._solve(measurements)

    @abstractmethod
    def _structured_solve(self, y: np.ndarray) -> np.ndarray:
        """Least-squares estimate x_hat of the data vector from noisy answers y = matrix @ x + noise."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.optimizer}, {self.noise}, rmse={self.rmse():.4g})"


class KroneckerStrategy(HDMMStrategy):
    """A_1 kron ... kron A_d (one factor: an explicit strategy); reconstructs with kron of A_i^+."""

    def __init__(self, workload: Matrix, terms: Sequence[Term], factors: Sequence[Matrix], noise: Noise,
                 optimizer: str = "opt_kron"):
        self.factors = list(factors)
        if [f.shape[1] for f in self.factors] != [f.shape[1] for f in terms[0][1]]:
            raise ValueError("strategy factors must match the workload's attribute sizes")
        blocks = AttributeBlocks(terms)
        errors = [blocks.errors(i, A, noise) for i, A in enumerate(self.factors)]
        weights2 = np.array([w * w for w, _ in terms])
        error = noise_constant(noise)[0] * float(weights2 @ np.prod(np.column_stack(errors), axis=1))
        matrix = self.factors[0] if len(self.factors) == 1 else Kronecker(self.factors)
        super().__init__(workload, matrix, noise, error, optimizer)

    def _structured_solve(self, y: np.ndarray) -> np.ndarray:
        return pinv(self.matrix) @ y


class MarginalStrategy(HDMMStrategy):
    """M(theta): the marginal on subset a with weight theta(a); reconstructs with G(theta^2)^+ M^T."""

    def __init__(self, workload: Matrix, lattice: marg.Lattice, theta: np.ndarray, noise: Noise, error: float):
        theta = np.asarray(theta, dtype=np.float64)
        theta = theta / (theta.sum() if noise == "laplace" else np.sqrt(np.sum(theta**2)))
        self.lattice, self.theta = lattice, theta
        weights = {lattice.subsets(a): float(theta[a]) for a in zip(*np.nonzero(theta))}
        super().__init__(workload, MarginalStack(lattice.sizes, weights), noise, error, "opt_marginals")

    def _structured_solve(self, y: np.ndarray) -> np.ndarray:
        v = self.matrix.T @ y
        kappa = self.lattice.Y(self.theta**2)
        inverse = np.zeros_like(kappa)
        np.divide(1.0, kappa, out=inverse, where=kappa > kappa.max() * 1e-14)
        return marg.apply_eigen(inverse, v.reshape(self.lattice.sizes)).ravel()


class UnionStrategy(HDMMStrategy):
    """c_1 A_1 ; ... ; c_k A_k stacked (OPT_+): least squares on implicit products.

    ``expected_error`` is the error of answering each workload group from its own block (the
    quantity OPT_+ minimizes); ``reconstruct``'s global least squares is never worse.
    """

    def __init__(self, workload: Matrix, blocks: Sequence[tuple[float, Matrix]], noise: Noise, error: float):
        self.blocks = list(blocks)
        super().__init__(workload, VStack([A * c for c, A in self.blocks]), noise, error, "opt_plus")

    def _structured_solve(self, y: np.ndarray) -> np.ndarray:
        """``inference.least_squares``: by the rows' Gram when there are few of them over many cells, else LSMR
        to its tolerance within its cap (at most 20 max(m, n) iterations at 1e-12 took minutes on 10^5 cells)."""
        return least_squares([Measurement(self.matrix, y, 1.0, self.noise)], size=self.matrix.shape[1])
