"""Implicit matrices with products and column norms, rebuilt from specs: the kernel computes sensitivities with
them, so they are audited. Client-only classes, algebra and ``to_spec`` are in ``operators``."""

from .base import Matrix, Norm, Product, Transpose, Weighted
from .blocks import AllRange, Diagonal, Fourier, Identity, Intervals, Ones, Total
from .compose import HStack, Kronecker, VStack
from .dense import Dense, Sparse
from .ranges import Ranges
from .spec import MatrixSpec, MatrixSpecAdapter, from_spec

__all__ = [
    "AllRange", "Dense", "Diagonal", "Fourier", "HStack", "Identity", "Intervals", "Kronecker", "Matrix", "MatrixSpec",
    "MatrixSpecAdapter", "Norm", "Ones", "Product", "Ranges", "Sparse", "Total", "Transpose", "VStack", "Weighted",
    "from_spec",
]
