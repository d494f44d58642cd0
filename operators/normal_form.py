"""The client's matrices compiled to the kernel's sealed language (``kernel.matrix.spec``): a stack of blocks, each
``weight * diag(row_weights) * kron(leaves)``.

Stacks become blocks, scalar weights multiply into them, Kronecker products of leaves become one block (a factor
with no one-leaf form becoming a dense leaf), a diagonal's product with a one-leaf block becomes its row weights.
Anything else (products, transposes, sums, Grams) has no form the kernel accepts: it is sent as the dense matrix it
is, computed here from public matrices, up to ``DENSE_ENTRIES`` entries, and otherwise refused with what to send
instead. Nothing here is trusted: the kernel derives every sensitivity from what it receives.

>>> from ektelo_ng.operators.matrix import Identity, Kronecker, Ones
>>> normal_form(Kronecker([Identity(2), Ones(1, 3)])).blocks[0].factors[1].kind
'ones'
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import singledispatch

import numpy as np

from ..kernel.matrix.spec import (
    ArrayData, Block, DenseLeaf, FourierLeaf, IdentityLeaf, OnesLeaf, RangesLeaf, SparseLeaf, Stack,
)
from .matrix import (
    Dense, Diagonal, Fourier, Identity, Intervals, Kronecker, Matrix, Ones, Product, Ranges, Sparse, Transpose,
    VStack, Weighted,
)

__all__ = ["DENSE_ENTRIES", "normal_form"]

DENSE_ENTRIES = 1 << 22
"""The largest matrix without a structured form sent as its dense entries (32 MB)."""


@dataclass(frozen=True)
class _Part:
    """A block under construction: weight, row weights (a single leaf only) and leaves."""

    weight: float
    row_weights: np.ndarray | None
    leaves: tuple

    def block(self) -> Block:
        weights = None if self.row_weights is None else ArrayData.of(np.asarray(self.row_weights, dtype=np.float64))
        return Block(weight=self.weight, row_weights=weights, factors=list(self.leaves))


def normal_form(A: Matrix) -> Stack:
    """``A`` as the kernel's sealed language (a ``Stack`` spec), or TypeError saying why it cannot be sent."""
    return Stack(blocks=[part.block() for part in _parts(A)])


@singledispatch
def _parts(A: Matrix) -> list[_Part]:
    return _dense(A)


def _dense(A: Matrix) -> list[_Part]:
    """A matrix with no structured form, as its dense entries if it is small enough."""
    rows, cols = A.shape
    if rows * cols > DENSE_ENTRIES:
        raise TypeError(f"a {rows} x {cols} {type(A).__name__} has no form the kernel accepts (a stack of weighted "
                        "Kronecker products of identity, ones, ranges, dense, sparse and Fourier leaves), and is too "
                        f"large to send densely ({DENSE_ENTRIES} entries at most): measure its factors instead")
    return [_leaf(DenseLeaf(data=ArrayData.of(A.dense())))]


def _leaf(leaf) -> _Part:
    return _Part(1.0, None, (leaf,))


@_parts.register
def _(A: Identity) -> list[_Part]:
    return [_leaf(IdentityLeaf(n=A.n))]


@_parts.register
def _(A: Ones) -> list[_Part]:
    return [_leaf(OnesLeaf(rows=A.shape[0], cols=A.shape[1]))]


@_parts.register
def _(A: Intervals) -> list[_Part]:
    return [_leaf(RangesLeaf(shape=[A.n], lo=ArrayData.of(A.lo[:, None]), hi=ArrayData.of(A.hi[:, None])))]


@_parts.register
def _(A: Ranges) -> list[_Part]:
    return [_leaf(RangesLeaf(shape=list(A.domain_shape), lo=ArrayData.of(A.lo), hi=ArrayData.of(A.hi)))]


@_parts.register
def _(A: Dense) -> list[_Part]:
    return [_leaf(DenseLeaf(data=ArrayData.of(A.array)))]


@_parts.register
def _(A: Sparse) -> list[_Part]:
    m = A.matrix
    return [_leaf(SparseLeaf(rows=m.shape[0], cols=m.shape[1], data=ArrayData.of(m.data.astype(np.float64)),
                             indices=ArrayData.of(m.indices.astype(np.int64)),
                             indptr=ArrayData.of(m.indptr.astype(np.int64))))]


@_parts.register
def _(A: Fourier) -> list[_Part]:
    return [_leaf(FourierLeaf(n=A.n, k=A.k))]


@_parts.register
def _(A: Diagonal) -> list[_Part]:
    return [_Part(1.0, A.values, (IdentityLeaf(n=A.shape[0]),))]


@_parts.register
def _(A: VStack) -> list[_Part]:
    return [part for block in A.blocks for part in _parts(block)]


@_parts.register
def _(A: Weighted) -> list[_Part]:
    return [replace(part, weight=part.weight * A.weight) for part in _parts(A.base)]


@_parts.register
def _(A: Kronecker) -> list[_Part]:
    factors = [_one_part(f) for f in A.factors]
    weight = float(np.prod([f.weight for f in factors]))
    return [_Part(weight, None, tuple(leaf for f in factors for leaf in f.leaves))]


def _one_part(factor: Matrix) -> _Part:
    """A Kronecker factor as one leaf: its own form if that is one leaf, else its dense entries (a p-Identity, any
    stack of blocks: the product stays a Kronecker product of small leaves)."""
    parts = _parts(factor)
    if len(parts) == 1 and parts[0].row_weights is None:
        return parts[0]
    return _dense(factor)[0]


@_parts.register
def _(A: Product) -> list[_Part]:
    """diag(w) @ B: w becomes the row weights of B's one-leaf blocks."""
    if len(A.factors) != 2 or not isinstance(A.factors[0], Diagonal):
        return _dense(A)
    parts, w, start = _parts(A.factors[1]), A.factors[0].values, 0
    out = []
    for part in parts:
        rows = int(np.prod([_rows(leaf) for leaf in part.leaves]))
        if len(part.leaves) != 1:
            return _dense(A)
        own = np.ones(rows) if part.row_weights is None else part.row_weights
        out.append(_Part(part.weight, w[start : start + rows] * own, part.leaves))
        start += rows
    return out


@_parts.register
def _(A: Transpose) -> list[_Part]:
    base = A.base
    return _parts(base) if isinstance(base, (Identity, Diagonal)) else _dense(A)


def _rows(leaf) -> int:
    """A leaf spec's rows."""
    if leaf.kind == "identity":
        return leaf.n
    if leaf.kind in ("ones", "sparse"):
        return leaf.rows
    if leaf.kind == "ranges":
        return leaf.lo.shape[0]
    if leaf.kind == "dense":
        return leaf.data.shape[0]
    return leaf.k
