"""PrivBayes's Bayesian network (Zhang, Cormode, Procopiuc, Srivastava, Xiao 2014/2017), chosen through the kernel.

The client proposes, the kernel picks: a first attribute by a public coin, then for every further attribute one
``privbayes_select`` request whose candidates are each unplaced attribute with parents among the placed ones
(docs/privacy/privbayes.md). The conditional marginals {child} + parents are then measured with Laplace noise.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from itertools import combinations

import numpy as np

from .matrix import Identity
from . import measure
from .client import Handle
from .measurement import Measurement
from .privacy import split_amount

Network = list[tuple[str, tuple[str, ...]]]
"""(child, parents) per attribute, in the order they were placed."""

MAX_CANDIDATES = 1 << 12
"""The most candidates one kernel request takes; a step with more considers a public random sample of them."""


def network(source: Handle, epsilon: float | Fraction | str, *, degree: int = 2, max_cells: int = 10_000,
            seed: int | None = None) -> Network:
    """A Bayesian network over the table's attributes, each attribute's parents chosen privately.

    ``epsilon``: the whole selection's budget, split evenly over the d - 1 kernel requests. ``degree``: the most
    parents an attribute gets (PrivBayes's k); ``max_cells``: the largest conditional table (child and parents'
    cells) a candidate may have, so that each keeps enough records per cell to measure (fewer parents are proposed
    when none of ``degree`` fit). ``seed``: the public coins (first attribute, candidate samples).
    """
    if source.kind != "table" or source.domain is None:
        raise ValueError("PrivBayes chooses a network over a table's attributes: give the table handle (session.source)")
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 0:
        raise ValueError(f"degree must be a whole number >= 0, got {degree!r}")
    sizes = dict(zip(source.domain.names, source.domain.sizes))
    if not max_cells >= max(sizes.values()):
        raise ValueError(f"max_cells {max_cells} is below the largest attribute ({max(sizes.values())} values): "
                         "every attribute's own table must fit")
    rng = np.random.default_rng(seed)
    names = list(sizes)
    first = names[int(rng.integers(len(names)))]
    chosen: Network = [(first, ())]
    for step in split_amount(epsilon, [1] * (len(names) - 1)) if len(names) > 1 else []:
        placed = [child for child, _ in chosen]
        candidates = _candidates(placed, [n for n in names if n not in placed], sizes, degree, max_cells)
        if len(candidates) > MAX_CANDIDATES:
            candidates = [candidates[i] for i in sorted(rng.choice(len(candidates), MAX_CANDIDATES, replace=False))]
        chosen.append(candidates[source.privbayes_select(candidates, step)])
    return chosen


def _candidates(placed: list[str], rest: list[str], sizes: dict[str, int], degree: int,
                max_cells: int) -> list[tuple[str, tuple[str, ...]]]:
    """Every (child, parents): a child not yet placed, parents the largest number (at most ``degree``) of placed
    attributes whose table with the child fits in ``max_cells``."""
    out = []
    for child in rest:
        for k in range(min(degree, len(placed)), -1, -1):
            fitting = [ps for ps in combinations(placed, k) if sizes[child] * math.prod(sizes[q] for q in ps) <= max_cells]
            if fitting:
                out += [(child, ps) for ps in fitting]
                break
    return out


def cliques(chosen: Network, names: Sequence[str]) -> list[tuple[int, ...]]:
    """The network's conditional tables {child} + parents as attribute positions (domain order), leaving out
    those inside another (the first attributes' tables sit inside the later ones')."""
    sets = [tuple(sorted(names.index(a) for a in (child, *parents))) for child, parents in chosen]
    return [s for i, s in enumerate(sets)
            if not any(set(s) < set(t) or (s == t and j < i) for j, t in enumerate(sets) if j != i)]


def measure_cliques(source: Handle, tables: Sequence[tuple[int, ...]], epsilon: float | Fraction | str
                    ) -> list[Measurement]:
    """Laplace-noised counts of each marginal in ``tables`` (attribute positions), epsilon split evenly (each
    marginal's sensitivity is 1: sequential composition). Each measurement carries its ``attributes``."""
    names = source.domain.names
    handles = source.vectorize_many([[names[i] for i in t] for t in tables])
    shares = split_amount(epsilon, [1] * len(tables))
    return [dataclasses.replace(measure.laplace(h, Identity(h.size), share), attributes=t)
            for h, t, share in zip(handles, tables, shares)]
