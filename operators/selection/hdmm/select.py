"""OPT_M as a strategy selector, and OPT_HDMM: the best of every optimizer, Identity included.

Selection reads only the public workload: no data, no budget (J section 9).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...matrix import Identity, Matrix
from . import marginals as marg
from .gram import product_terms
from .kron import opt_0, opt_kron, opt_plus
from .marginals import MAX_LATTICE_ATTRIBUTES
from .strategies import HDMMStrategy, KroneckerStrategy, MarginalStrategy
from ...error import noise_constant
from ..strategy import Noise

#: OPT_HDMM also runs OPT_0 on the whole (flattened) domain up to this many cells.
OPT0_MAX_CELLS = 1024
#: OPT_HDMM runs OPT_+ (one OPT_kron per product) on unions of up to this many products. A box
#: workload is a union of thousands of one-row products: OPT_+ would measure each box on its
#: own share of the budget (100 boxes on 24 x 20: RMSE 202 against OPT_kron's 11.6).
OPT_PLUS_MAX_PRODUCTS = 64


def opt_marginals(
    W: Matrix,
    noise: Noise = "laplace",
    restarts: int = 1,
    seed: int | np.random.Generator | None = None,
) -> MarginalStrategy:
    """OPT_M: the best weighted-marginal strategy for a union of Kronecker products.

    Gaussian starts from the closed form of J Thm 13 (already optimal when valid); Laplace
    also tries ``restarts`` random starts. Exact error for any conjunctive workload.
    """
    constant = noise_constant(noise)[0]
    terms = product_terms(W)
    lattice = marg.Lattice([f.shape[1] for f in terms[0][1]])
    if lattice.d > MAX_LATTICE_ATTRIBUTES:
        raise ValueError(f"OPT_M handles at most {MAX_LATTICE_ATTRIBUTES} attributes, got {lattice.d}")
    kappa_w = lattice.Y(marg.marginal_approximation(terms, lattice))
    theta, loss = marg.optimize_theta(kappa_w, lattice, noise, np.random.default_rng(seed), restarts)
    return MarginalStrategy(W, lattice, theta, noise, constant * loss)


def identity_strategy(W: Matrix, noise: Noise = "laplace") -> KroneckerStrategy:
    """The Identity baseline (answer every cell): HDMM's fallback."""
    terms = product_terms(W)
    return KroneckerStrategy(W, terms, [Identity(f.shape[1]) for f in terms[0][1]], noise, optimizer="identity")


OPTIMIZERS: dict[str, Callable[..., HDMMStrategy]] = {
    "opt_0": opt_0,
    "opt_kron": opt_kron,
    "opt_plus": opt_plus,
    "opt_marginals": opt_marginals,
}


def default_optimizers(W: Matrix) -> tuple[str, ...]:
    """OPT_0 for one attribute; OPT_kron, OPT_+ (small unions), OPT_M and OPT_0 on small domains otherwise."""
    terms = product_terms(W)
    d = len(terms[0][1])
    if d == 1:
        return ("opt_0",)
    names = ["opt_kron"] + (["opt_plus"] if 1 < len(terms) <= OPT_PLUS_MAX_PRODUCTS else [])
    names += ["opt_marginals"] if d <= MAX_LATTICE_ATTRIBUTES else []
    return tuple(names + (["opt_0"] if W.shape[1] <= OPT0_MAX_CELLS else []))


def hdmm(
    W: Matrix,
    *,
    noise: Noise = "laplace",
    restarts: int = 3,
    seed: int | None = None,
    optimizers: Sequence[str] | None = None,
) -> HDMMStrategy:
    """OPT_HDMM: run each optimizer (``restarts`` random starts each) and keep the lowest expected error.

    W is a kernel Matrix: a Kronecker product, a (weighted) union of them, a 1-D block or a
    MarginalStack. The Identity strategy is always a candidate.
    """
    noise_constant(noise)
    names = default_optimizers(W) if optimizers is None else tuple(optimizers)
    unknown = sorted(set(names) - set(OPTIMIZERS))
    if unknown:
        raise ValueError(f"unknown optimizers {unknown}; choose from {sorted(OPTIMIZERS)}")
    seeds = np.random.SeedSequence(seed).spawn(len(names))
    candidates = [identity_strategy(W, noise)]
    for name, child in zip(names, seeds):
        candidates.append(OPTIMIZERS[name](W, noise=noise, restarts=restarts, seed=np.random.default_rng(child)))
    return min(candidates, key=lambda s: s.expected_error())


#: The paper's name for the selector.
opt_hdmm = hdmm
