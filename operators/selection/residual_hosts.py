"""How ResidualPlanner's strategy is measured through the kernel and decoded (``ResidualPlannerStrategy.measure``
and ``.reconstruct``); QuerySmasher counts on the same hosts.

Measurement (the paper's Algorithm 1) goes through the kernel's ordinary Gaussian request, no special
path. The residual of ``A`` is measured as the *whitened* basis ``B_A = (H H^T)^(-1/2) H`` with
``H = kron_{i in A} Sub_{n_i}``, whose rows are orthonormal, with i.i.d. noise; un-whitening client-side,
``omega_A = (H H^T)^(1/2) y``, gives exactly the paper's base mechanism ``H v + N(0, s_A H H^T)``. Since
``Sub Sub^T = I + J``, both square roots are ``I + c J`` (closed form, one factor per attribute).

Counting is shared: the kernel only vectorizes *host* marginals, small unions of workload marginals
(at most ``max_host_cells`` cells, never every attribute), and each residual ``A`` is measured on a host
``H ⊇ A`` as ``B_A ⊗ 1^T`` (summing out ``H \\ A`` inside the Kronecker product). All residuals of one
host go in one measurement, ``VStack_A c_A (B_A ⊗ 1^T)`` with ``c_A = s_A^(-1/2)``: its squared L2
sensitivity is ``sum_A p_A / s_A`` (the host's share of the plan's pcost), so asking for
``rho_H = pcost_H / 2`` gives noise ~1 per row, i.e. variance ``s_A`` on residual ``A``. The ``rho_H``
are exact fractions proportional to ``pcost_H`` summing to the budget, so the kernel charges exactly
the budget. The kernel rounds the noise up slightly (release grid); the variances reported use the
scale it actually applied (each host Measurement's ``noise_std``), not the plan's.

A host's answers come back as one ``Measurement`` over the host marginal's cells (``attributes``: the
host); :func:`decode` replays the assignment of residuals to hosts from the hosts in order, so the
measurements alone determine which rows answer which residual.

Requests are batched: ``vectorize_many`` counts thousands of hosts per request, and ``gaussian_batch``
sends about a million answers' worth of host measurements per request, each charged exactly as its own
``gaussian`` request (docs/privacy/gaussian.md). A host matrix depends only on the host's
:func:`host_pattern` (sizes, residual positions, weights), so hosts sharing one (most of them, for a
symmetric workload) share one matrix, sent and checked once per batch and applied by the kernel to
several host vectors at a time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from itertools import combinations

import numpy as np

from ..matrix import Dense, Kronecker, Matrix, Total, VStack, Weighted
from ..privacy import split_amount
from ..client import Handle
from ..residual import Subset, SubsetFamily, sub_matrix
from ..measurement import Measurement

DEFAULT_HOST_CELLS = 10_000


# ---------------------------------------------------------------------------------------
# Whitening: (Sub Sub^T)^(+-1/2) = (I + J)^(+-1/2) = I + c J
# ---------------------------------------------------------------------------------------
def _ones_plus_coefficient(m: int, power: float) -> float:
    """c with (I + J)^power = I + c J on m x m (J has eigenvalue m on 1, 0 elsewhere): 1 + c m = (1 + m)^power."""
    return ((1.0 + m) ** power - 1.0) / m


@lru_cache(maxsize=None)
def whitened_sub(n: int) -> Dense:
    """``(Sub_n Sub_n^T)^(-1/2) Sub_n``: ``(n-1) x n`` with orthonormal rows; column norms ``sqrt((n-1)/n)``."""
    m = n - 1
    root = np.eye(m) + _ones_plus_coefficient(m, -0.5) * np.ones((m, m))
    return Dense(root @ sub_matrix(n))


def whitened_residual(sizes: Iterable[int]) -> Matrix:
    """``B_A = kron_i whitened_sub(n_i)``: orthonormal rows spanning the residual space of ``A``."""
    return Kronecker([whitened_sub(n) for n in sizes])


def unwhiten(sizes: Sequence[int], y: np.ndarray) -> np.ndarray:
    """``(H H^T)^(1/2) y = kron_i (I + c J) y`` along the leading axis of ``y`` (a vector or a matrix)."""
    y = np.asarray(y, dtype=np.float64)
    out = y.reshape(tuple(n - 1 for n in sizes) + y.shape[1:]).copy()
    for axis, n in enumerate(sizes):
        out += _ones_plus_coefficient(n - 1, 0.5) * out.sum(axis=axis, keepdims=True)
    return out.reshape(y.shape)


def _unwhiten_rows(sizes: Sequence[int], rows: np.ndarray, chunk_entries: int = 1 << 16) -> np.ndarray:
    """:func:`unwhiten` applied to each row of ``(K, prod (n_i - 1))`` in place (batched, a cache-sized
    block of rows at a time: one pass over memory instead of two per attribute)."""
    step = max(1, chunk_entries // max(rows.shape[1], 1))
    for start in range(0, rows.shape[0], step):
        tensor = rows[start : start + step].reshape((-1,) + tuple(n - 1 for n in sizes))
        for axis, n in enumerate(sizes, start=1):
            tensor += _ones_plus_coefficient(n - 1, 0.5) * tensor.sum(axis=axis, keepdims=True)
    return rows


# ---------------------------------------------------------------------------------------
# Hosts: which marginals the kernel vectorizes, and which residuals each one carries
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Host:
    """A marginal the kernel vectorizes (``attributes``, sorted positions) and the residuals measured on it."""

    attributes: Subset
    residuals: tuple[Subset, ...]


def maximal_sets(family: SubsetFamily) -> list[Subset]:
    """Members of a downward-closed family with no superset in it, largest first (a set is non-maximal
    iff it is a face, one element removed, of a member)."""
    dominated = np.zeros(len(family), dtype=bool)
    for r in range(1, family.max_size + 1):
        rows = family.rows(r)
        for j in range(r):
            dominated[family.ids(np.delete(rows, j, axis=1))] = True
    sets = family.sets
    return sorted((sets[i] for i in np.flatnonzero(~dominated)), key=lambda s: (-len(s), s))


def plan_hosts(sizes: Sequence[int], family: SubsetFamily, max_cells: int = DEFAULT_HOST_CELLS) -> list[Host]:
    """Cover the family's maximal sets with few hosts of at most ``max_cells`` cells (greedy).

    Each uncovered maximal set starts a host, which then takes the attribute that completes the most
    uncovered maximal sets while it fits (a proper subset of the attributes, so the full vector is never
    built). Every closure set is then assigned to the first host containing it. Fewer hosts means fewer
    table scans and kernel requests: for 100 attributes of size 10 and all 3-way marginals, 46,120 4-way
    hosts instead of 161,700 3-way ones.
    """
    d = len(sizes)
    n = np.asarray(sizes, dtype=np.int64)
    maximal = maximal_sets(family)
    uncovered = set(maximal)
    links: dict[Subset, set[int]] = {}  # T -> {j : T + {j} is an uncovered maximal set}
    for s in maximal:
        for k in range(len(s)):
            links.setdefault(s[:k] + s[k + 1 :], set()).add(s[k])
    lengths = sorted({len(s) for s in maximal if s})
    hosts: list[Subset] = []
    for start in maximal:
        if start not in uncovered:
            continue
        host = list(start) if start else [int(np.argmin(n))]  # the total alone: any one attribute
        cells = math.prod(int(n[i]) for i in host)
        while len(host) + 1 < d:
            completes = [j for r in lengths for t in combinations(host, r - 1) for j in links.get(t, ())]
            gain = np.bincount(completes, minlength=d)  # attribute -> uncovered maximal sets it completes
            gain[host] = 0
            gain[cells * n > max_cells] = 0
            best = int(np.argmax(gain))  # the most completed, then the lowest position
            if gain[best] <= 0:
                break
            host = sorted(host + [best])
            cells *= int(n[best])
        for r in lengths:
            for s in combinations(host, r):
                if s in uncovered:
                    uncovered.discard(s)
                    for k in range(r):
                        links[s[:k] + s[k + 1 :]].discard(s[k])
        uncovered.discard(start)
        hosts.append(tuple(host))
    return assign_hosts(hosts, family)


def assign_hosts(hosts: Sequence[Subset], family: SubsetFamily) -> list[Host]:
    """Give every closure set to the first host that contains it."""
    assigned: set[Subset] = set()
    out = []
    for host in hosts:
        mine = []
        for r in range(min(len(host), family.max_size) + 1):
            for s in combinations(host, r):
                if s not in assigned and s in family:
                    assigned.add(s)
                    mine.append(s)
        if mine:
            out.append(Host(host, tuple(mine)))
    if len(assigned) != len(family):
        missing = next(s for s in family.sets if s not in assigned)
        raise AssertionError(f"residual {missing} has no host")  # cannot happen: every maximal set starts one
    return out


def host_matrix(sizes: Sequence[int], host: Host, weights: Mapping[Subset, float]) -> Matrix:
    """``VStack_A weights[A] * (B_A ⊗ 1^T)`` over the host's attributes (in domain order)."""
    blocks: list[Matrix] = []
    for a in host.residuals:
        factors = [whitened_sub(sizes[i]) if i in a else Total(sizes[i]) for i in host.attributes]
        blocks.append(Weighted(Kronecker(factors), weights[a]))
    return blocks[0] if len(blocks) == 1 else VStack(blocks)


# ---------------------------------------------------------------------------------------
# Counting and measuring the hosts (the benchmark times them separately)
# ---------------------------------------------------------------------------------------
COUNT_BATCH = 4096
"""Host marginals per ``vectorize_many`` request."""

MEASURE_ROWS = 1 << 20
"""About this many answers per ``gaussian_batch`` request (8 MB of floats, 11 MB of JSON)."""


def count_hosts(source: Handle, hosts: Sequence[Host]) -> list[Handle]:
    """Vectorize each host's projection in the kernel (the only pass over the table), a batch at a time."""
    names = source.domain.names
    vectors: list[Handle] = []
    for start in range(0, len(hosts), COUNT_BATCH):
        chunk = hosts[start : start + COUNT_BATCH]
        vectors += source.vectorize_many([[names[i] for i in h.attributes] for h in chunk])
    return vectors


def host_pattern(sizes: Sequence[int], host: Host, weights: Mapping[Subset, float]) -> tuple:
    """What :func:`host_matrix` depends on: the host's attribute sizes and, per residual, its positions
    in the host and its weight. Hosts with equal patterns share one matrix (sent to the kernel once per batch)."""
    where = {i: k for k, i in enumerate(host.attributes)}
    return (tuple(sizes[i] for i in host.attributes),
            tuple((tuple(where[i] for i in a), weights[a]) for a in host.residuals))


def measure_hosts(vectors: Sequence[Handle], hosts: Sequence[Host], planned: Mapping[Subset, float], sizes: Sequence[int],
                  rho: Fraction) -> list[Measurement]:
    """One Gaussian measurement per host, ``rho`` split exactly in proportion to each host's pcost, sent in
    ``gaussian_batch`` requests (each measurement charged exactly as its own request); ``planned``: the
    strategy's ``{A: s_A}``. Returns the hosts' Measurements in host order."""
    p = {a: math.prod((sizes[i] - 1) / sizes[i] for i in a) for a in planned}
    shares = [Fraction(math.fsum(p[a] / planned[a] for a in h.residuals)) for h in hosts]
    parts = split_amount(rho, shares)
    weights = {a: 1.0 / math.sqrt(s) for a, s in planned.items()}
    matrices: dict[tuple, Matrix] = {}  # one matrix object per host pattern
    patterns = []
    for host in hosts:
        pattern = host_pattern(sizes, host, weights)
        if pattern not in matrices:
            matrices[pattern] = host_matrix(sizes, host, weights)
        patterns.append(pattern)
    ids = {pattern: k for k, pattern in enumerate(matrices)}
    order = sorted(range(len(hosts)), key=lambda h: ids[patterns[h]])  # batches hold few distinct matrices
    out: list[Measurement | None] = [None] * len(hosts)
    start = 0
    while start < len(order):
        batch, rows = [], 0
        while start < len(order) and (not batch or rows + matrices[patterns[order[start]]].shape[0] <= MEASURE_ROWS):
            batch.append(order[start])
            rows += matrices[patterns[order[start]]].shape[0]
            start += 1
        answers = vectors[batch[0]].session.gaussian_batch(
            [vectors[h] for h in batch], [matrices[patterns[h]] for h in batch],
            rho=[parts[h] for h in batch],
        )
        for h, answer in zip(batch, answers):
            out[h] = Measurement(matrices[patterns[h]], answer.values, answer.scale, "gaussian", vectors[h].id,
                                 hosts[h].attributes)
    return out


def decode(measurements: Sequence[Measurement], family: SubsetFamily, planned: Mapping[Subset, float],
           sizes: Sequence[int]) -> tuple[dict[Subset, np.ndarray], dict[Subset, float]]:
    """``{A: omega_A}`` (un-whitened, the paper's ``H v + N(0, s_A H H^T)``) and the applied ``{A: s_A}`` from
    host measurements in host order (the residuals' assignment to hosts is replayed from their attributes)."""
    hosts = assign_hosts([m.attributes for m in measurements], family)
    if len(hosts) != len(measurements):
        raise ValueError("these measurements are not one per host of this strategy's plan")
    weights = {a: 1.0 / math.sqrt(s) for a, s in planned.items()}
    slots: dict[Subset, tuple[tuple[int, ...], int]] = {}  # A -> (shape, row): answers packed by shape
    counts: dict[tuple[int, ...], int] = {}
    for a in (a for h in hosts for a in h.residuals):
        shape = tuple(sizes[i] for i in a)
        slots[a] = (shape, counts.get(shape, 0))
        counts[shape] = counts.get(shape, 0) + 1
    packed = {shape: np.empty((k, math.prod(n - 1 for n in shape))) for shape, k in counts.items()}
    applied: dict[Subset, float] = {}
    runs: dict[tuple, list[int]] = {}  # hosts by pattern (equal layouts): one slicing per pattern
    for k, host in enumerate(hosts):
        runs.setdefault(host_pattern(sizes, host, weights), []).append(k)
    for (host_sizes, layout), members in runs.items():
        answered = np.stack([measurements[k].answers for k in members])
        offset = 0
        for j, (positions, weight) in enumerate(layout):
            shape = tuple(host_sizes[k] for k in positions)
            width = math.prod(n - 1 for n in shape)
            residuals = [hosts[k].residuals[j] for k in members]
            packed[shape][[slots[a][1] for a in residuals]] = answered[:, offset : offset + width] / weight
            for a, k in zip(residuals, members):
                applied[a] = measurements[k].noise_std ** 2 * planned[a]
            offset += width
    for shape, rows in packed.items():
        _unwhiten_rows(shape, rows)
    return {a: packed[shape][row] for a, (shape, row) in slots.items()}, applied
