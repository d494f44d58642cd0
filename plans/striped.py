"""HB-Striped (ektelo plan 15): HB on every 1-D stripe along one attribute, one least squares.

The vector is split into its stripes (V-SplitByPartition: disjoint parts), so measuring each
stripe with the FULL epsilon costs epsilon in all by parallel composition. Every stripe gets the
HB hierarchy for its own length. Measurements map back to the full vector through the split's
lineage, so a single least squares combines them (the same rows as HB-Striped_kron's Kronecker
strategy, measured stripe by stripe).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction


from ..operators.matrix import Matrix
from ..operators import measure
from ..operators.client import Handle
from ..operators.measurement import Measurement
from ..operators.estimate import VectorEstimate
from ..operators.partition import stripe
from ..operators.selection import classic
from ..operators.budget import Budget, epsilon_of
from .common import solved


def stripe_measurements(vector: Handle, dims: tuple[int, ...], epsilon: Fraction, attribute: int) -> list[Measurement]:
    """HB measured with ``epsilon`` on each stripe of ``vector`` along ``attribute``."""
    stripes = stripe(dims, attribute)  # checks the attribute
    strategy = classic.hb(dims[attribute]).matrix
    return [measure.laplace(part, strategy, epsilon) for part in vector.split_by_partition(stripes.labels)]


def hb_striped(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
               attribute: int = 0) -> VectorEstimate:
    """HB-Striped: per-stripe HB with the whole budget (parallel composition), one least squares."""
    vector, dims = measure.data_vector(source, shape)
    return solved(stripe_measurements(vector, dims, epsilon_of(budget), attribute), vector.size, workload)
