"""Tables over attribute sets: numpy arrays whose axes are the attributes of a sorted tuple of positions.

Every graphical-model routine works on such tables (log-potentials, messages, marginals). A table over
``attrs`` is broadcast to a superset by inserting length-1 axes, and reduced to a subset by summing (or
log-sum-exp'ing) the other axes; the attribute order is always the domain order, so no transposes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Clique = tuple[int, ...]


def shape_of(attrs: Clique, sizes: Sequence[int]) -> tuple[int, ...]:
    return tuple(sizes[i] for i in attrs)


def expand(table: np.ndarray, attrs: Clique, target: Clique, sizes: Sequence[int]) -> np.ndarray:
    """``table`` over ``attrs`` as a broadcastable view over ``target`` (a sorted superset)."""
    return table.reshape([sizes[i] if i in attrs else 1 for i in target])


def summed_axes(attrs: Clique, keep: Clique, offset: int = 0) -> tuple[int, ...]:
    """Axes of a table over ``attrs`` (shifted by ``offset`` leading axes) that are not in ``keep``."""
    return tuple(k + offset for k, i in enumerate(attrs) if i not in keep)


def logsumexp(table: np.ndarray, axes: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """log(sum(exp(table))) over ``axes``, stable for large values (tables here are finite)."""
    if not axes:
        return table
    top = table.max(axis=axes, keepdims=True)
    out = np.log(np.exp(table - top).sum(axis=axes, keepdims=True)) + top
    return out if keepdims else out.squeeze(axis=axes)


def log_marginal(table: np.ndarray, attrs: Clique, keep: Clique) -> np.ndarray:
    """A log-table over ``attrs`` reduced to the subset ``keep`` by log-sum-exp."""
    return logsumexp(table, summed_axes(attrs, keep))


def sample_conditional(table: np.ndarray, given: np.ndarray, rng: np.random.Generator,
                       chunk: int = 1 << 22) -> np.ndarray:
    """For each row ``r``, a cell index drawn with probabilities proportional to ``table[given[r]]``.

    ``table``: (conditioning cells, new cells), non-negative; a row of zeros draws uniformly. Inverse CDF
    on the row's cumulative sums, a chunk of rows at a time (chunk = rows x new cells entries).
    """
    table = np.asarray(table, dtype=np.float64)
    sums = table.sum(axis=1, keepdims=True)
    probability = np.where(sums > 0, table / np.where(sums > 0, sums, 1.0), 1.0 / table.shape[1])
    cumulative = np.cumsum(probability, axis=1)
    cumulative[:, -1] = 1.0
    out = np.empty(given.size, dtype=np.int64)
    step = max(1, chunk // table.shape[1])
    for start in range(0, given.size, step):
        rows = given[start : start + step]
        u = rng.random(rows.size)
        out[start : start + step] = (cumulative[rows] < u[:, None]).sum(axis=1)
    return out
