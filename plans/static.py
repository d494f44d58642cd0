"""Data-independent plans: measure one fixed strategy with the whole budget, then least squares.

Each is ``plan(source, workload, budget, shape=None) -> estimate`` (ektelo plans 1-6, 10, 16).
Their expected error is known before any data is touched: ``operators.error.expected_error``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from operators.client import Handle
from kernel.matrix import Matrix
from operators.selection import classic, memo
from plans.common import BudgetLike, data_vector, measure_and_solve


def strategy_plan(choose: Callable[[tuple[int, ...], Matrix], Matrix], name: str, doc: str):
    """A plan that measures ``choose(shape, workload)`` and solves by least squares."""

    def plan(source: Handle, workload: Matrix, budget: BudgetLike, shape: Sequence[int] | None = None) -> np.ndarray:
        vector, dims = data_vector(source, shape)
        return measure_and_solve(vector, choose(dims, workload), budget)

    plan.__name__ = plan.__qualname__ = name
    plan.__doc__ = doc
    plan.strategy = choose
    return plan


identity = strategy_plan(lambda s, W: classic.identity(s), "identity", "Identity: noisy counts of every cell.")
uniform = strategy_plan(lambda s, W: classic.total(s), "uniform", "Uniform: the noisy total spread evenly.")
privelet = strategy_plan(lambda s, W: classic.privelet(s), "privelet", "Privelet: Haar wavelet coefficients.")
h2 = strategy_plan(lambda s, W: classic.h2(s), "h2", "H2: the binary hierarchy of intervals.")
hb = strategy_plan(lambda s, W: classic.hb(s), "hb", "HB: the hierarchy with the branching that minimizes error.")
greedy_h = strategy_plan(
    lambda s, W: memo.remember("greedy_h", W, (), lambda: classic.greedy_h(W)),
    "greedy_h", "Greedy-H: a weighted hierarchy fit to W^T W (remembered per workload).",
)
quadtree = strategy_plan(lambda s, W: classic.quadtree(s), "quadtree", "QuadTree: recursive quadrants down to cells.")


def hb_striped_kron(source: Handle, workload: Matrix, budget: BudgetLike, shape: Sequence[int] | None = None,
                    attribute: int = 0) -> np.ndarray:
    """HB-Striped_kron: HB along ``attribute``, identity across the other attributes (one Kronecker strategy)."""
    vector, dims = data_vector(source, shape)
    return measure_and_solve(vector, classic.stripe(dims, attribute), budget)


hb_striped_kron.strategy = lambda s, W, attribute=0: classic.stripe(s, attribute)
