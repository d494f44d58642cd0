"""Tables over attribute sets: numpy arrays whose axes are the attributes of a sorted tuple of positions.

Every graphical-model routine works on such tables (log-potentials, messages, marginals). A table over
``attrs`` is broadcast to a superset by inserting length-1 axes, and reduced to a subset by summing (or
log-sum-exp'ing) the other axes; the attribute order is always the domain order, so no transposes.
"""

from __future__ import annotations

import math
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
    """log(sum(exp(table))) over ``axes``, stable for large values (tables here are finite). The summed axes are
    moved last and flattened first: numpy's reductions over scattered axes ran twice as slowly."""
    if not axes:
        return table
    kept = [a for a in range(table.ndim) if a not in axes]
    shape = [table.shape[a] for a in kept]
    flat = table.transpose(kept + list(axes)).reshape(math.prod(shape), -1)
    top = flat.max(axis=1, keepdims=True)
    scaled = flat - top
    np.exp(scaled, out=scaled)
    out = (np.log(scaled.sum(axis=1)) + top[:, 0]).reshape(shape)
    return np.expand_dims(out, axes) if keepdims else out


def log_marginal(table: np.ndarray, attrs: Clique, keep: Clique) -> np.ndarray:
    """A log-table over ``attrs`` reduced to the subset ``keep`` by log-sum-exp."""
    return logsumexp(table, summed_axes(attrs, keep))


def sample_conditional(table: np.ndarray, given: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each row ``r``, a cell index drawn with probabilities proportional to ``table[given[r]]``, by controlled
    rounding: the ``m`` rows sharing a conditioning cell with probabilities ``p`` get ``floor(m p_i)`` of each new
    cell, and the ``m - sum floor(m p)`` left over are placed by systematic sampling on the fractional parts (each
    cell gets one more with probability equal to its fractional part), in random order. Each cell's expected count
    is ``m p_i``, as for independent draws, but it is never more than one away: records keep the model's
    conditionals, hence its marginals, within rounding rather than within multinomial sampling error.

    ``table``: (conditioning cells, new cells), non-negative; a row of zeros is uniform.
    """
    table = np.asarray(table, dtype=np.float64)
    sums = table.sum(axis=1, keepdims=True)
    probability = np.where(sums > 0, table / np.where(sums > 0, sums, 1.0), 1.0 / table.shape[1])
    order = np.argsort(given, kind="stable")
    cells, sizes = np.unique(given[order], return_counts=True)
    expected = sizes[:, None] * probability[cells]
    base = np.floor(expected)
    left = sizes - base.sum(axis=1)  # rows still to place in each group
    offset = rng.random(cells.size)[:, None]  # systematic points at offset, offset + 1, ... below left
    reached = np.clip(np.floor(np.cumsum(expected - base, axis=1) - offset) + 1, 0, left[:, None])
    reached[:, -1] = left
    counts = (base + np.diff(reached, axis=1, prepend=0)).astype(np.int64)
    values = np.repeat(np.tile(np.arange(table.shape[1]), cells.size), counts.ravel())
    shuffled = np.lexsort((rng.random(values.size), np.repeat(np.arange(cells.size), sizes)))
    out = np.empty(given.size, dtype=np.int64)
    out[order] = values[shuffled]
    return out


class Reducer:
    """Every marginal of a table over ``attrs`` onto the sub-cliques ``targets`` at once, and the adjoint: tables
    on the targets broadcast back onto ``attrs`` and summed.

    The targets hang in a tree of single-axis sums: a node's children each drop one of its attributes (the
    largest first) and take the targets that lack it. Summing one axis is one fast pass, so the marginals of
    many small cliques of one big table cost a few passes over it instead of one slow multi-axis sum each
    (all 2-way marginals of the 280,000-cell CPS table: 3 passes instead of 16).
    """

    def __init__(self, attrs: Clique, targets: Sequence[Clique], sizes: Sequence[int]):
        self.attrs, self.shape = attrs, shape_of(attrs, sizes)
        self.targets = list(dict.fromkeys(targets))
        self._tree = self._build(attrs, self.targets, sizes)

    @staticmethod
    def _build(attrs: Clique, targets: list[Clique], sizes: Sequence[int]) -> tuple:
        """``(attrs, targets equal to attrs, [(dropped axis, child node)])``."""
        here = [t for t in targets if t == attrs]
        rest = [t for t in targets if t != attrs]
        children = []
        for axis in sorted(range(len(attrs)), key=lambda k: (-sizes[attrs[k]], k)):
            lacking = [t for t in rest if attrs[axis] not in t]
            if lacking:
                rest = [t for t in rest if attrs[axis] in t]
                child = attrs[:axis] + attrs[axis + 1:]
                children.append((axis, Reducer._build(child, lacking, sizes)))
        return attrs, here, children

    def marginals(self, table: np.ndarray) -> dict[Clique, np.ndarray]:
        """``{target: table summed onto it}`` (axes in domain order)."""
        out: dict[Clique, np.ndarray] = {}

        def walk(node: tuple, values: np.ndarray) -> None:
            attrs, here, children = node
            for target in here:
                out[target] = values
            for axis, child in children:
                kept = list(range(values.ndim))
                del kept[axis]
                walk(child, np.einsum(values, list(range(values.ndim)), kept))

        walk(self._tree, table)
        return out

    def expand(self, tables: dict[Clique, np.ndarray]) -> np.ndarray:
        """The sum of ``tables`` (on some of the targets, each shaped over its attributes) broadcast onto
        ``attrs``: the adjoint of :meth:`marginals` (a read-only broadcast view)."""

        def walk(node: tuple) -> np.ndarray | None:
            attrs, here, children = node
            total = None
            for target in here:
                if target in tables:
                    total = tables[target] if total is None else total + tables[target]
            for axis, child in children:
                part = walk(child)
                if part is not None:
                    part = np.expand_dims(part, axis)
                    total = part if total is None else total + part
            return total

        result = walk(self._tree)
        return np.broadcast_to(np.zeros(()) if result is None else result, self.shape)
