"""HDMM end to end: select a strategy for the workload (no data), measure it once, reconstruct.

A pure-DP budget measures with Laplace noise, a zCDP or (epsilon, delta) one with Gaussian noise; the
reconstruction uses the strategy's structure (Kronecker or marginal pseudo-inverses, LSMR for
unions). Selection reads only the workload, so it is remembered (``operators.selection.memo``):
running the plan again on the same workload measures at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..operators import measure
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.matrix import Matrix
from ..operators.selection import memo
from ..operators.selection.hdmm import hdmm as select_hdmm
from ..operators.budget import Budget, noise_of


def hdmm(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
         restarts: int = 3, seed: int = 0) -> VectorEstimate:
    """HDMM (ektelo plan 13): optimized strategy, one measurement, least-squares reconstruction."""
    vector, _ = measure.data_vector(source, shape)
    if workload.shape[1] != vector.size:
        raise ValueError(f"the workload has {workload.shape[1]} columns but the data vector has {vector.size} cells")
    noise = noise_of(budget)
    strategy = memo.remember(
        "hdmm", workload, (noise, restarts, seed),
        lambda: select_hdmm(workload, noise=noise, restarts=restarts, seed=seed),
    )
    return strategy.reconstruct(strategy.measure(vector, budget))
