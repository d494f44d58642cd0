"""Decompose linear queries on marginals into orthogonal per-residual subworkloads (Sec. 6.2).

A query ``q`` on the marginal of attribute set ``A`` (a tensor with one axis per attribute)
splits into subqueries ``q=>A'`` for ``A' subset A``: average ``q`` over the axes not in
``A'``, then centre it along every kept axis. ``q . x_A = sum_A' q=>A' . x_A'`` (Thm 2), and
subqueries on different ``A'`` are orthogonal over the full domain, so each subworkload gets
its own mechanism and the variances add.

Selection never decomposes queries one by one. The map is linear,
``q=>A' = T q`` with ``T = kron_{i in A} (C_i if i in A' else 1^T / d_i)``
(``C = I - 11^T/d``), so the subworkload is known by its weighted Gram
``G_A' = sum T G_A T^T`` over the workload entries on supersets ``A`` of ``A'``. A query
matrix is read as a sum of Kronecker terms ``coef * kron_g G_g`` over groups ``g`` of its
attributes (one group per Kronecker factor; a dense or unrecognised matrix is one group),
and ``T`` acts group by group. Group Grams and their reductions are interned by content in
a :class:`GramStore`, so a subworkload is a small dictionary ``{parts: coef}`` whose
canonical key recognises equal subworkloads (e.g. every pair of a 2-way prefix workload),
which are then solved once.

Attribute subsets are sorted tuples of domain positions; attributes of size 1 never
appear in an ``A'`` (their centred space is empty), as in :mod:`operators.residual`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Union

import numpy as np
import scipy.sparse as sp

from ....kernel.domain import Domain
from ...matrix import Kronecker, Matrix, Sparse, VStack, Weighted
from ... import algebra

Subset = tuple[int, ...]
QueryMatrix = Union[Matrix, np.ndarray]
#: (local positions in A', interned Gram id) for each factor of one Kronecker term.
Parts = tuple[tuple[tuple[int, ...], int], ...]
#: One group of a source term: (sorted domain positions, Gram over them in C order).
Group = tuple[tuple[int, ...], np.ndarray]

#: A reduced Gram whose entries are all below this fraction of its source's is zero.
ZERO_TOL = 1e-12


# ---------------------------------------------------------------------------------------
# Single queries
# ---------------------------------------------------------------------------------------
def subqueries(rows: np.ndarray, keep: Sequence[bool]) -> np.ndarray:
    """``q=>A'`` for a batch of queries ``(k, d_1, ..., d_r)``; ``keep[m]`` says if axis ``m`` is in ``A'``.

    Returns ``(k, kept sizes...)``: the mean over the dropped axes, centred along each kept axis.
    """
    drop = tuple(1 + m for m, kept in enumerate(keep) if not kept)
    out = rows.mean(axis=drop) if drop else np.array(rows, dtype=np.float64)
    for axis in range(1, out.ndim):
        out = out - out.mean(axis=axis, keepdims=True)
    return out


def reduce_gram(gram: np.ndarray, sizes: Sequence[int], keep: Sequence[bool]) -> np.ndarray:
    """``T G T^T`` for a Gram over ``sizes`` (C order): mean over dropped axes, centre kept ones."""
    r = len(sizes)
    t = np.asarray(gram, dtype=np.float64).reshape(tuple(sizes) * 2)
    drop = [m for m in range(r) if not keep[m]]
    if drop:
        t = t.mean(axis=tuple(drop) + tuple(r + m for m in drop))
    for axis in range(t.ndim):
        t = t - t.mean(axis=axis, keepdims=True)
    n = math.prod(s for s, kept in zip(sizes, keep) if kept)
    return t.reshape(n, n)


# ---------------------------------------------------------------------------------------
# Interned Grams
# ---------------------------------------------------------------------------------------
class GramStore:
    """Group Grams interned by content (rounded to ~11 digits), with cached reductions.

    ``sizes[i]`` and ``grams[i]`` describe Gram id ``i``; :meth:`reduce` maps a Gram and a
    keep-mask to the id of ``T G T^T``, or to ``None`` when that is zero; :meth:`mean_square`
    is the reduction to the empty set (a scalar: ``1^T G 1 / N^2``).
    """

    def __init__(self) -> None:
        self.grams: list[np.ndarray] = []
        self.sizes: list[tuple[int, ...]] = []
        self._ids: dict[tuple, int] = {}
        self._reduced: dict[tuple[int, tuple[bool, ...]], int | None] = {}
        self._mean_square: dict[int, float] = {}

    def intern(self, gram: np.ndarray, sizes: Sequence[int]) -> int:
        """The id of ``gram`` (over attribute ``sizes``), new unless an equal one was interned before."""
        sizes = tuple(int(s) for s in sizes)
        scale = float(np.max(np.abs(gram)))
        rounded = np.round(gram / scale, 11) if scale > 0 else gram
        digest = hashlib.blake2b(np.ascontiguousarray(rounded).tobytes(), digest_size=20).digest()
        key = (sizes, f"{scale:.11e}", digest)
        if key not in self._ids:
            self._ids[key] = len(self.grams)
            self.grams.append(np.asarray(gram, dtype=np.float64))
            self.sizes.append(sizes)
        return self._ids[key]

    def reduce(self, gram_id: int, keep: tuple[bool, ...]) -> int | None:
        """Id of the Gram reduced to the kept axes (at least one kept), ``None`` if it vanishes."""
        key = (gram_id, keep)
        if key not in self._reduced:
            source = self.grams[gram_id]
            reduced = reduce_gram(source, self.sizes[gram_id], keep)
            if np.max(np.abs(reduced), initial=0.0) <= ZERO_TOL * np.max(np.abs(source)):
                self._reduced[key] = None
            else:
                kept = tuple(s for s, k in zip(self.sizes[gram_id], keep) if k)
                self._reduced[key] = self.intern(reduced, kept)
        return self._reduced[key]

    def mean_square(self, gram_id: int) -> float:
        """``1^T G 1 / N^2``: the weighted sum of squared query means (the reduction to the empty set)."""
        if gram_id not in self._mean_square:
            self._mean_square[gram_id] = float(self.grams[gram_id].mean())
        return self._mean_square[gram_id]

    def tensor(self, gram_id: int) -> np.ndarray:
        """The Gram as a tensor with axes (rows..., columns...)."""
        return self.grams[gram_id].reshape(self.sizes[gram_id] * 2)


# ---------------------------------------------------------------------------------------
# Workload entries
# ---------------------------------------------------------------------------------------
@dataclass
class Entry:
    """One workload item: queries (rows of ``matrix``) on the marginal of ``attributes``.

    ``attributes`` are domain positions in the order the matrix's columns use (C order);
    ``subset`` is the same set sorted; ``order`` transposes a tensor over ``attributes``
    into ``subset`` order. ``weights`` is a scalar or one weight per row.
    """

    attributes: tuple[int, ...]
    matrix: QueryMatrix
    weights: float | np.ndarray
    sizes: tuple[int, ...] = field(init=False)
    subset: Subset = field(init=False)
    order: tuple[int, ...] = field(init=False)
    rows: int = field(init=False)

    def bind(self, domain: Domain) -> Entry:
        """Resolve sizes and the sorted order on ``domain``; check the matrix's width."""
        self.sizes = tuple(domain.sizes[a] for a in self.attributes)
        self.order = tuple(int(i) for i in np.argsort(self.attributes, kind="stable"))
        self.subset = tuple(self.attributes[i] for i in self.order)
        m, n = self.matrix.shape
        if n != math.prod(self.sizes):
            raise ValueError(
                f"query matrix on attributes {self.attributes} has {n} columns; the marginal has "
                f"{math.prod(self.sizes)} cells"
            )
        self.rows = int(m)
        return self

    def dense_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as a dense tensor over ``subset`` (sorted) axes: ``(k, sizes...)``."""
        if isinstance(self.matrix, Matrix):
            block = algebra.rows(self.matrix, np.arange(start, stop))
        else:
            block = np.asarray(self.matrix[start:stop], dtype=np.float64)
        t = block.reshape((stop - start, *self.sizes))
        return t.transpose([0] + [i + 1 for i in self.order])


def as_entry(
    domain: Domain,
    attributes: Iterable[str | int] | str | int,
    matrix: QueryMatrix | sp.spmatrix,
    weights: float | Sequence[float] | np.ndarray,
) -> Entry:
    """Validate one ``(attributes, matrix)`` item and its weight(s)."""
    if isinstance(attributes, (str, int, np.integer)):
        attributes = (attributes,)
    positions = domain.indices(attributes)
    if sp.issparse(matrix):
        matrix = Sparse(matrix)
    elif not isinstance(matrix, Matrix):
        matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
        if matrix.ndim != 2 or not np.all(np.isfinite(matrix)):
            raise ValueError(f"query matrix on {tuple(attributes)} must be a finite 2-D array")
    if np.ndim(weights) == 0:
        w: float | np.ndarray = float(weights)
        ok = math.isfinite(w) and w >= 0
    else:
        w = np.asarray(weights, dtype=np.float64).ravel()
        ok = w.shape == (matrix.shape[0],) and bool(np.all(np.isfinite(w) & (w >= 0)))
    if not ok:
        raise ValueError(f"weights for the queries on {tuple(attributes)} must be finite, >= 0, one per query or one")
    return Entry(tuple(positions), matrix, w).bind(domain)


# ---------------------------------------------------------------------------------------
# Source terms: the Gram of an entry as a sum of Kronecker products over groups of attributes
# ---------------------------------------------------------------------------------------
def _dense(matrix: QueryMatrix) -> np.ndarray:
    return matrix.dense() if isinstance(matrix, Matrix) else matrix


def _structured(matrix: QueryMatrix, sizes: tuple[int, ...], cache: dict) -> list[tuple[float, list[Group]]]:
    """``Q^T Q`` as ``[(coef, [(axes, Gram over those axes)])]``, Kronecker structure recognised."""
    everything = tuple(range(len(sizes)))
    if isinstance(matrix, Weighted):
        return [(c * matrix.weight**2, g) for c, g in _structured(matrix.base, sizes, cache)]
    if isinstance(matrix, VStack):
        return [term for block in matrix.blocks for term in _structured(block, sizes, cache)]
    if isinstance(matrix, Kronecker):
        groups, axis = [], 0
        for factor in matrix.factors:
            start, cells = axis, 1
            while axis < len(sizes) and (axis == start or cells < factor.shape[1]):
                cells *= sizes[axis]
                axis += 1
            if cells != factor.shape[1]:
                break
            groups.append((tuple(range(start, axis)), _gram(factor, cache)))
        else:
            if axis == len(sizes):
                return [(1.0, groups)]
    return [(1.0, [(everything, _gram(matrix, cache))])]


def _gram(matrix: QueryMatrix, cache: dict) -> np.ndarray:
    """``Q^T Q`` (dense), cached per matrix object (class builders reuse their blocks)."""
    key = id(matrix)
    if key not in cache:
        if isinstance(matrix, Matrix):
            cache[key] = (matrix, algebra.gram(matrix).dense())
        else:
            cache[key] = (matrix, matrix.T @ matrix)
    return cache[key][1]


def source_terms(entry: Entry, store: GramStore, cache: dict) -> list[tuple[float, list[tuple[Subset, int]]]]:
    """The entry's weighted Gram as ``[(coef, [(sorted domain positions, Gram id)])]``.

    ``cache`` (shared by the entries of one workload) keeps block Grams and their ids, so a
    block used by many entries is multiplied out and interned once.
    """
    if isinstance(entry.weights, np.ndarray):
        q = _dense(entry.matrix)
        gram = q.T @ (entry.weights[:, None] * q)
        cache[id(gram)] = (gram, gram)  # keep it alive while its id is a cache key
        raw = [(1.0, [(tuple(range(len(entry.sizes))), gram)])]
    else:
        raw = [(c * entry.weights, g) for c, g in _structured(entry.matrix, entry.sizes, cache)]
    terms = []
    for coef, groups in raw:
        if coef == 0:
            continue
        parts = []
        for axes, gram in groups:
            order = sorted(axes, key=lambda m: entry.attributes[m])
            sizes = tuple(entry.sizes[m] for m in order)
            key = ("id", id(gram), tuple(order), tuple(axes), sizes)
            if key not in cache:
                perm = [axes.index(m) for m in order]
                t = gram.reshape(tuple(entry.sizes[m] for m in axes) * 2)
                t = t.transpose(perm + [len(axes) + p for p in perm])
                n = math.prod(sizes)
                cache[key] = store.intern(t.reshape(n, n), sizes)
            parts.append((tuple(entry.attributes[m] for m in order), cache[key]))
        terms.append((coef, parts))
    return terms


# ---------------------------------------------------------------------------------------
# Subworkloads
# ---------------------------------------------------------------------------------------
@dataclass
class Subworkload:
    """The Gram of the subworkload on ``subset``: ``sum coef * kron(parts)`` (see module doc)."""

    subset: Subset
    shape: tuple[int, ...]
    terms: dict[Parts, float] = field(default_factory=dict)

    def key(self) -> Hashable:
        """Equal keys mean equal Grams (coefficients compared to 12 significant digits)."""
        return canonical_key(self.shape, self.terms)


def canonical_key(shape: tuple[int, ...], terms: dict[Parts, float]) -> Hashable:
    return shape, tuple(sorted((parts, float(f"{coef:.12g}")) for parts, coef in terms.items()))


def decompose(domain: Domain, entries: Sequence[Entry], store: GramStore) -> dict[Subset, Subworkload]:
    """Every non-zero subworkload of the workload, keyed by ``A'`` (sorted positions)."""
    sizes = domain.sizes
    out: dict[Subset, Subworkload] = {}
    cache: dict = {}
    for entry in entries:
        nontrivial = [a for a in entry.subset if sizes[a] > 1]
        for coef, groups in source_terms(entry, store, cache):
            for mask in range(1 << len(nontrivial)):
                kept = {a for j, a in enumerate(nontrivial) if mask >> j & 1}
                c, parts = coef, []
                for positions, gram_id in groups:
                    keep = tuple(a in kept for a in positions)
                    if not any(keep):
                        c *= store.mean_square(gram_id)
                        continue
                    reduced = store.reduce(gram_id, keep)
                    if reduced is None:
                        c = 0.0
                        break
                    parts.append((tuple(a for a in positions if a in kept), reduced))
                if c == 0.0:
                    continue
                subset = tuple(sorted(kept))
                local = {a: i for i, a in enumerate(subset)}
                key = tuple(sorted((tuple(local[a] for a in pos), gid) for pos, gid in parts))
                if subset not in out:
                    out[subset] = Subworkload(subset, tuple(sizes[a] for a in subset))
                terms = out[subset].terms
                terms[key] = terms.get(key, 0.0) + c
    return out
