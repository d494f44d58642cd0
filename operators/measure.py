"""Measurement: typed wrappers over the kernel's vetted mechanisms that return inference-ready Measurements.

Each call sends one request through the handle (the kernel derives the charge from the matrix
and the privacy parameter) and maps the measured matrix back to the base vector the handle
was derived from (through its reduce / split / transform lineage), so a single inference
can combine measurements taken anywhere in a plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from .budget import for_noise
from .client import Handle, NoisyAnswer
from .matrix import Matrix, Total
from .matrices import as_matrix
from .measurement import Measurement, map_to_root

Amount = float | Fraction | str


def _measurement(handle: Handle, matrix: Matrix, answer: NoisyAnswer) -> Measurement:
    base, lineage = handle.to_base()
    mapped = map_to_root(matrix, [] if lineage is None else [lineage])
    return Measurement(mapped, answer.values, math.sqrt(answer.variance), answer.noise, base.id)


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


def laplace(handle: Handle, matrix: Matrix, epsilon: Amount) -> Measurement:
    """matrix @ x + Laplace noise scaled by the kernel to matrix's L1 sensitivity / epsilon (matrix: a
    Matrix or a strategy)."""
    matrix = as_matrix(matrix)
    return _measurement(handle, matrix, handle.laplace(matrix, epsilon))


def gaussian(handle: Handle, matrix: Matrix, rho: Amount | None = None, sigma: float | None = None) -> Measurement:
    """matrix @ x + Gaussian noise (zCDP sessions): give rho, or sigma and be charged accordingly."""
    matrix = as_matrix(matrix)
    return _measurement(handle, matrix, handle.gaussian(matrix, rho=rho, sigma=sigma))


def noisy_count(handle: Handle, epsilon: Amount) -> Measurement:
    """The noisy total of a vector handle, as a measurement of the Total query."""
    return _measurement(handle, Total(handle.size), handle.noisy_count(epsilon))


def worst_approx(handle: Handle, workload: Matrix, estimate: np.ndarray, epsilon: Amount) -> int:
    """Index of a badly approximated workload query, chosen privately (exponential mechanism)."""
    return handle.worst_approx(workload, estimate, epsilon)


def table_and_rho(source: Handle, budget, who: str) -> Fraction:
    """The rho a marginal plan spends: it measures projections of a table with Gaussian noise, so it needs the
    table handle and a ``ZCDP`` or ``ApproxDP`` budget; anything else is refused, clearly."""
    if getattr(source, "kind", None) != "table":
        raise ValueError(f"{who} measures projections of a table: give the table handle (session.source)")
    try:
        return for_noise(budget, "gaussian").rho
    except ValueError as error:
        raise ValueError(f"{who}: {error} (from a session protected with a zCDP budget)") from None
