"""What every plan needs: the data vector from a source handle, the budget as an epsilon, one measure-and-solve."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from operators.client import Handle
from kernel.matrix import Matrix
from kernel.privacy import PureDP
from operators import measure
from operators.inference import least_squares

BudgetLike = PureDP | float | int | Fraction | str


def epsilon_of(budget: BudgetLike) -> Fraction:
    """A plan's budget as an exact epsilon (a PureDP, or a number read exactly as PureDP reads it)."""
    if isinstance(budget, PureDP):
        return budget.epsilon
    return PureDP(budget).epsilon


def data_vector(source: Handle, shape: Sequence[int] | None = None) -> tuple[Handle, tuple[int, ...]]:
    """The vector handle to measure and its shape: vectorize a table handle, or take a vector handle as it is."""
    if source.kind == "table":
        dims = tuple(source.domain.sizes)
        vector = source.vectorize()
    else:
        vector, dims = source, (source.size,)
    if shape is not None:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != vector.size:
            raise ValueError(f"shape {shape} has {math.prod(shape)} cells but the vector has {vector.size}")
        dims = shape
    return vector, dims


def measure_and_solve(vector: Handle, strategy: Matrix, epsilon: BudgetLike) -> np.ndarray:
    """Laplace-measure ``strategy`` with the whole budget and return the least-squares estimate."""
    return least_squares([measure.laplace(vector, strategy, epsilon_of(epsilon))], size=vector.size)
