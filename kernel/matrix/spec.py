"""Matrix specifications: a matrix as validated data (pydantic). The kernel never receives matrix objects: it
rebuilds each spec with its own classes (``from_spec``). Arrays travel as base64 of little-endian bytes."""

from __future__ import annotations

import base64
import math
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

import scipy.sparse as sp

from .base import Matrix, Product, Transpose, Weighted
from .blocks import AllRange, Diagonal, Fourier, Identity, Intervals, Ones
from .compose import HStack, Kronecker, VStack
from .dense import Dense, Sparse
from .ranges import Ranges

_DTYPES = {"float64": np.dtype("<f8"), "int64": np.dtype("<i8")}


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ArrayData(_Spec):
    """A numpy array as data: dtype, shape and base64 bytes."""

    dtype: Literal["float64", "int64"]
    shape: list[Annotated[int, Field(ge=0)]] = Field(max_length=32, fail_fast=True)
    base64: str

    @classmethod
    def of(cls, array: np.ndarray) -> ArrayData:
        array = np.asarray(array)
        dtype = "int64" if np.issubdtype(array.dtype, np.integer) else "float64"
        data = np.ascontiguousarray(array, dtype=_DTYPES[dtype])
        return cls(dtype=dtype, shape=list(data.shape), base64=base64.b64encode(data.tobytes()).decode("ascii"))

    @model_validator(mode="after")
    def _length_matches(self) -> ArrayData:
        expected = math.prod(self.shape) * _DTYPES[self.dtype].itemsize
        # base64 length is 4 * ceil(bytes / 3); check before decoding anything large.
        if len(self.base64) != 4 * ((expected + 2) // 3):
            raise ValueError(f"array data does not hold {math.prod(self.shape)} {self.dtype} values of shape {self.shape}")
        return self

    def array(self) -> np.ndarray:
        raw = base64.b64decode(self.base64, validate=True)
        return np.frombuffer(raw, dtype=_DTYPES[self.dtype]).reshape(self.shape).copy()


Size = Annotated[int, Field(ge=1)]


class IdentitySpec(_Spec):
    kind: Literal["identity"] = "identity"
    n: Size

    def build(self) -> Matrix:
        return Identity(self.n)


class OnesSpec(_Spec):
    kind: Literal["ones"] = "ones"
    rows: Size
    cols: Size

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


class RangesSpec(_Spec):
    kind: Literal["ranges"] = "ranges"
    shape: list[Size] = Field(min_length=1, max_length=32, fail_fast=True)
    lo: ArrayData
    hi: ArrayData

    def build(self) -> Matrix:
        return Ranges(self.shape, self.lo.array(), self.hi.array())


class FourierSpec(_Spec):
    kind: Literal["fourier"] = "fourier"
    n: Size
    k: Size

    def build(self) -> Matrix:
        return Fourier(self.n, self.k)


class DenseSpec(_Spec):
    kind: Literal["dense"] = "dense"
    data: ArrayData

    def build(self) -> Matrix:
        return Dense(self.data.array())


class SparseSpec(_Spec):
    kind: Literal["sparse"] = "sparse"
    rows: Size
    cols: Size
    data: ArrayData
    indices: ArrayData
    indptr: ArrayData

    def build(self) -> Matrix:
        indices, indptr = self.indices.array(), self.indptr.array()
        if indptr.shape != (self.rows + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise ValueError("sparse spec: indptr must be non-decreasing, start at 0 and have rows + 1 entries")
        if indptr[-1] != indices.size or indices.size != self.data.array().size:
            raise ValueError("sparse spec: data, indices and indptr disagree in length")
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
