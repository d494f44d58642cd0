"""ResidualPlanner end to end: select noise scales (no data), measure every residual through the kernel,
reconstruct any marginal of the workload's closure.

For each residual set A the plan vectorizes only the marginal on A (a projection, never the full
vector) and measures the whitened residual basis B_A = (H H^T)^(-1/2) H, H = kron_{i in A} Sub_{n_i},
with i.i.d. Gaussian noise: the kernel's ordinary Gaussian request, no special path. Un-whitening
client-side, omega_A = (H H^T)^(1/2) y, gives exactly the paper's base mechanism
H v + N(0, s_A H H^T). Since Sub Sub^T = I + J, both square roots have closed forms
(I + J)^(+-1/2) = I + c J. rho is split into exact fractions proportional to p_A / s_A, so the
kernel's charges add up to the budget exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

import numpy as np

from operators.client import Handle
from kernel.matrix import Dense, Kronecker, Marginals, Matrix, Total
from kernel.privacy import ZCDP
from operators.residual import sub_matrix
from operators.selection.residual_planner import ResidualReconstruction, residual_planner as select


def _ones_plus(m: int, power: float) -> np.ndarray:
    """(I + J)^power for power = +-1/2 on m x m: I + c J with (1 + c m) = (1 + m)^power."""
    return np.eye(m) + ((1 + m) ** power - 1) / m * np.ones((m, m))


def whitened_residual(sizes: Iterable[int]) -> Matrix:
    """B_A = kron_i (Sub Sub^T)^(-1/2) Sub: orthonormal rows spanning the residual space of A."""
    return Kronecker([Dense(_ones_plus(n - 1, -0.5) @ sub_matrix(n)) for n in sizes])


def unwhiten(sizes: Iterable[int], y: np.ndarray) -> np.ndarray:
    """(H H^T)^(1/2) y = kron_i (I + J)^(1/2) y."""
    return Kronecker([Dense(_ones_plus(n - 1, 0.5)) for n in sizes]) @ y


def residual_planner(source: Handle, workload: Marginals | Iterable, budget: ZCDP, loss: str = "sum",
                     weights=None) -> ResidualReconstruction:
    """Answer a marginal workload (a Marginals matrix or attribute subsets) under ``budget`` (zCDP).

    Returns the reconstruction: ``.marginal(A)`` for any A in the closure of the workload.
    """
    if source.kind != "table":
        raise ValueError("ResidualPlanner measures projections of a table: give the table handle")
    if not isinstance(budget, ZCDP):
        raise ValueError("ResidualPlanner adds Gaussian noise: give a ZCDP budget")
    domain = source.domain
    subsets = list(workload.subsets) if isinstance(workload, Marginals) else [tuple(s) for s in workload]
    strategy = select(domain, subsets, loss=loss, weights=weights, budget=budget)
    scales = strategy.noise_scales()
    shares = {A: Fraction(math.prod((domain.sizes[i] - 1) / domain.sizes[i] for i in A) / s) for A, s in scales.items()}
    total = sum(shares.values())
    measurements = {}
    for A, share in shares.items():
        rho = budget.rho * share / total
        if not A:  # the total count: measure Total over a one-attribute projection
            marginal = source.project([domain.names[0]]).vectorize()
            measurements[A] = marginal.gaussian(Total(marginal.size), rho=rho).values
            continue
        sizes = [domain.sizes[i] for i in A]
        marginal = source.project([domain.names[i] for i in A]).vectorize()
        y = marginal.gaussian(whitened_residual(sizes), rho=rho).values
        measurements[A] = unwhiten(sizes, y)
    return strategy.reconstruct(measurements)
