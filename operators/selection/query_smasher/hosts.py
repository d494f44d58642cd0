"""How a QuerySmasher strategy is measured through the kernel and decoded (``QuerySmasherStrategy.measure``
and ``.reconstruct``).

Subworkload ``A'`` is measured as ``omega_A' = B_A' x_A' + N(0, sigma^2_A' I)`` through the kernel's
ordinary Gaussian request, with ResidualPlanner's counting (:mod:`operators.selection.residual_hosts`): the kernel
vectorizes only *host* marginals (small unions of the measured sets, never every attribute), each
``A'`` is measured on a host ``H ⊇ A'`` as ``B_A' ⊗ 1^T`` (``B_A'`` applied to the host's cells summed
over ``H \\ A'``), and the sets of one host go in one request ``VStack_A' c_A' (B_A' ⊗ 1^T)`` with
``c_A' = 1 / sigma_A'`` (the plan's noise at pcost ``2 rho``).

Charge: the squared L2 sensitivity of that stack, as the kernel computes it (max over host cells of
``sum_A' c_A'^2 diag(B_A'^T B_A')``), is at most the plan's share ``sum_A' 1 / sigma^2_A'`` because
``max diag(B^T B) = 1``. It can be smaller if the maxima of the diagonals fall on different cells (exact
solutions need not have a constant diagonal; on the workloads tested they coincide to the solver's
tolerance). ``rho`` is split into exact fractions proportional to these sensitivities, so the kernel
charges exactly the budget and applies the same noise factor ``sqrt(sum_H Delta_H^2 / (2 rho)) <= 1`` to
every row (up to its rounding of each scale onto the release grid): the plan's allocation
``gamma / sqrt(L_A')`` at a pcost of at least ``2 rho``. Variances use the scale each request actually
applied (each host Measurement's ``noise_std``). As for ResidualPlanner, :func:`decode` replays the
assignment of measured sets to hosts from the host measurements' attributes, in order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

from ...matrix import Identity, Kronecker, Matrix, Product, Total, VStack, Weighted
from ...client import Handle
from ...measurement import Measurement
from ...privacy import split_amount
from ...residual import SubsetFamily
from .decompose import Subset
from .solutions import KronSolution, SubSolution
from ..residual_hosts import DEFAULT_HOST_CELLS, Host, assign_hosts, plan_hosts


# ---------------------------------------------------------------------------------------
# B_A' on a host's cells
# ---------------------------------------------------------------------------------------
def _factor_groups(subset: Subset, solution: SubSolution) -> list[tuple[Subset, Matrix]]:
    """``B_A'`` as Kronecker factors in row order, each with the attributes its columns read (ascending)."""
    if isinstance(solution, KronSolution) and solution.perm == sorted(solution.perm):
        return [(tuple(subset[m] for m in axes), part.matrix()) for axes, part in solution.parts]
    return [(subset, solution.matrix())]


def embedded(sizes: Sequence[int], host: Subset, subset: Subset, solution: SubSolution) -> Matrix:
    """``B_A'`` applied to the ``A'``-marginal of the host's cells (host attributes in domain order).

    A Kronecker product with ``Total`` factors for the host's other attributes when each factor of
    ``B_A'`` reads attributes adjacent in the host (the kernel's norms stay cheap); otherwise ``B_A'``
    times the marginalization (the kernel's norms then materialize blocks of columns).
    """
    groups = _factor_groups(subset, solution)
    starts = {host.index(attrs[0]): (attrs, m) for attrs, m in groups if attrs}
    if all(host[k : k + len(attrs)] == attrs for k, (attrs, _) in starts.items()):
        factors = [m for attrs, m in groups if not attrs]  # the total's 1 x 1 strategy
        k = 0
        while k < len(host):
            attrs, m = starts.get(k, ((host[k],), Total(sizes[host[k]])))
            factors.append(m)
            k += len(attrs)
        return Kronecker(factors)
    marginalize = Kronecker([Identity(sizes[i]) if i in subset else Total(sizes[i]) for i in host])
    return Product([solution.matrix(), marginalize])


def host_matrix(strategy, host: Host, weights: Mapping[Subset, float]) -> Matrix:
    """``VStack_A' weights[A'] * (B_A' ⊗ 1^T)`` over the host's cells: one request per host."""
    sizes = strategy.domain.sizes
    blocks: list[Matrix] = [
        Weighted(embedded(sizes, host.attributes, a, strategy.solution(a)), weights[a]) for a in host.residuals
    ]
    return blocks[0] if len(blocks) == 1 else VStack(blocks)


def measured_hosts(strategy, max_cells: int = DEFAULT_HOST_CELLS) -> list[Host]:
    """ResidualPlanner's hosts for the closure of the measured sets, each carrying only measured sets."""
    measured = set(strategy.residual_sets)
    family = SubsetFamily.closure(measured, len(strategy.domain))
    return _carrying(plan_hosts(strategy.domain.sizes, family, max_cells), measured)


def _carrying(hosts: Sequence[Host], measured: set) -> list[Host]:
    carried = [Host(h.attributes, tuple(a for a in h.residuals if a in measured)) for h in hosts]
    return [h for h in carried if h.residuals]


def measure_hosts(vectors: Sequence[Handle], hosts: Sequence[Host], strategy, rho: Fraction) -> list[Measurement]:
    """One Gaussian request per host, ``rho`` split exactly in proportion to each request's squared L2
    sensitivity (computed by the same matrix classes as in the kernel). Returns the hosts' Measurements."""
    weights = {a: 1.0 / math.sqrt(s) for a, s in strategy.noise_scales().items()}
    matrices = [host_matrix(strategy, h, weights) for h in hosts]
    pcosts = [Fraction(m.sensitivity("l2") ** 2) for m in matrices]
    parts = split_amount(rho, pcosts)
    return [
        Measurement(matrix, answer.values, answer.scale, "gaussian", vector.id, host.attributes)
        for vector, host, matrix, answer in (
            (v, h, m, v.gaussian(m, rho=part)) for v, h, m, part in zip(vectors, hosts, matrices, parts)
        )
    ]


def decode(measurements: Sequence[Measurement], strategy) -> tuple[dict[Subset, np.ndarray], dict[Subset, float]]:
    """``{A': omega_A'}`` (``B_A' x_A'`` plus noise) and the applied ``{A': sigma^2_A'}`` from host measurements."""
    measured = set(strategy.residual_sets)
    family = SubsetFamily.closure(measured, len(strategy.domain))
    hosts = _carrying(assign_hosts([m.attributes for m in measurements], family), measured)
    if len(hosts) != len(measurements):
        raise ValueError("these measurements are not one per host of this strategy's plan")
    planned = strategy.noise_scales()
    omegas: dict[Subset, np.ndarray] = {}
    applied: dict[Subset, float] = {}
    for host, measurement in zip(hosts, measurements):
        offset = 0
        for a in host.residuals:
            rows = strategy.solution(a).num_rows
            omegas[a] = measurement.answers[offset : offset + rows] * math.sqrt(planned[a])
            applied[a] = measurement.noise_std**2 * planned[a]
            offset += rows
    return omegas, applied
