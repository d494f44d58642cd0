"""Client matrices as validated data (pydantic), for saving and rebuilding them (``from_spec``; ``to_spec`` is in
``operators.specs``): saved advice, memo keys. What the kernel receives is its own sealed language instead
(``operators.normal_form``). Arrays travel as base64 of little-endian bytes (the kernel's ``ArrayData``)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

import scipy.sparse as sp

from ...kernel.matrix.spec import ArrayData, FourierLeaf, IdentityLeaf, OnesLeaf, RangesLeaf, Size, SparseLeaf
from .base import Matrix, Product, Transpose, Weighted
from .blocks import AllRange, Diagonal, Fourier, Identity, Intervals, Ones
from .compose import HStack, Kronecker, VStack
from .dense import Dense, Sparse
from .ranges import Ranges


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# The leaves the kernel's sealed language shares are its own models, with a way to build the client's matrix.


class IdentitySpec(IdentityLeaf):
    def build(self) -> Matrix:
        return Identity(self.n)


class OnesSpec(OnesLeaf):
    def build(self) -> Matrix:
        return Ones(self.rows, self.cols)


class DiagonalSpec(_Spec):
    kind: Literal["diagonal"] = "diagonal"
    values: ArrayData

    def build(self) -> Matrix:
        return Diagonal(self.values.array())


class AllRangeSpec(_Spec):
    kind: Literal["all_range"] = "all_range"
    n: Size

    def build(self) -> Matrix:
        return AllRange(self.n)


class IntervalsSpec(_Spec):
    kind: Literal["intervals"] = "intervals"
    n: Size
    lo: ArrayData
    hi: ArrayData

    def build(self) -> Matrix:
        return Intervals(self.n, self.lo.array(), self.hi.array())


class RangesSpec(RangesLeaf):
    def build(self) -> Matrix:
        return Ranges(self.shape, self.lo.array(), self.hi.array())


class FourierSpec(FourierLeaf):
    def build(self) -> Matrix:
        return Fourier(self.n, self.k)


class DenseSpec(_Spec):
    """Any 2-D array: a client matrix may have no rows (the kernel's ``dense`` leaf may not)."""

    kind: Literal["dense"] = "dense"
    data: ArrayData

    def build(self) -> Matrix:
        return Dense(self.data.array())


class SparseSpec(SparseLeaf):
    def build(self) -> Matrix:
        indices, indptr = self.indices.array(), self.indptr.array()
        if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.size:
            raise ValueError("sparse spec: indptr must be non-decreasing, start at 0 and end at the number of entries")
        if indices.size and (indices.min() < 0 or indices.max() >= self.cols):
            raise ValueError("sparse spec: column index out of range")
        return Sparse(sp.csr_array((self.data.array(), indices, indptr), shape=(self.rows, self.cols)))


class KroneckerSpec(_Spec):
    kind: Literal["kronecker"] = "kronecker"
    factors: list[MatrixSpec] = Field(min_length=1, max_length=1 << 16, fail_fast=True)

    def build(self) -> Matrix:
        return Kronecker([f.build() for f in self.factors])


class VStackSpec(_Spec):
    kind: Literal["vstack"] = "vstack"
    blocks: list[MatrixSpec] = Field(min_length=1, max_length=1 << 16, fail_fast=True)

    def build(self) -> Matrix:
        return VStack([b.build() for b in self.blocks])


class HStackSpec(_Spec):
    kind: Literal["hstack"] = "hstack"
    blocks: list[MatrixSpec] = Field(min_length=1, max_length=1 << 16, fail_fast=True)

    def build(self) -> Matrix:
        return HStack([b.build() for b in self.blocks])


class ProductSpec(_Spec):
    kind: Literal["product"] = "product"
    factors: list[MatrixSpec] = Field(min_length=1, max_length=1 << 16, fail_fast=True)

    def build(self) -> Matrix:
        return Product([f.build() for f in self.factors])


class WeightedSpec(_Spec):
    kind: Literal["weighted"] = "weighted"
    base: MatrixSpec
    weight: float

    def build(self) -> Matrix:
        return Weighted(self.base.build(), self.weight)


class TransposeSpec(_Spec):
    kind: Literal["transpose"] = "transpose"
    base: MatrixSpec

    def build(self) -> Matrix:
        return Transpose(self.base.build())


MatrixSpec = Annotated[
    Union[
        IdentitySpec, OnesSpec, DiagonalSpec, AllRangeSpec, IntervalsSpec, RangesSpec, FourierSpec, DenseSpec,
        SparseSpec, KroneckerSpec, VStackSpec, HStackSpec, ProductSpec, WeightedSpec, TransposeSpec,
    ],
    Field(discriminator="kind"),
]

for _model in (KroneckerSpec, VStackSpec, HStackSpec, ProductSpec, WeightedSpec, TransposeSpec):
    _model.model_rebuild()

MatrixSpecAdapter: TypeAdapter = TypeAdapter(MatrixSpec)


def from_spec(spec) -> Matrix:
    """Rebuild a matrix from a spec model, a dict, or a JSON string."""
    if isinstance(spec, (str, bytes)):
        spec = MatrixSpecAdapter.validate_json(spec)
    elif isinstance(spec, dict):
        spec = MatrixSpecAdapter.validate_python(spec)
    return spec.build()
