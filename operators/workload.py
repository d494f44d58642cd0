"""Workloads: the linear queries an analyst wants answered, as implicit matrices.

Everything here is public (no data): builders on top of the kernel's matrix classes,
with the DPBench workloads (Prefix, RandomRange) and the marginal families used by HDMM,
ResidualPlanner and QuerySmasher.

>>> W = AllKway([2, 3, 4], 2)
>>> W.shape
(26, 24)
>>> RandomRange((8, 8), 5, seed=0).shape
(5, 64)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

import numpy as np

from .domains import DomainLike, as_domain
from .matrix import (
    AllRange,
    Identity,
    Intervals,
    Kronecker,
    Matrix,
    Ranges,
    Total,
    VStack,
)
from .matrices import MarginalStack, Prefix, WidthRange

__all__ = [
    "AllKway", "AllRange", "Identity", "Kronecker", "Marginals", "Prefix", "RandomRange", "RangeQueries", "Total",
    "VStack", "WidthRange", "marginal_queries", "prefix_marginals", "range_marginals",
]

Block = Literal["identity", "prefix", "range"]
_BLOCKS = {"identity": Identity, "prefix": Prefix, "range": AllRange}


def RangeQueries(shape: int | Sequence[int], lo, hi) -> Matrix:
    """Range queries [lo, hi] (inclusive) over a 1-D domain of size ``shape`` or boxes over a d-D shape."""
    if isinstance(shape, (int, np.integer)) or len(shape) == 1:
        n = int(shape) if isinstance(shape, (int, np.integer)) else int(shape[0])
        return Intervals(n, np.ravel(lo), np.ravel(hi))
    return Ranges(shape, lo, hi)


def RandomRange(shape: int | Sequence[int], count: int, seed: int | None = None) -> Matrix:
    """DPBench's random range workload: ``count`` boxes, each drawn as DPBench draws them.

    For every query, in turn, from one ``numpy.random.RandomState(seed)`` stream: each side's length
    uniformly in ``1..n`` (``n`` that dimension's size), then each side's lower end uniformly among the
    placements that fit, ``0..n - length``. A side covers (n + 1) / 2n of its dimension on average, so
    a box covers about a quarter of a 2-D domain. With DPBench's seed the boxes are DPBench's own.
    """
    dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if int(count) < 1:
        raise ValueError(f"count must be a positive number of queries, got {count}")
    stream = np.random.RandomState(seed)  # the legacy generator: its draws are DPBench's, call for call
    lo = np.empty((int(count), len(dims)), dtype=np.int64)
    hi = np.empty_like(lo)
    for q in range(int(count)):
        lengths = [stream.randint(1, n + 1) for n in dims]
        for i, (n, length) in enumerate(zip(dims, lengths)):
            lo[q, i] = stream.randint(0, n - length + 1)
            hi[q, i] = lo[q, i] + length - 1
    return RangeQueries(dims if len(dims) > 1 else dims[0], lo, hi)


def _subset(domain, attributes: Iterable[str | int]) -> tuple[int, ...]:
    return tuple(sorted(domain.indices(attributes)))


def Marginals(domain: DomainLike, subsets: Iterable[Iterable[str | int]] | Mapping) -> Matrix:
    """The marginals on the given attribute subsets (names or positions); a mapping gives weights."""
    domain = as_domain(domain)
    if isinstance(subsets, Mapping):
        weights = {_subset(domain, s): float(w) for s, w in subsets.items()}
    else:
        weights = {_subset(domain, s): 1.0 for s in subsets}
    return MarginalStack(domain.sizes, weights)


def AllKway(domain: DomainLike, k: int) -> Matrix:
    """All k-way marginals of the domain."""
    domain = as_domain(domain)
    if not 0 <= k <= len(domain):
        raise ValueError(f"k must be between 0 and the number of attributes ({len(domain)}), got {k}")
    return Marginals(domain, itertools.combinations(range(len(domain)), k))


def marginal_queries(
    domain: DomainLike,
    subsets: Iterable[Iterable[str | int]],
    blocks: Mapping[str | int, Block] | None = None,
) -> Matrix:
    """For each subset, a Kronecker product with a query block on its attributes and Total elsewhere.

    ``blocks`` names the block per attribute ("identity" by default, "prefix" or "range").
    """
    domain = as_domain(domain)
    kinds = {domain.index(a): b for a, b in (blocks or {}).items()}
    unknown = sorted(set(kinds.values()) - set(_BLOCKS))
    if unknown:
        raise ValueError(f"unknown block kind {unknown}; use one of {sorted(_BLOCKS)}")
    products = []
    for subset in subsets:
        chosen = set(_subset(domain, subset))
        products.append(
            Kronecker(
                [_BLOCKS[kinds.get(i, "identity")](n) if i in chosen else Total(n) for i, n in enumerate(domain.sizes)]
            )
        )
    if not products:
        raise ValueError("give at least one subset")
    return products[0] if len(products) == 1 else VStack(products)


def prefix_marginals(domain: DomainLike, k: int, numeric: Iterable[str | int]) -> Matrix:
    """All k-way queries: prefix (CDF) blocks on numeric attributes, identity on the others."""
    domain = as_domain(domain)
    return marginal_queries(domain, itertools.combinations(range(len(domain)), k), {a: "prefix" for a in numeric})


def range_marginals(domain: DomainLike, k: int, numeric: Iterable[str | int]) -> Matrix:
    """All k-way queries: all-range blocks on numeric attributes, identity on the others."""
    domain = as_domain(domain)
    return marginal_queries(domain, itertools.combinations(range(len(domain)), k), {a: "range" for a in numeric})
