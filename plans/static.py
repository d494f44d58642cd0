"""Data-independent plans: measure one fixed strategy with the whole budget, then least squares.

Each is ``plan(source, workload, budget, *, shape=None) -> VectorEstimate`` (ektelo plans 1-6, 10, 16):
the classic selector's ``LinearStrategy`` measured through the kernel and reconstructed, with exact
error bars (a pure-DP budget measures with Laplace noise, a zCDP or (epsilon, delta) budget with Gaussian
noise). Their expected error is known before any data is touched: ``strategy.at(budget).rmse()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.matrix import Matrix
from ..operators import measure
from ..operators.selection import classic, memo
from ..operators.budget import Budget, noise_of
from ..operators.selection.linear import LinearStrategy


Select = Callable[[tuple[int, ...], Matrix], LinearStrategy]

#: Each data-independent plan's selector, by catalog name: (shape of the data vector, workload) -> strategy.
SELECTORS: dict[str, Select] = {
    "Identity": lambda dims, W: classic.identity(dims),
    "Uniform": lambda dims, W: classic.total(dims),
    "Privelet": lambda dims, W: classic.privelet(dims),
    "H2": lambda dims, W: classic.h2(dims),
    "HB": lambda dims, W: classic.hb(dims, root=len(dims) == 1),  # DPBench's 1-D HB measures the root
    "GreedyH": lambda dims, W: memo.remember("greedy_h", W, (), lambda: classic.greedy_h(W)),
    "QuadTree": lambda dims, W: classic.quadtree(dims),
}


def measured(source: Handle, workload: Matrix, budget: Budget, shape: Sequence[int] | None,
             select: Select) -> VectorEstimate:
    """Measure ``select(shape of the data vector, workload)`` with the whole ``budget``; reconstruct ``workload``."""
    vector, dims = measure.data_vector(source, shape)
    chosen = select(dims, workload)
    strategy = LinearStrategy(chosen.matrix, workload, noise_of(budget), chosen.name)
    return strategy.reconstruct(strategy.measure(vector, budget))


def identity(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None) -> VectorEstimate:
    """Identity: noisy counts of every cell."""
    return measured(source, workload, budget, shape, SELECTORS["Identity"])


def uniform(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None) -> VectorEstimate:
    """Uniform: the noisy total spread evenly (its error bars hold only for queries the total determines)."""
    return measured(source, workload, budget, shape, SELECTORS["Uniform"])


def privelet(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None) -> VectorEstimate:
    """Privelet: Haar wavelet coefficients."""
    return measured(source, workload, budget, shape, SELECTORS["Privelet"])


def h2(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None) -> VectorEstimate:
    """H2: the binary hierarchy of intervals."""
    return measured(source, workload, budget, shape, SELECTORS["H2"])


def hb(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None) -> VectorEstimate:
    """HB: the hierarchy with the branching that minimizes error; in 1-D with its root, eps / height a level, as
    DPBench's HB engine (without the root its error was 0.88 of the engine's over the 30 fidelity settings)."""
    return measured(source, workload, budget, shape, SELECTORS["HB"])


def greedy_h(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None) -> VectorEstimate:
    """Greedy-H: a weighted hierarchy fit to W^T W (remembered per workload)."""
    return measured(source, workload, budget, shape, SELECTORS["GreedyH"])


def quadtree(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None) -> VectorEstimate:
    """QuadTree: recursive quadrants down to cells."""
    return measured(source, workload, budget, shape, SELECTORS["QuadTree"])


def hb_striped_kron(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
                    attribute: int = 0) -> VectorEstimate:
    """HB-Striped_kron: HB along ``attribute``, identity across the other attributes (one Kronecker strategy)."""
    return measured(source, workload, budget, shape, striped(attribute))


def striped(attribute: int) -> Select:
    """HB-Striped_kron's selector along ``attribute``."""
    return lambda dims, W: classic.stripe(dims, attribute)
