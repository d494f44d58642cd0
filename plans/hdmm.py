"""HDMM end to end: select a strategy for the workload (no data), measure it once, reconstruct.

A pure-DP budget measures with Laplace noise, a zCDP budget with Gaussian noise; the
reconstruction uses the strategy's structure (Kronecker or marginal pseudo-inverses, LSMR for
unions).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from operators.client import Handle
from kernel.matrix import Matrix
from kernel.privacy import ZCDP
from operators.selection.hdmm import hdmm as select_hdmm
from plans.common import BudgetLike, data_vector, epsilon_of


def hdmm(source: Handle, workload: Matrix, budget: BudgetLike | ZCDP, shape: Sequence[int] | None = None,
         restarts: int = 3, seed: int = 0) -> np.ndarray:
    """HDMM (ektelo plan 13): optimized strategy, one measurement, least-squares reconstruction."""
    vector, _ = data_vector(source, shape)
    if workload.shape[1] != vector.size:
        raise ValueError(f"the workload has {workload.shape[1]} columns but the data vector has {vector.size} cells")
    if isinstance(budget, ZCDP):
        strategy = select_hdmm(workload, noise="gaussian", restarts=restarts, seed=seed)
        answer = vector.gaussian(strategy.matrix, rho=budget.rho)
    else:
        strategy = select_hdmm(workload, noise="laplace", restarts=restarts, seed=seed)
        answer = vector.laplace(strategy.matrix, epsilon_of(budget))
    return strategy.reconstruct(answer.values)
