"""Measurement: typed wrappers over the kernel's vetted mechanisms that return inference-ready Measurements.

Each call sends one request through the handle (the kernel derives the charge from the matrix
and the privacy parameter) and maps the measured matrix back to the base vector the handle
was derived from (through its reduce / split / transform lineage), so a single inference
can combine measurements taken anywhere in a plan.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from operators.client import Handle, NoisyAnswer
from kernel.matrix import Matrix, Total
from operators.measurement import Measurement, map_to_root

Amount = float | Fraction | str


def _measurement(handle: Handle, matrix: Matrix, answer: NoisyAnswer) -> Measurement:
    base, lineage = handle.to_base()
    mapped = map_to_root(matrix, [] if lineage is None else [lineage])
    return Measurement(mapped, answer.values, math.sqrt(answer.variance), answer.noise, base.id)


def laplace(handle: Handle, matrix: Matrix, epsilon: Amount) -> Measurement:
    """matrix @ x + Laplace noise scaled by the kernel to matrix's L1 sensitivity / epsilon."""
    return _measurement(handle, matrix, handle.laplace(matrix, epsilon))


def gaussian(handle: Handle, matrix: Matrix, rho: Amount | None = None, sigma: float | None = None) -> Measurement:
    """matrix @ x + Gaussian noise (zCDP sessions): give rho, or sigma and be charged accordingly."""
    return _measurement(handle, matrix, handle.gaussian(matrix, rho=rho, sigma=sigma))


def noisy_count(handle: Handle, epsilon: Amount) -> Measurement:
    """The noisy total of a vector handle, as a measurement of the Total query."""
    return _measurement(handle, Total(handle.size), handle.noisy_count(epsilon))


def worst_approx(handle: Handle, workload: Matrix, estimate: np.ndarray, epsilon: Amount) -> int:
    """Index of a badly approximated workload query, chosen privately (exponential mechanism)."""
    return handle.worst_approx(workload, estimate, epsilon)
