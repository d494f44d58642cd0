"""Workloads as weighted unions of Kronecker products, seen only through structured Grams.

Every HDMM optimizer touches a workload W only through W^T W = sum_j w_j^2 kron_i V_i^(j)
(J Thm 6, 10). ``product_terms`` splits W into its products; ``Gram`` is one attribute's
(weighted) sum of block Grams V = sum_k c_k W_k^T W_k, exposing exactly what the losses
need: products V @ X through each block's structured Gram (O(n) per column for prefix,
range and width-w blocks), the diagonal (squared L2 column norms of W_k, closed form for
interval blocks), the trace and the total 1^T V 1. Nothing here forms a dense n x n matrix
except ``dense()``, which only the O(n^3) Gaussian initialization and tests call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np

from kernel.matrix import Identity, Kronecker, Matrix, Ones, VStack, Weighted

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
    """V = sum_k c_k W_k^T W_k for blocks W_k over one attribute of size n (c_k >= 0)."""

    def __init__(self, parts: Sequence[tuple[float, Matrix]]):
        parts = [(float(c), W) for c, W in parts if c != 0.0]
        if not parts:
            raise ValueError("a Gram needs at least one block with a nonzero coefficient")
        widths = {W.shape[1] for _, W in parts}
        if len(widths) != 1:
            raise ValueError(f"blocks of one Gram must share a domain, got widths {sorted(widths)}")
        if any(c < 0 for c, _ in parts):
            raise ValueError("Gram coefficients must be non-negative")
        self.parts = parts
        self.n = widths.pop()

    @classmethod
    def of(cls, W: Matrix) -> Gram:
        """The Gram W^T W of one workload block."""
        return cls([(1.0, W)])

    @cached_property
    def _grams(self) -> list[Matrix]:
        return [W.gram() for _, W in self.parts]

    def matmat(self, X: np.ndarray) -> np.ndarray:
        """V @ X for an (n, k) array, through each block's structured Gram."""
        return sum(c * (G @ X) for (c, _), G in zip(self.parts, self._grams))

    @cached_property
    def diag(self) -> np.ndarray:
        """diag(V) = sum_k c_k (squared L2 column norms of W_k)."""
        return sum(c * W.column_norms("l2") ** 2 for c, W in self.parts)

    @cached_property
    def trace(self) -> float:
        return float(self.diag.sum())

    @cached_property
    def total(self) -> float:
        """1^T V 1 = sum_k c_k ||W_k 1||^2."""
        ones = np.ones(self.n)
        return float(sum(c * np.sum((W @ ones) ** 2) for c, W in self.parts))

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
        return sum(c * G.dense() for (c, _), G in zip(self.parts, self._grams))


class AttributeBlocks:
    """The distinct workload blocks of each attribute of a union of products.

    Products repeat blocks (a marginal workload has only I and T per attribute), so factor
    errors and surrogate Grams are computed once per distinct block, not once per product.
    """

    def __init__(self, terms: Sequence[Term]):
        d = len(terms[0][1])
        self.index = np.zeros((len(terms), d), dtype=np.int64)
        self.blocks: list[list[Matrix]] = [[] for _ in range(d)]
        for i in range(d):
            seen: dict[str, int] = {}
            for j, (_, factors) in enumerate(terms):
                key = factors[i].to_spec().model_dump_json()
                if key not in seen:
                    seen[key] = len(self.blocks[i])
                    self.blocks[i].append(factors[i])
                self.index[j, i] = seen[key]
        self.grams = [[Gram.of(block) for block in blocks] for blocks in self.blocks]

    def errors(self, i: int, error_of: Callable[[Gram], float]) -> np.ndarray:
        """error_of(Gram of W_i^(j)) for every product j."""
        return np.array([error_of(g) for g in self.grams[i]])[self.index[:, i]]

    def surrogate(self, i: int, coefficients: np.ndarray) -> Gram:
        """sum_j coefficients_j (W_i^(j))^T W_i^(j), one part per distinct block."""
        summed = np.bincount(self.index[:, i], weights=coefficients, minlength=len(self.blocks[i]))
        return Gram(list(zip(summed, self.blocks[i])))
