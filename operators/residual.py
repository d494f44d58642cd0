"""The residual basis of marginal workloads (ResidualPlanner, Xiao et al., 2023).

Shared by ResidualPlanner and QuerySmasher. A marginal on attribute set ``A`` is
``Q_A = kron_i V_i`` with ``V_i = I`` for ``i in A`` and ``1^T`` otherwise. Its *residual*
``R_A`` replaces ``I`` by ``Sub_{n_i}`` (``(n_i - 1) x n_i``: first column ones, entry
``(k, k + 1) = -1``), so it sees what ``Q_A`` adds on top of every sub-marginal. Residuals
of different sets are orthogonal and together span every marginal in a downward-closed
family, which is why they are the optimal measurements for marginal workloads.

Measuring ``R_A x + N(0, s_A Sigma_A)`` with ``Sigma_A = kron_{i in A} Sub Sub^T`` costs
``p_A / s_A`` (privacy cost, ``p_A = prod_{i in A} (n_i - 1) / n_i``); the reconstructed
marginal of ``A`` has every cell with variance
``sum_{A' subset A} s_A' p_A' prod_{j in A \\ A'} n_j^-2``.

Conventions: attribute subsets are sorted tuples of attribute positions; attributes of
size 1 never appear in a subset (their residual is empty and their marginal is the same as
without them; :func:`normalize_subset` drops them). Marginal vectors are flattened in C
order (last attribute fastest); a marginal tensor has one axis per attribute of ``A`` in
domain order. Everything here is implicit: no Kronecker product is ever expanded except by
the ``dense_*`` helpers meant for small domains and tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from ..kernel.domain import Domain

Subset = tuple[int, ...]


class UnmeasuredMarginalError(KeyError, ValueError):
    """A marginal that the measurements do not determine (the message says which and what to do)."""

    def __str__(self) -> str:
        return str(self.args[0])

# Temporaries (in float64 entries) allowed per batch when reconstructing many marginals: 2 MB, so the
# per-axis passes stay in cache (all 3-way marginals of 100 attributes of size 10: 3.9 s at 2^23, 2.9 s here).
_BATCH_ENTRIES = 1 << 18


# ---------------------------------------------------------------------------------------
# One attribute: Sub_m and its pseudo-inverse
# ---------------------------------------------------------------------------------------
def sub_matrix(m: int) -> np.ndarray:
    """``Sub_m``: the ``(m - 1) x m`` matrix with a first column of ones and ``-1`` at ``(k, k + 1)``."""
    if m < 2:
        raise ValueError(f"Sub_m needs m >= 2, got {m}")
    out = np.zeros((m - 1, m))
    out[:, 0] = 1.0
    out[np.arange(m - 1), np.arange(1, m)] = -1.0
    return out


def sub_pinv(m: int) -> np.ndarray:
    """``Sub_m^+ = (1/m) [1^T ; 11^T - m I]`` (``m x (m - 1)``), also a right inverse of ``Sub_m``."""
    if m < 2:
        raise ValueError(f"Sub_m needs m >= 2, got {m}")
    out = np.full((m, m - 1), 1.0 / m)
    out[1:] -= np.eye(m - 1)
    return out


def _sub_axis(x: np.ndarray, axis: int) -> np.ndarray:
    """Apply ``Sub`` along one axis: ``y_k = x_0 - x_{k+1}``."""
    first = [slice(None)] * x.ndim
    rest = [slice(None)] * x.ndim
    first[axis] = slice(0, 1)
    rest[axis] = slice(1, None)
    return x[tuple(first)] - x[tuple(rest)]


def _sub_pinv_axis(y: np.ndarray, axis: int) -> np.ndarray:
    """Apply ``Sub^+`` along one axis: ``[S/l, S/l - y_0, ..., S/l - y_{l-2}]`` with ``S = sum(y)``."""
    mean = y.sum(axis=axis, keepdims=True) / (y.shape[axis] + 1)
    return np.concatenate([mean, mean - y], axis=axis)


def apply_sub(tensor: np.ndarray, axes: Iterable[int]) -> np.ndarray:
    """Apply ``Sub_{n}`` along each of ``axes`` (the implicit Kronecker product ``kron Sub``)."""
    out = np.asarray(tensor, dtype=np.float64)
    for axis in axes:
        out = _sub_axis(out, axis)
    return out


def apply_sub_pinv(tensor: np.ndarray, axes: Iterable[int]) -> np.ndarray:
    """Apply ``Sub^+`` along each of ``axes`` (the implicit ``kron Sub^+``)."""
    out = np.asarray(tensor, dtype=np.float64)
    for axis in axes:
        out = _sub_pinv_axis(out, axis)
    return out


def residual_answers(marginal: np.ndarray, shape: Sequence[int] | None = None) -> np.ndarray:
    """``kron_{i in A} Sub_{n_i}`` applied to the marginal of ``A`` (``R_A x`` from ``Q_A x``).

    ``marginal`` is a tensor with one axis per attribute of ``A``, or a flat vector together
    with its ``shape``. Returns the flat vector of length ``prod (n_i - 1)``.
    """
    tensor = np.asarray(marginal, dtype=np.float64)
    if shape is not None:
        tensor = tensor.reshape(tuple(shape))
    return apply_sub(tensor, range(tensor.ndim)).ravel()


def batched_residual_answers(marginals: np.ndarray) -> np.ndarray:
    """:func:`residual_answers` for a stack of marginals of the same shape ``(K, n_1, ..., n_r)``.

    Returns ``(K, prod (n_i - 1))``.
    """
    tensor = np.asarray(marginals, dtype=np.float64)
    return apply_sub(tensor, range(1, tensor.ndim)).reshape(tensor.shape[0], -1)


def residual_pcost(sizes: Sequence[int]) -> float:
    """``p_A = prod (n_i - 1) / n_i``: the privacy cost of ``M_A`` at unit noise scale."""
    return math.prod((n - 1) / n for n in sizes)


# ---------------------------------------------------------------------------------------
# Dense matrices (small domains: tests, and the kernel's explicit measurement specs)
# ---------------------------------------------------------------------------------------
def _dense_kron(factors: Sequence[np.ndarray]) -> np.ndarray:
    out = np.ones((1, 1))
    for f in factors:
        out = np.kron(out, f)
    return out


def dense_marginal(sizes: Sequence[int], subset: Subset) -> np.ndarray:
    """``Q_A`` over the full domain (dense)."""
    return _dense_kron([np.eye(n) if i in subset else np.ones((1, n)) for i, n in enumerate(sizes)])


def dense_residual(sizes: Sequence[int], subset: Subset) -> np.ndarray:
    """``R_A`` over the full domain (dense)."""
    return _dense_kron([sub_matrix(n) if i in subset else np.ones((1, n)) for i, n in enumerate(sizes)])


def dense_residual_noise(sizes: Sequence[int], subset: Subset) -> np.ndarray:
    """``Sigma_A = kron_{i in A} Sub Sub^T = kron_{i in A} (I + 11^T)`` (dense)."""
    return _dense_kron([np.eye(sizes[i] - 1) + 1.0 for i in subset])


# ---------------------------------------------------------------------------------------
# Subset families
# ---------------------------------------------------------------------------------------
def normalize_subset(domain: Domain, attributes: Iterable[str | int] | str | int) -> Subset:
    """A marginal given by attribute names or positions, as a sorted tuple of positions.

    A bare name or position means a one-way marginal. Attributes of size 1 are dropped:
    their marginal equals the marginal without them, up to a reshape.
    """
    return SubsetNormalizer(domain)(attributes)


class SubsetNormalizer:
    """:func:`normalize_subset` for many marginals of one domain (fast path for int tuples)."""

    def __init__(self, domain: Domain):
        self.domain = domain
        self.sizes = domain.sizes
        self._d = len(self.sizes)
        self._trivial = any(n == 1 for n in self.sizes)

    def full(self, attributes: Iterable[str | int] | str | int) -> Subset:
        """Sorted positions, size-1 attributes kept."""
        if isinstance(attributes, (str, int, np.integer)):
            attributes = (attributes,)
        if type(attributes) is tuple and all(type(i) is int and 0 <= i < self._d for i in attributes):
            key = tuple(sorted(attributes))
            if len(set(key)) == len(key):
                return key
        return tuple(sorted(self.domain.indices(attributes)))

    def __call__(self, attributes: Iterable[str | int] | str | int) -> Subset:
        """Sorted positions without size-1 attributes."""
        key = self.full(attributes)
        if self._trivial:
            key = tuple(i for i in key if self.sizes[i] > 1)
        return key


def _row_keys(rows: np.ndarray, num_attributes: int) -> np.ndarray | None:
    """One int64 per row, increasing in lexicographic order, or None if it would overflow."""
    r = rows.shape[1]
    if r == 0:
        return np.zeros(rows.shape[0], dtype=np.int64)
    if max(num_attributes, 2) ** r >= 2**62:
        return None
    keys = rows[:, 0].astype(np.int64)
    for j in range(1, r):
        keys = keys * num_attributes + rows[:, j]
    return keys


def _unique_rows(rows: np.ndarray, num_attributes: int) -> np.ndarray:
    """Distinct rows of an int array, sorted lexicographically."""
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        return rows[:1] if rows.shape[0] else rows
    keys = _row_keys(rows, num_attributes)
    if keys is not None:
        _, first = np.unique(keys, return_index=True)
        return rows[first]
    ordered = rows[np.lexsort(rows.T[::-1])]
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    return ordered[keep]


class SubsetFamily:
    """A family of attribute subsets with dense ids and vectorised lookup.

    Sets are ordered by size, then lexicographically; ``rows(r)`` is the ``(m_r, r)`` int
    array of the sets of size ``r`` and their ids are ``offset(r) + arange(m_r)``. Built by
    :meth:`closure` for a workload, the family is downward closed (contains the empty set
    and every subset of every member), which is what the residual machinery needs.
    """

    def __init__(self, num_attributes: int, rows_by_size: Sequence[np.ndarray]):
        self.num_attributes = int(num_attributes)
        self._rows = [np.ascontiguousarray(r, dtype=np.int64).reshape(len(r), k) for k, r in enumerate(rows_by_size)]
        counts = [len(r) for r in self._rows]
        self._offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._keys = [_row_keys(r, self.num_attributes) for r in self._rows]

    @classmethod
    def closure(cls, subsets: Iterable[Subset], num_attributes: int) -> SubsetFamily:
        """Every subset (including the empty set) of every given sorted tuple."""
        by_size: dict[int, list[Subset]] = {}
        for s in subsets:
            by_size.setdefault(len(s), []).append(s)
        rows = {r: np.array(members, dtype=np.int64).reshape(len(members), r) for r, members in by_size.items()}
        return cls.closure_of_rows(rows, num_attributes)

    @classmethod
    def closure_of_rows(cls, rows_by_size: Mapping[int, np.ndarray], num_attributes: int) -> SubsetFamily:
        """:meth:`closure` for sets given as ``{r: (m_r, r) array of sorted positions}``."""
        top = max((r for r, rows in rows_by_size.items() if len(rows)), default=0)
        levels: list[np.ndarray] = [np.zeros((1, 0), dtype=np.int64)] + [np.zeros((0, r)) for r in range(1, top + 1)]
        below = np.zeros((0, top + 1), dtype=np.int64)
        for r in range(top, 0, -1):
            given = np.asarray(rows_by_size.get(r, np.zeros((0, r))), dtype=np.int64).reshape(-1, r)
            faces = [np.delete(below, j, axis=1) for j in range(below.shape[1])]
            levels[r] = _unique_rows(np.concatenate([given] + faces), num_attributes)
            below = levels[r]
        return cls(num_attributes, levels)

    # ---- basic access --------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._offsets[-1])

    @property
    def max_size(self) -> int:
        return len(self._rows) - 1

    def rows(self, r: int) -> np.ndarray:
        """The sets of size ``r`` as an ``(m_r, r)`` array (empty if none)."""
        if r < len(self._rows):
            return self._rows[r]
        return np.zeros((0, r), dtype=np.int64)

    def offset(self, r: int) -> int:
        return int(self._offsets[min(r, len(self._rows))])

    @cached_property
    def set_sizes(self) -> np.ndarray:
        """``|A|`` for every id."""
        return np.repeat(np.arange(len(self._rows)), np.diff(self._offsets))

    @cached_property
    def sets(self) -> tuple[Subset, ...]:
        """Every set as a tuple, in id order."""
        return tuple(tuple(int(v) for v in row) for rows in self._rows for row in rows.tolist())

    @cached_property
    def _index(self) -> dict[Subset, int]:
        return {s: i for i, s in enumerate(self.sets)}

    def index(self, subset: Subset) -> int:
        """The id of a sorted tuple; ``KeyError`` if it is not in the family."""
        try:
            return self._index[tuple(subset)]
        except KeyError:
            raise KeyError(f"attribute set {tuple(subset)} is not in the family (closure)") from None

    def __contains__(self, subset: object) -> bool:
        return isinstance(subset, tuple) and subset in self._index

    def ids(self, rows: np.ndarray) -> np.ndarray:
        """Ids of the sets given as rows of an ``(N, r)`` int array of sorted positions."""
        rows = np.asarray(rows, dtype=np.int64)
        r = rows.shape[1]
        table = self.rows(r)
        if len(rows) == 0:
            return np.zeros(0, dtype=np.int64)
        keys = self._keys[r] if r < len(self._keys) else None
        if keys is not None and len(table):
            q = _row_keys(rows, self.num_attributes)
            pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
            found = keys[pos] == q
        else:
            pos, found = self._lookup_unique(table, rows)
        if not np.all(found):
            missing = tuple(int(v) for v in rows[np.argmin(found)])
            raise KeyError(f"attribute set {missing} is not in the family (closure)")
        return pos + self.offset(r)

    @staticmethod
    def _lookup_unique(table: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row lookup without integer keys (very large sets): group equal rows with np.unique."""
        both = np.concatenate([table, rows])
        _, inverse = np.unique(both, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        where = np.full(inverse.max() + 1, -1, dtype=np.int64)
        where[inverse[: len(table)]] = np.arange(len(table))
        pos = where[inverse[len(table):]]
        return np.maximum(pos, 0), pos >= 0

    # ---- per-set quantities -----------------------------------------------------------
    def product_over(self, values: np.ndarray) -> np.ndarray:
        """``prod_{i in A} values[i]`` for every set ``A`` (1 for the empty set)."""
        out = [np.ones(len(rows)) if r == 0 else np.prod(values[rows], axis=1) for r, rows in enumerate(self._rows)]
        return np.concatenate(out) if out else np.zeros(0)

    def pcosts(self, sizes: Sequence[int]) -> np.ndarray:
        """``p_A = prod (n_i - 1)/n_i`` for every set."""
        n = np.asarray(sizes, dtype=np.float64)
        return self.product_over((n - 1) / n)

    def cells(self, sizes: Sequence[int]) -> np.ndarray:
        """``#cells(A) = prod n_i`` for every set (float)."""
        return self.product_over(np.asarray(sizes, dtype=np.float64))

    def residual_lengths(self, sizes: Sequence[int]) -> np.ndarray:
        """``prod (n_i - 1)``: the number of answers of ``M_A``, for every set (int)."""
        return self.product_over(np.asarray(sizes, dtype=np.int64) - 1).astype(np.int64)

    def incidence(self, sizes: Sequence[int]) -> SubsetIncidence:
        """Every pair ``(W, A)`` of members with ``A subset W``; see :class:`SubsetIncidence`."""
        inv_n2 = 1.0 / np.asarray(sizes, dtype=np.float64) ** 2
        sup, sub, factor, removed = [], [], [], []
        for r, rows in enumerate(self._rows):
            if len(rows) == 0:
                continue
            row_ids = self.offset(r) + np.arange(len(rows))
            for mask in range(1 << r):
                keep = [j for j in range(r) if mask >> j & 1]
                drop = [j for j in range(r) if not mask >> j & 1]
                sup.append(row_ids)
                sub.append(self.ids(rows[:, keep]))
                factor.append(np.prod(inv_n2[rows[:, drop]], axis=1) if drop else np.ones(len(rows)))
                removed.append(np.full(len(rows), len(drop), dtype=np.int8))
        return SubsetIncidence(
            size=len(self),
            sup=np.concatenate(sup),
            sub=np.concatenate(sub),
            factor=np.concatenate(factor),
            removed=np.concatenate(removed),
        )


@dataclass(frozen=True)
class SubsetIncidence:
    """The subset relation of a downward-closed family, as coordinate arrays.

    For each pair ``A subset W`` of members: ``sup = id(W)``, ``sub = id(A)``,
    ``factor = prod_{j in W \\ A} n_j^-2`` and ``removed = |W \\ A|``. From it:
    ``Var = variance_matrix() @ (p * s)`` gives every member's cell variance,
    ``zeta()`` is the 0/1 matrix ``[A subset W]`` and ``mobius()`` its inverse
    ``(-1)^{|W \\ A|} [A subset W]``.
    """

    size: int
    sup: np.ndarray
    sub: np.ndarray
    factor: np.ndarray
    removed: np.ndarray

    def _matrix(self, data: np.ndarray) -> sp.csr_matrix:
        return sp.csr_matrix((data, (self.sup, self.sub)), shape=(self.size, self.size))

    def variance_matrix(self) -> sp.csr_matrix:
        """``V[W, A] = prod_{j in W \\ A} n_j^-2``: cell variance of ``W`` is ``V @ (p * s)``."""
        return self._matrix(self.factor)

    def zeta(self) -> sp.csr_matrix:
        return self._matrix(np.ones(len(self.sup)))

    def mobius(self) -> sp.csr_matrix:
        return self._matrix(1.0 - 2.0 * (self.removed % 2))


# ---------------------------------------------------------------------------------------
# Variance, covariance, reconstruction
# ---------------------------------------------------------------------------------------
def _submasks(r: int) -> list[tuple[int, ...]]:
    return [tuple(j for j in range(r) if mask >> j & 1) for mask in range(1 << r)]


def cell_variance(sizes_of_a: Sequence[int], scales: Mapping[tuple[int, ...], float]) -> float:
    """Variance of every cell of the reconstructed marginal of ``A``.

    ``sizes_of_a`` are ``n_i`` for ``i in A`` (in order); ``scales`` maps each subset of
    *positions within A* (sorted tuples) to ``s_A'``.
    """
    total = 0.0
    for keep in _submasks(len(sizes_of_a)):
        p = math.prod((sizes_of_a[j] - 1) / sizes_of_a[j] for j in keep)
        rest = math.prod(sizes_of_a[j] ** -2.0 for j in range(len(sizes_of_a)) if j not in keep)
        total += scales[keep] * p * rest
    return total


def cell_covariance(sizes_of_a: Sequence[int], scales: Mapping[tuple[int, ...], float]) -> np.ndarray:
    """Covariance matrix of the reconstructed marginal of ``A`` (dense, C order).

    ``Cov = sum_{A' subset A} s_A' kron_{i in A} (I - J/n_i if i in A' else J/n_i^2)``, i.e.
    ``Cov(c, c') = sum_{A'} s_A' prod_{i in A'} ([c_i = c'_i] - 1/n_i) prod_{j in A \\ A'} n_j^-2``.
    (The paper's Theorem 4.7 states a different off-diagonal formula that is wrong for
    ``|A| >= 2``; this one matches the dense generalized-least-squares covariance.)
    """
    cells = math.prod(sizes_of_a)
    out = np.zeros((cells, cells))
    for keep in _submasks(len(sizes_of_a)):
        factors = [
            np.eye(n) - 1.0 / n if j in keep else np.full((n, n), 1.0 / n**2) for j, n in enumerate(sizes_of_a)
        ]
        out += scales[keep] * _dense_kron(factors)
    return out


def _expand_axis(x: np.ndarray, axis: int) -> None:
    """In place along one axis: ``x <- E_n x`` with ``E_n [c; y] = (c + sum y)/n - [0; y]``."""
    mean = x.sum(axis=axis, keepdims=True)
    mean /= x.shape[axis]
    np.subtract(mean, x, out=x)
    first = [slice(None)] * x.ndim
    first[axis] = slice(0, 1)
    x[tuple(first)] = mean


class ResidualReconstruction:
    """Marginals reconstructed from residual measurements (Algorithm 2); any member of the closure.

    Reconstruction is the unique linear unbiased estimate (and the BLUE) from all the
    measurements, so marginals obtained here are mutually consistent: summing a marginal
    over an axis gives the reconstruction of the smaller marginal. Values may be negative
    or fractional (no projection). Marginals are returned as tensors with one axis per
    attribute in domain order (attributes of size 1 included, with length 1).

    ``q_A = sum_{A' subset A} (kron_{i in A} [Sub^+ if i in A' else (1/n_i) 1]) omega_A'``
    factorises: with ``E_n = [(1/n) 1 | Sub_n^+]`` (``n x n``), ``q_A = (kron_i E_{n_i}) omega~``
    where ``omega~`` packs every ``omega_A'`` into one ``n_1 x ... x n_r`` tensor (index 0 on
    the axes not in ``A'``, indices ``1..`` on the axes in ``A'``). Each marginal thus costs one
    packing pass and ``r`` axis passes, run on whole batches of same-shape marginals.
    """

    def __init__(self, domain: Domain, family: SubsetFamily, answers: Mapping[Subset, np.ndarray]):
        self.domain = domain
        self.family = family
        self._normalize = SubsetNormalizer(domain)
        lengths = family.residual_lengths(domain.sizes)
        arrays: dict[int, np.ndarray] = {}
        for key, value in answers.items():
            subset = self._normalize(key)
            i = family.index(subset)
            arr = np.asarray(value, dtype=np.float64).ravel()
            if arr.shape[0] != lengths[i]:
                raise ValueError(f"measurement on {subset} has {arr.shape[0]} values; expected {lengths[i]}")
            arrays[i] = arr
        # answers packed contiguously by length, so a batch gathers them with one np.take
        self._slot = np.full(len(family), -1, dtype=np.int64)
        self._store: dict[int, np.ndarray] = {}
        by_length: dict[int, list[int]] = {}
        for i in arrays:
            by_length.setdefault(int(lengths[i]), []).append(i)
        for length, ids in by_length.items():
            self._slot[ids] = np.arange(len(ids))
            self._store[length] = np.stack([arrays[i] for i in ids])

    def marginal(self, attributes: Iterable[str | int] | str | int) -> np.ndarray:
        """The reconstructed marginal on ``attributes`` (names or positions), its axes in the order given."""
        single = isinstance(attributes, (str, int, np.integer))
        given = self._normalize.domain.indices((attributes,) if single else attributes)
        try:
            (result,) = self.marginals([attributes]).values()
        except KeyError as error:
            names = tuple(self._normalize.domain.names[i] for i in given)
            raise UnmeasuredMarginalError(
                f"the marginal on {names} was not measured and the measurements do not determine it "
                f"({error.args[0]}): add it (or a marginal that contains it) to the workload") from None
        return result.transpose(np.argsort(np.argsort(given)))

    __getitem__ = marginal

    def marginals(self, marginals: Iterable[Iterable[str | int] | str | int]) -> dict[Subset, np.ndarray]:
        """Several marginals at once, batched by shape; keys are sorted position tuples, axes in domain order."""
        requested: dict[Subset, Subset] = {}
        for m in marginals:
            full = self._normalize.full(m)
            requested[full] = self._normalize(full)
        groups: dict[tuple[int, ...], list[Subset]] = {}
        sizes = self._normalize.sizes
        for reduced in dict.fromkeys(requested.values()):
            groups.setdefault(tuple(sizes[i] for i in reduced), []).append(reduced)
        estimates: dict[Subset, np.ndarray] = {}
        scratch = np.empty(0)
        for shape, members in groups.items():
            rows = np.array(members, dtype=np.int64).reshape(len(members), len(shape))
            chunk = max(1, _BATCH_ENTRIES // max(1, math.prod(shape)))
            if scratch.size < min(chunk, len(members)) * math.prod(shape):
                scratch = np.empty(min(chunk, len(members)) * math.prod(shape))
            for start in range(0, len(members), chunk):
                block = self._batch(rows[start : start + chunk], shape, scratch)
                estimates.update(zip(members[start : start + chunk], block))
        return {
            full: estimates[reduced].reshape(tuple(sizes[i] for i in full)) for full, reduced in requested.items()
        }

    def _batch(self, targets: np.ndarray, shape: tuple[int, ...], scratch: np.ndarray) -> np.ndarray:
        """Reconstruct ``(K, r)`` targets of one ``shape``: pack all ``omega_A'``, then ``kron E``."""
        k, r = targets.shape
        packed = np.empty((k,) + shape)
        for keep in _submasks(r):
            ids = self.family.ids(targets[:, list(keep)])
            slots = self._slot[ids]
            if np.any(slots < 0):
                missing = self.family.sets[int(ids[np.argmin(slots)])]
                raise KeyError(f"no measurement of the residual on {missing}, which the marginal needs")
            inner = tuple(shape[j] - 1 for j in keep)
            length = math.prod(inner)
            gathered = scratch[: k * length].reshape(k, length)
            np.take(self._store[length], slots, axis=0, out=gathered, mode="clip")
            where = tuple(slice(1, None) if j in keep else 0 for j in range(r))
            packed[(slice(None),) + where] = gathered.reshape((k,) + inner)
        for axis in range(1, r + 1):
            _expand_axis(packed, axis)
        return packed
