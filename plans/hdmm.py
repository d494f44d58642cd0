"""HDMM end to end: select a strategy for the workload (no data), measure it once, reconstruct.

A pure-DP budget measures with Laplace noise, a zCDP budget with Gaussian noise; the
reconstruction uses the strategy's structure (Kronecker or marginal pseudo-inverses, LSMR for
unions). Selection reads only the workload, so it is remembered (``operators.selection.memo``):
running the plan again on the same workload measures at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from operators.client import Handle
from kernel.matrix import Matrix
from kernel.privacy import ZCDP
from operators.selection import memo
from operators.selection.hdmm import hdmm as select_hdmm
from plans.common import BudgetLike, data_vector, epsilon_of


def hdmm(source: Handle, workload: Matrix, budget: BudgetLike | ZCDP, shape: Sequence[int] | None = None,
         restarts: int = 3, seed: int = 0) -> np.ndarray:
    """HDMM (ektelo plan 13): optimized strategy, one measurement, least-squares reconstruction."""
    vector, _ = data_vector(source, shape)
    if workload.shape[1] != vector.size:
        raise ValueError(f"the workload has {workload.shape[1]} columns but the data vector has {vector.size} cells")
    noise = "gaussian" if isinstance(budget, ZCDP) else "laplace"
    strategy = memo.remember(
        "hdmm", workload, (noise, restarts, seed),
        lambda: select_hdmm(workload, noise=noise, restarts=restarts, seed=seed),
    )
    if isinstance(budget, ZCDP):
        answer = vector.gaussian(strategy.matrix, rho=budget.rho)
    else:
        answer = vector.laplace(strategy.matrix, epsilon_of(budget))
    return strategy.reconstruct(answer.values)
