"""OPT_0, OPT_kron and OPT_+: Kronecker-product strategies for unions of Kronecker products.

OPT_kron (J Def. 17, 18): one product A_1 kron ... kron A_d. The error
sum_j w_j^2 prod_i ||A_i||^2 ||W_i^(j) A_i^+||_F^2 is minimized by block coordinate descent:
with the other factors fixed, attribute i sees the surrogate Gram sum_j c_j^2 V_i^(j),
c_j^2 = w_j^2 prod_{i' != i} (its factor errors), and is re-optimized by OPT_0 (warm started),
kept only if the surrogate error drops. A single product needs one pass.

OPT_+ (J Def. 19): one OPT_kron strategy per group of products (default: each product), then
budget shares c_j minimizing sum_j E_j / c_j^2 under sum c_j = 1 (Laplace, c ~ E^(1/3), total
(sum E^(1/3))^3) or sum c_j^2 = 1 (Gaussian, c ~ E^(1/4), total (sum E^(1/2))^2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...matrix import Identity, Kronecker, Matrix
from .blocks import AttributeBlocks
from .gram import Gram, Term, product_terms
from .opt0 import optimize_factor
from .strategies import KroneckerStrategy, UnionStrategy
from ...error import noise_constant
from ..strategy import Noise

#: Block-coordinate passes over the attributes, and the relative improvement that ends them.
PASSES = 8
TOLERANCE = 1e-5


def opt_0(
    W: Matrix,
    noise: Noise = "laplace",
    p: int | None = None,
    restarts: int = 3,
    seed: int | np.random.Generator | None = None,
    maxiter: int | None = None,
) -> KroneckerStrategy:
    """OPT_0: an explicit strategy for W as one block (p-Identity for Laplace, convex for Gaussian).

    p defaults to the paper's n / 16 within [8, 128] (1 for identity/total blocks, see
    opt0.default_p); Laplace keeps the best of ``restarts`` random starts; ``maxiter`` caps
    the optimizer's steps per start (time against error on large n; opt0.optimize_factor).
    """
    noise_constant(noise)
    rng = np.random.default_rng(seed)
    A = optimize_factor(Gram.of(W), noise, rng, p=p, restarts=restarts, maxiter=maxiter)
    return KroneckerStrategy(W, [(1.0, (W,))], [A], noise, optimizer="opt_0")


def opt_kron(
    W: Matrix,
    noise: Noise = "laplace",
    restarts: int = 1,
    seed: int | np.random.Generator | None = None,
    p: int | None = None,
) -> KroneckerStrategy:
    """OPT_kron: the best single Kronecker-product strategy over ``restarts`` block-coordinate runs.

    Whole runs are restarted, not single factors: the greedy first pass lands in different
    basins (on J Example 15: about 33,300 or 37,500) whatever each factor's own best start is.
    """
    noise_constant(noise)
    rng = np.random.default_rng(seed)
    terms = product_terms(W)
    runs = 1 if noise == "gaussian" else max(1, restarts)
    best = min((kron_factors(terms, noise, rng, p) for _ in range(runs)), key=lambda result: result[1])
    return KroneckerStrategy(W, terms, best[0], noise, optimizer="opt_kron")


def kron_factors(
    terms: Sequence[Term], noise: Noise, rng: np.random.Generator, p: int | None = None
) -> tuple[list[Matrix], float]:
    """Block coordinate descent for one Kronecker product; returns (factors, sum_j w_j^2 prod_i err).

    Factors start at the identity (as in the paper); each update warm-starts from the current factor.
    """
    sizes = [f.shape[1] for f in terms[0][1]]
    weights2 = np.array([w * w for w, _ in terms])
    blocks = AttributeBlocks(terms)
    factors: list[Matrix] = [Identity(n) for n in sizes]
    errors = np.column_stack([blocks.errors(i, A, noise) for i, A in enumerate(factors)])  # k x d
    total = float(weights2 @ np.prod(errors, axis=1))
    for _ in range(1 if len(terms) == 1 else PASSES):
        previous = total
        for i in range(len(sizes)):
            coefficients = weights2 * np.prod(np.delete(errors, i, axis=1), axis=1)
            candidate = optimize_factor(blocks.surrogate(i, coefficients), noise, rng, p=p, start=factors[i])
            candidate_errors = blocks.errors(i, candidate, noise)
            if coefficients @ candidate_errors < coefficients @ errors[:, i]:
                factors[i], errors[:, i] = candidate, candidate_errors
        total = float(weights2 @ np.prod(errors, axis=1))
        if previous - total <= TOLERANCE * previous:
            break
    return factors, total


def opt_plus(
    W: Matrix,
    noise: Noise = "laplace",
    groups: Sequence[Sequence[int]] | None = None,
    restarts: int = 1,
    seed: int | np.random.Generator | None = None,
    p: int | None = None,
) -> UnionStrategy:
    """OPT_+: an OPT_kron strategy per group of workload products, with optimal budget shares.

    ``groups`` lists product indices (in the order of W's blocks); default one group per product.
    """
    constant = noise_constant(noise)[0]
    rng = np.random.default_rng(seed)
    terms = product_terms(W)
    groups = [[j] for j in range(len(terms))] if groups is None else [list(g) for g in groups]
    covered = sorted(j for g in groups for j in g)
    if covered != list(range(len(terms))):
        raise ValueError(f"groups must partition the {len(terms)} workload products, got {groups}")
    runs = 1 if noise == "gaussian" else max(1, restarts)
    results = []
    for group in groups:
        group_terms = [terms[j] for j in group]
        results.append(min((kron_factors(group_terms, noise, rng, p) for _ in range(runs)), key=lambda r: r[1]))
    errors = np.array([e for _, e in results])
    if noise == "laplace":
        shares = np.cbrt(errors) / np.cbrt(errors).sum()
        total = np.cbrt(errors).sum() ** 3
    else:
        shares = errors**0.25 / math.sqrt(np.sqrt(errors).sum())
        total = np.sqrt(errors).sum() ** 2
    blocks = [(float(c), f[0] if len(f) == 1 else Kronecker(f)) for c, (f, _) in zip(shares, results) if c > 0]
    return UnionStrategy(W, blocks, noise, constant * total)
