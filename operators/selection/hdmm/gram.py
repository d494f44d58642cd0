"""Workloads as weighted unions of Kronecker products, seen only through structured Grams.

Every HDMM optimizer touches a workload W only through W^T W = sum_j w_j^2 kron_i V_i^(j)
(J Thm 6, 10). ``product_terms`` splits W into its products (a box workload is a union of
one-row interval products); ``Gram`` is one attribute's (weighted) sum of block Grams
V = sum_k W_k^T C_k W_k, C_k a scalar or a diagonal of row weights, exposing exactly what
the losses need: products V @ X through each block's structured Gram (O(n) per column for
prefix, range and width-w blocks), the diagonal (squared L2 column norms of W_k, closed form
for interval blocks), the trace and the total 1^T V 1. Nothing here forms a dense n x n
matrix except ``dense()``, which only the O(n^3) Gaussian initialization and tests call.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np

from ...matrix import Identity, Intervals, Kronecker, Matrix, Ones, Ranges, VStack, Weighted
from ...algebra import gram

#: One product of a union workload: (weight w_j, (W_1^(j), ..., W_d^(j))).
Term = tuple[float, tuple[Matrix, ...]]


def product_terms(W: Matrix) -> list[Term]:
    """W as a weighted union of Kronecker products with aligned factors.

    Weighted and stacked blocks are unfolded and nested Kronecker factors flattened. A
    workload whose products do not share one attribute layout is one explicit block.
    """
    terms = _unfold(W, 1.0)
    layouts = {tuple(f.shape[1] for f in factors) for _, factors in terms}
    return terms if len(layouts) == 1 else [(1.0, (W,))]


def _unfold(W: Matrix, weight: float) -> list[Term]:
    if isinstance(W, Weighted):
        return _unfold(W.base, weight * W.weight)
    if isinstance(W, VStack):
        return [term for block in W.blocks for term in _unfold(block, weight)]
    if isinstance(W, Kronecker):
        return [(weight, tuple(_leaves(W)))]
    if isinstance(W, Ranges) and len(W.domain_shape) > 1:
        return [
            (weight, tuple(Intervals(n, [a], [b]) for n, a, b in zip(W.domain_shape, lo, hi)))
            for lo, hi in zip(W.lo.tolist(), W.hi.tolist())
        ]
    return [(weight, (W,))]


def _leaves(K: Kronecker) -> list[Matrix]:
    return [leaf for f in K.factors for leaf in (_leaves(f) if isinstance(f, Kronecker) else [f])]


def _unweighted(block: Matrix) -> Matrix:
    while isinstance(block, Weighted):
        block = block.base
    return block


def is_identity_or_total(block: Matrix) -> bool:
    """True for I and all-ones blocks (any weight): predicates the paper gives p = 1."""
    return isinstance(_unweighted(block), (Identity, Ones))


class Gram:
    """V = sum_k W_k^T C_k W_k over one attribute of size n.

    C_k is a non-negative scalar, or a vector of non-negative row weights (diag(c_k)) for a
    0/1 block: one part then stands for many one-row blocks, as in a box workload's surrogate.
    """

    def __init__(self, parts: Sequence[tuple[float | np.ndarray, Matrix]]):
        parts = [(_weights(c, W), W) for c, W in parts]
        parts = [(c, W) for c, W in parts if np.any(c != 0.0)]
        if not parts:
            raise ValueError("a Gram needs at least one block with a nonzero coefficient")
        widths = {W.shape[1] for _, W in parts}
        if len(widths) != 1:
            raise ValueError(f"blocks of one Gram must share a domain, got widths {sorted(widths)}")
        self.parts = parts
        self.n = widths.pop()

    @classmethod
    def of(cls, W: Matrix) -> Gram:
        """The Gram W^T W of one workload block."""
        return cls([(1.0, W)])

    @cached_property
    def _grams(self) -> list[Matrix | None]:
        return [gram(W) if np.ndim(c) == 0 else None for c, W in self.parts]

    def matmat(self, X: np.ndarray) -> np.ndarray:
        """V @ X for an (n, k) array, through each block's structured Gram (or W^T (c * W X))."""
        return sum(
            c * (G @ X) if G is not None else W.T @ (c[:, None] * (W @ X))
            for (c, W), G in zip(self.parts, self._grams)
        )

    @cached_property
    def diag(self) -> np.ndarray:
        """diag(V) = sum_k c_k (squared L2 column norms of W_k), or W_k^T c_k for row weights."""
        return sum(c * W.column_norms("l2") ** 2 if np.ndim(c) == 0 else W.T @ c for c, W in self.parts)

    @cached_property
    def trace(self) -> float:
        return float(self.diag.sum())

    @cached_property
    def total(self) -> float:
        """1^T V 1 = sum_k c_k ||W_k 1||^2 (row by row for row weights)."""
        ones = np.ones(self.n)
        return float(sum(np.sum(c * (W @ ones) ** 2) for c, W in self.parts))

    @property
    def identity_or_total(self) -> bool:
        return all(is_identity_or_total(W) for _, W in self.parts)

    @property
    def identity_only(self) -> bool:
        """V is a multiple of the identity: every block is an identity."""
        return all(isinstance(_unweighted(W), Identity) for _, W in self.parts)

    @property
    def total_only(self) -> bool:
        """V is a multiple of the all-ones matrix: every block is all-ones."""
        return all(isinstance(_unweighted(W), Ones) for _, W in self.parts)

    def dense(self) -> np.ndarray:
        return self.matmat(np.eye(self.n))


def _weights(c: float | np.ndarray, W: Matrix) -> float | np.ndarray:
    """A part's coefficient, checked: a non-negative scalar, or one weight per row of a 0/1 block."""
    if np.ndim(c) == 0:
        if float(c) < 0:
            raise ValueError("Gram coefficients must be non-negative")
        return float(c)
    c = np.asarray(c, dtype=np.float64)
    if c.shape != (W.shape[0],) or not getattr(W, "binary", False):
        raise ValueError(f"row weights need a 0/1 block and one weight per row ({W.shape[0]}), got shape {c.shape}")
    if c.min() < 0:
        raise ValueError("Gram row weights must be non-negative")
    return c
