"""The sealed matrix language: the only form in which a matrix reaches the kernel (pydantic, JSON).

A matrix is a ``Stack`` of ``Block``\\ s stacked vertically; a block is ``weight * diag(row_weights) * (L_1 kron ...
kron L_d)`` over leaves from a closed list: ``identity``, ``ones``, ``ranges`` (axis-aligned boxes over a grid,
intervals in one dimension), ``dense``, ``sparse`` (CSR) and ``fourier`` (the lowest real Fourier frequencies,
for EFPA). Row weights go with one leaf only. Nothing else is accepted: the client's algebra (products,
transposes, named matrices) compiles to this form in ``operators.normal_form``. Arrays travel as base64 of
little-endian bytes; the limits on list lengths bound what parsing can cost (``kernel.cost``).
"""

from __future__ import annotations

import base64
import math
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

_DTYPES = {"float64": np.dtype("<f8"), "int64": np.dtype("<i8")}

MAX_BLOCKS = 1 << 12
"""Blocks in one stack."""
MAX_FACTORS = 64
"""Leaves in one block's Kronecker product."""
MAX_RANGE_DIMENSIONS = 16
"""Dimensions of a ``ranges`` leaf's grid (its algorithm visits 2^d corners per box)."""


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
        # base64 length is 4 * ceil(bytes / 3); checked before anything is decoded.
        if len(self.base64) != 4 * ((expected + 2) // 3):
            raise ValueError(
                f"array data does not hold {math.prod(self.shape)} {self.dtype} values of shape {self.shape}"
            )
        return self

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def array(self) -> np.ndarray:
        raw = base64.b64decode(self.base64, validate=True)
        return np.frombuffer(raw, dtype=_DTYPES[self.dtype]).reshape(self.shape).copy()


Size = Annotated[int, Field(ge=1)]


class IdentityLeaf(_Spec):
    """The n x n identity."""

    kind: Literal["identity"] = "identity"
    n: Size


class OnesLeaf(_Spec):
    """The rows x cols all-ones matrix (1 x n: the total)."""

    kind: Literal["ones"] = "ones"
    rows: Size
    cols: Size


class RangesLeaf(_Spec):
    """Box queries over a grid of ``shape`` (row-major): row k sums the cells with lo[k, i] <= index_i <= hi[k, i]."""

    kind: Literal["ranges"] = "ranges"
    shape: list[Size] = Field(min_length=1, max_length=MAX_RANGE_DIMENSIONS, fail_fast=True)
    lo: ArrayData
    hi: ArrayData

    @model_validator(mode="after")
    def _corners(self) -> RangesLeaf:
        d = len(self.shape)
        if self.lo.dtype != "int64" or self.hi.dtype != "int64" or self.lo.shape != self.hi.shape:
            raise ValueError("ranges: lo and hi must be int64 arrays of the same shape")
        if len(self.lo.shape) != 2 or self.lo.shape[1] != d or self.lo.shape[0] < 1:
            raise ValueError(f"ranges: lo and hi must have shape (boxes, {d}), one corner per box, at least one box")
        return self


class DenseLeaf(_Spec):
    """A matrix given entry by entry (float64, rows x cols)."""

    kind: Literal["dense"] = "dense"
    data: ArrayData

    @model_validator(mode="after")
    def _two_dimensional(self) -> DenseLeaf:
        if self.data.dtype != "float64" or len(self.data.shape) != 2 or min(self.data.shape) < 1:
            raise ValueError("dense: data must be a non-empty 2-D float64 array")
        return self


class SparseLeaf(_Spec):
    """A matrix in compressed sparse row form: ``data`` (float64), ``indices`` and ``indptr`` (int64)."""

    kind: Literal["sparse"] = "sparse"
    rows: Size
    cols: Size
    data: ArrayData
    indices: ArrayData
    indptr: ArrayData

    @model_validator(mode="after")
    def _csr(self) -> SparseLeaf:
        if (self.data.dtype, self.indices.dtype, self.indptr.dtype) != ("float64", "int64", "int64"):
            raise ValueError("sparse: data must be float64, indices and indptr int64")
        if len(self.data.shape) != 1 or self.indices.shape != self.data.shape or self.indptr.shape != [self.rows + 1]:
            raise ValueError("sparse: data and indices must be 1-D of one length, indptr of length rows + 1")
        return self


class FourierLeaf(_Spec):
    """The k lowest-frequency rows of the orthonormal real Fourier basis of R^n (EFPA's measurement)."""

    kind: Literal["fourier"] = "fourier"
    n: Size
    k: Size

    @model_validator(mode="after")
    def _rows(self) -> FourierLeaf:
        if self.k > self.n:
            raise ValueError(f"fourier: the basis of R^{self.n} has {self.n} rows, asked for {self.k}")
        return self


Leaf = Annotated[
    Union[IdentityLeaf, OnesLeaf, RangesLeaf, DenseLeaf, SparseLeaf, FourierLeaf], Field(discriminator="kind")
]


class Block(_Spec):
    """``weight * diag(row_weights) * kron(factors)``; ``row_weights`` only with a single factor."""

    weight: float = Field(default=1.0, allow_inf_nan=False)
    row_weights: ArrayData | None = None
    factors: list[Leaf] = Field(min_length=1, max_length=MAX_FACTORS, fail_fast=True)

    @model_validator(mode="after")
    def _row_weights(self) -> Block:
        if self.row_weights is not None:
            if len(self.factors) != 1:
                raise ValueError("row weights go with a block of one factor; give each weighted leaf its own block")
            if self.row_weights.dtype != "float64" or len(self.row_weights.shape) != 1:
                raise ValueError("row weights must be a 1-D float64 array")
        return self


class Stack(_Spec):
    """The matrix: its blocks stacked vertically (all with the same number of columns)."""

    kind: Literal["stack"] = "stack"
    blocks: list[Block] = Field(min_length=1, max_length=MAX_BLOCKS, fail_fast=True)
