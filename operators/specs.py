"""Client matrices as data (``operators.matrix.spec``): saved advice, memo keys, anything that must rebuild the
same matrix later (``from_spec``). What the kernel receives is another thing: ``operators.normal_form``.

``to_spec`` is a ``functools.singledispatch`` function with one registration per base class; subclasses send their
base class's spec (``Prefix`` an ``IntervalsSpec``), and classes with no spec register a refusal.

>>> from ektelo_ng.operators.matrix import Identity, Kronecker, Ones
>>> to_spec(Kronecker([Identity(2), Ones(1, 3)])).model_dump()["factors"][1]
{'kind': 'ones', 'rows': 1, 'cols': 3}
"""

from __future__ import annotations

from functools import singledispatch

import numpy as np

from .matrix import (
    AllRange, Dense, Diagonal, Fourier, HStack, Identity, Intervals, Kronecker, Matrix, Ones, Product, Ranges, Sparse,
    Transpose, VStack, Weighted,
)
from .matrix.spec import (
    AllRangeSpec, ArrayData, DenseSpec, DiagonalSpec, FourierSpec, HStackSpec, IdentitySpec, IntervalsSpec,
    KroneckerSpec, MatrixSpec, OnesSpec, ProductSpec, RangesSpec, SparseSpec, TransposeSpec, VStackSpec, WeightedSpec,
)

__all__ = ["to_spec"]


@singledispatch
def to_spec(A: Matrix) -> MatrixSpec:
    """``A`` as data the kernel rebuilds with ``from_spec`` (a pydantic model; ``.model_dump_json()`` for text)."""
    raise TypeError(f"a {type(A).__name__} matrix has no spec: the kernel cannot rebuild it")


@to_spec.register
def _(A: Identity) -> MatrixSpec:
    return IdentitySpec(n=A.n)


@to_spec.register
def _(A: Ones) -> MatrixSpec:
    return OnesSpec(rows=A.shape[0], cols=A.shape[1])


@to_spec.register
def _(A: Diagonal) -> MatrixSpec:
    return DiagonalSpec(values=ArrayData.of(A.values))


@to_spec.register
def _(A: Intervals) -> MatrixSpec:
    return IntervalsSpec(n=A.n, lo=ArrayData.of(A.lo), hi=ArrayData.of(A.hi))


@to_spec.register
def _(A: AllRange) -> MatrixSpec:
    return AllRangeSpec(n=A.n)


@to_spec.register
def _(A: Fourier) -> MatrixSpec:
    return FourierSpec(n=A.n, k=A.k)


@to_spec.register
def _(A: Ranges) -> MatrixSpec:
    return RangesSpec(shape=list(A.domain_shape), lo=ArrayData.of(A.lo), hi=ArrayData.of(A.hi))


@to_spec.register
def _(A: Dense) -> MatrixSpec:
    return DenseSpec(data=ArrayData.of(A.array))


@to_spec.register
def _(A: Sparse) -> MatrixSpec:
    m = A.matrix
    return SparseSpec(
        rows=m.shape[0],
        cols=m.shape[1],
        data=ArrayData.of(m.data),
        indices=ArrayData.of(m.indices.astype(np.int64)),
        indptr=ArrayData.of(m.indptr.astype(np.int64)),
    )


@to_spec.register
def _(A: Kronecker) -> MatrixSpec:
    return KroneckerSpec(factors=[to_spec(f) for f in A.factors])


@to_spec.register
def _(A: VStack) -> MatrixSpec:
    return VStackSpec(blocks=[to_spec(b) for b in A.blocks])


@to_spec.register
def _(A: HStack) -> MatrixSpec:
    return HStackSpec(blocks=[to_spec(b) for b in A.blocks])


@to_spec.register
def _(A: Product) -> MatrixSpec:
    return ProductSpec(factors=[to_spec(f) for f in A.factors])


@to_spec.register
def _(A: Weighted) -> MatrixSpec:
    return WeightedSpec(base=to_spec(A.base), weight=A.weight)


@to_spec.register
def _(A: Transpose) -> MatrixSpec:
    return TransposeSpec(base=to_spec(A.base))
