"""Helpers several test files share, kept in one place: neighbouring count vectors, a skewed table with its true
data vector, and random predicate trees."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from hypothesis import strategies as st

import ektelo_ng as ek
from ektelo_ng.kernel.predicate import And, Not, Or


def neighbours(x: np.ndarray) -> Iterator[np.ndarray]:
    """Every count vector one record away from ``x``: one more in a cell, or one fewer where a cell has one."""
    for j in range(x.size):
        yield x + np.eye(x.size)[j]
        if x[j] >= 1:
            yield x - np.eye(x.size)[j]


def spiky_table(shape: tuple[int, ...], rows: int = 2000, seed: int = 0) -> tuple[dict[str, np.ndarray], ek.Domain]:
    """``rows`` records over attributes a0, a1, ... of ``shape``, each drawn geometric (most mass in low cells)."""
    rng = np.random.default_rng(seed)
    names = [f"a{i}" for i in range(len(shape))]
    columns = {n: np.minimum(rng.geometric(4.0 / s, rows) - 1, s - 1) for n, s in zip(names, shape)}
    return columns, ek.Domain.from_dict(dict(zip(names, shape)))


def true_vector(columns: dict[str, np.ndarray], domain: ek.Domain) -> np.ndarray:
    """The table's data vector (counts per cell, row-major) computed directly with numpy."""
    flat = np.ravel_multi_index([columns[n] for n in domain.names], domain.sizes)
    return np.bincount(flat, minlength=domain.size)


def predicate_trees(leaf: st.SearchStrategy, max_leaves: int) -> st.SearchStrategy:
    """Predicates built from ``leaf`` comparisons by and, or and not, up to ``max_leaves`` leaves."""
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(And, terms=st.lists(inner, min_size=1, max_size=3)),
            st.builds(Or, terms=st.lists(inner, min_size=1, max_size=3)),
            st.builds(Not, term=inner),
        ),
        max_leaves=max_leaves,
    )
