"""The client's implicit matrices (scipy LinearOperator's shape, plus column norms, Grams and closed forms) and their
serialization (``spec``). Nothing here is trusted: a matrix reaches the kernel only compiled to the kernel's sealed
normal form (``operators.normal_form``), whose sensitivity the kernel derives itself."""

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
