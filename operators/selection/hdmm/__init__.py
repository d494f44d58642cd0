"""HDMM strategy selection (McKenna et al., "HDMM", VLDB 2018 / journal version).

``hdmm(W, noise)`` (alias ``opt_hdmm``) returns the best strategy found by the paper's
optimizers, each usable on its own: ``opt_0`` (explicit 1-D blocks), ``opt_kron`` (one
Kronecker product), ``opt_plus`` (union of products) and ``opt_marginals`` (OPT_M, weighted
marginals). Strategies report their exact expected error at unit noise, the SVD bound, and
reconstruct least-squares estimates from noisy answers.
"""

from .kron import opt_0, opt_kron, opt_plus
from .opt0 import PIdentity
from .select import hdmm, identity_strategy, opt_hdmm, opt_marginals
from .strategies import HDMMStrategy, KroneckerStrategy, MarginalStrategy, UnionStrategy

__all__ = [
    "HDMMStrategy", "KroneckerStrategy", "MarginalStrategy", "PIdentity", "UnionStrategy", "hdmm",
    "identity_strategy", "opt_0", "opt_hdmm", "opt_kron", "opt_marginals", "opt_plus",
]
