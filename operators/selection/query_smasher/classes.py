"""The query classes of the QuerySmasher experiments, and workloads built from them.

Per attribute of size ``n``: ``marginal`` (``n`` indicators), ``prefix`` (``A <= c``,
``c = 0..n-1``), ``range`` (every ``[c1, c2]``, ``n(n+1)/2``), ``circular`` (start x length,
``n^2``: cells ``s, s+1, ..., s+l-1 mod n`` for ``l = 1..n``). Multi-attribute queries of
these classes are Kronecker products of the per-attribute blocks (recognised by the
decomposition, so their subworkloads factorise). Two-attribute classes: ``affine``
(``A_i + A_j <= c``, ``c = 0..n_i+n_j-2``) and ``abs`` (``|A_i - A_j| <= c``,
``c = 0..max(n)-1``); as in the paper, their "1-way" part is 1-way prefix. ``random``: 0/1
entries with probability 0.3, three times as many queries as the view has cells, drawn
per view from ``seed``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Literal

import numpy as np

from ...domains import DomainLike, as_domain
from ...matrix import AllRange, Dense, Identity, Kronecker, Matrix
from ...matrices import Prefix

QueryClass = Literal["marginal", "prefix", "range", "circular", "affine", "abs", "random"]
CLASSES = ("marginal", "prefix", "range", "circular", "affine", "abs", "random")


def circular_ranges(n: int) -> Dense:
    """Every circular range (start ``s``, length ``l = 1..n``), row ``s * n + (l - 1)``."""
    cells = np.arange(n)
    rows = [np.isin(cells, (s + np.arange(length)) % n) for s in range(n) for length in range(1, n + 1)]
    return Dense(np.array(rows, dtype=np.float64))


def affine_queries(n1: int, n2: int) -> Dense:
    """``A_1 + A_2 <= c`` for ``c = 0..n1+n2-2`` over the ``n1 x n2`` marginal."""
    total = np.add.outer(np.arange(n1), np.arange(n2)).ravel()
    return Dense((total[None, :] <= np.arange(n1 + n2 - 1)[:, None]).astype(np.float64))


def abs_queries(n1: int, n2: int) -> Dense:
    """``|A_1 - A_2| <= c`` for ``c = 0..max(n1, n2)-1`` over the ``n1 x n2`` marginal."""
    gap = np.abs(np.subtract.outer(np.arange(n1), np.arange(n2))).ravel()
    return Dense((gap[None, :] <= np.arange(max(n1, n2))[:, None]).astype(np.float64))


def random_queries(sizes: tuple[int, ...], rng: np.random.Generator, p: float = 0.3, factor: int = 3) -> Dense:
    """``factor * cells`` random 0/1 queries (each entry 1 with probability ``p``) on a view."""
    cells = math.prod(sizes)
    return Dense((rng.random((factor * cells, cells)) < p).astype(np.float64))


class _Blocks:
    """One block object per (class, size), so the decomposition computes each block's Gram once."""

    _MAKERS = {"marginal": Identity, "prefix": Prefix, "range": AllRange, "circular": circular_ranges}

    def __init__(self) -> None:
        self._made: dict[tuple, Matrix] = {}

    def __call__(self, kind: str, *sizes: int) -> Matrix:
        key = (kind, sizes)
        if key not in self._made:
            if kind in self._MAKERS:
                self._made[key] = self._MAKERS[kind](*sizes)
            else:
                self._made[key] = {"affine": affine_queries, "abs": abs_queries}[kind](*sizes)
        return self._made[key]


def class_queries(
    kind: QueryClass, sizes: tuple[int, ...], rng: np.random.Generator | None = None, blocks: _Blocks | None = None
) -> Matrix:
    """The queries of class ``kind`` on one view with attribute ``sizes`` (``blocks``: a shared block cache)."""
    blocks = blocks or _Blocks()
    if kind in _Blocks._MAKERS:
        return Kronecker([blocks(kind, n) for n in sizes])
    if kind in ("affine", "abs"):
        if len(sizes) == 1:
            return Kronecker([blocks("prefix", sizes[0])])
        if len(sizes) != 2:
            raise ValueError(f"the {kind} class has 1-way (prefix) and 2-way queries only, not {len(sizes)}-way")
        return blocks(kind, *sizes)
    if kind == "random":
        return random_queries(sizes, rng if rng is not None else np.random.default_rng())
    raise ValueError(f"unknown query class {kind!r}; use one of {CLASSES}")


def query_class_workload(
    domain: DomainLike, kind: QueryClass, ways: Iterable[int] = (1, 2), seed: int | None = 0
) -> list[tuple[tuple[int, ...], Matrix]]:
    """All ``k``-way queries of a class for each ``k`` in ``ways``: ``[(attributes, matrix)]``.

    E.g. ``query_class_workload([10] * 40, "prefix", ways=(1, 2))``; combine classes by
    concatenating lists (1-way range + 2-way affine + 3-way prefix).
    """
    domain = as_domain(domain)
    rng = np.random.default_rng(seed)
    blocks = _Blocks()
    out = []
    for k in ways:
        if not 0 < k <= len(domain):
            raise ValueError(f"ways must lie in 1..{len(domain)}, got {k}")
        for view in itertools.combinations(range(len(domain)), k):
            out.append((view, class_queries(kind, tuple(domain.sizes[a] for a in view), rng, blocks)))
    return out
