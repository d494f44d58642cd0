"""The DPBench workloads by name, built for a domain shape with a seed.

``Prefix`` (the 1-D CDF: DPBench's 1-D workload), ``RandomRange`` (2,000 random boxes: DPBench's
2-D workload; also 1-D), ``Identity`` (every cell) and ``AllRange`` (every interval; in 2-D every
box, as a Kronecker product). ``default_workload`` picks DPBench's choice for the dimensionality.

>>> build("Prefix", (16,), seed=0).shape
(16, 16)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ektelo_ng.operators.matrix import Matrix
from ektelo_ng.operators.workload import AllRange, Identity, Kronecker, Prefix, RandomRange

#: DPBench's random range workload size.
RANDOM_RANGE_QUERIES = 2000


def _prefix(shape: tuple[int, ...], seed: int) -> Matrix:
    if len(shape) != 1:
        raise ValueError(f"the Prefix workload is 1-D; the domain is {shape} (use RandomRange in 2-D)")
    return Prefix(shape[0])


def _all_range(shape: tuple[int, ...], seed: int) -> Matrix:
    return AllRange(shape[0]) if len(shape) == 1 else Kronecker([AllRange(n) for n in shape])


WORKLOADS: dict[str, Callable[[tuple[int, ...], int], Matrix]] = {
    "Prefix": _prefix,
    "RandomRange": lambda shape, seed: RandomRange(shape, RANDOM_RANGE_QUERIES, seed),
    "Identity": lambda shape, seed: Identity(math.prod(shape)),
    "AllRange": _all_range,
}


def default_workload(dimensions: int) -> str:
    """DPBench's workload for 1-D (Prefix) and 2-D (RandomRange) data."""
    return "Prefix" if dimensions == 1 else "RandomRange"


def build(name: str, shape: Sequence[int], seed: int) -> Matrix:
    """The workload ``name`` over a domain of ``shape`` (RandomRange draws its queries with ``seed``)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {list(WORKLOADS)}")
    return WORKLOADS[name](tuple(int(s) for s in shape), int(seed))
