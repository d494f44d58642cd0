"""Implicit matrices: structured linear maps with products, norms and specs.

The kernel computes sensitivities with these classes, so they are part of what is audited. The
algebra only clients need (Grams, pseudo-inverses, traces, sums) is in ``operators.algebra``.
"""

from kernel.matrix.base import Matrix, Norm, Product, Transpose, Weighted
from kernel.matrix.blocks import (
    AllRange,
    Diagonal,
    Fourier,
    Haar,
    Hierarchical,
    Identity,
    Intervals,
    Ones,
    Prefix,
    Suffix,
    Total,
    WidthRange,
)
from kernel.matrix.compose import HStack, Kronecker, Marginals, VStack
from kernel.matrix.dense import Dense, Sparse
from kernel.matrix.ranges import Ranges
from kernel.matrix.spec import MatrixSpec, MatrixSpecAdapter, from_spec

__all__ = [
    "AllRange", "Dense", "Diagonal", "Fourier", "HStack", "Haar", "Hierarchical", "Identity", "Intervals",
    "Kronecker", "Marginals", "Matrix", "MatrixSpec", "MatrixSpecAdapter", "Norm", "Ones", "Prefix", "Product", "Ranges",
    "Sparse", "Suffix", "Total", "Transpose", "VStack", "Weighted", "WidthRange", "from_spec",
]
