"""Solve every subworkload once: deduplicate, factorise Kronecker Grams, run solves in parallel.

Equal subworkloads (same canonical key, :mod:`.decompose`) share one solution. Per key:

- ``exact``: the Gram ``sum_k c_k kron(parts_k)`` is factorised by pulling out the parts
  common to every term (``L*(G1 kron G2) = L*(G1) L*(G2)``, strategy = Kronecker product of
  the factors' strategies, certificates multiply); the rest, if several terms remain, is
  assembled densely over its axes. Each distinct factor or dense remainder is one call of
  :func:`.exact.solve_exact`, e.g. all 1- and 2-way prefix subworkloads of a domain with
  equal attribute sizes share a single 1-D solve.
- ``wff``: Fourier weights of each term are outer products of the parts' weights.
- ``residual``: ResidualPlanner's basis (``V = kron n_i/(n_i-1) C_i``), loss ``p_A' tr(G)``.

The exact solves are independent; each runs with one BLAS thread (multi-threaded BLAS only adds
synchronisation at these sizes, badly on a shared machine: 16 s instead of 44 s for a 1600-cell
solve on 2 loaded cores), in a process pool when there are many.
"""

from __future__ import annotations

import math
import os
from collections.abc import Hashable
from concurrent.futures import ProcessPoolExecutor
from typing import Literal

import numpy as np

from ....kernel.matrix.threads import single_threaded_blas

from ...residual import residual_pcost
from .decompose import GramStore, Parts, Subset, Subworkload, canonical_key
from .exact import solve_exact
from .solutions import (
    DenseSolution,
    KronSolution,
    SubSolution,
    centered_basis_solution,
)
from .wff import FourierSolution, fourier_weights

Solver = Literal["exact", "wff", "residual"]

#: Use a process pool automatically from this many distinct exact solves of this total size (sum n^3).
POOL_MIN_SOLVES = 8
POOL_MIN_WORK = 2e8
POOL_WORKERS = 2
_LIMITS = None  # the BLAS thread limit held by a pool worker process


def select_solutions(
    subworkloads: dict[Subset, Subworkload],
    store: GramStore,
    solver: Solver = "exact",
    tol: float = 1e-8,
    workers: int | None = None,
) -> dict[Subset, SubSolution]:
    """A strategy for every subworkload (equal subworkloads share the same object)."""
    if solver not in ("exact", "wff", "residual"):
        raise ValueError(f"solver must be 'exact', 'wff' or 'residual', got {solver!r}")
    groups: dict[Hashable, list[Subset]] = {}
    for subset, sw in subworkloads.items():
        groups.setdefault(sw.key(), []).append(subset)
    representatives = {key: subworkloads[members[0]] for key, members in groups.items()}
    solved: dict[Hashable, SubSolution] = {}
    pending = {}
    fourier_cache: dict[int, np.ndarray] = {}
    for key, sw in representatives.items():
        if not sw.shape:
            total = sum(sw.terms.values())
            solved[key] = DenseSolution((), np.ones((1, 1)), np.ones((1, 1)), loss=total, lower=total)
        elif solver == "wff":
            solved[key] = FourierSolution(sw.shape, _fourier_weights(sw, store, fourier_cache))
        elif solver == "residual":
            solved[key] = _residual(sw, store)
        else:
            pending[key] = _factorise(sw, store)
    if pending:
        problems: dict[Hashable, tuple[np.ndarray, tuple[int, ...]]] = {}
        for plan in pending.values():
            problems.update(plan.problems)
        keys = list(problems)
        solutions = dict(zip(keys, _solve_all([problems[k] for k in keys], tol, workers)))
        for key, plan in pending.items():
            solved[key] = plan.assemble(solutions)
    return {subset: solved[key] for key, members in groups.items() for subset in members}


# ---------------------------------------------------------------------------------------
# exact: factorisation into independent problems
# ---------------------------------------------------------------------------------------
class _Factorisation:
    """``G = scalar * kron_p G_p`` over groups of axes: the problems to solve and how to combine them."""

    def __init__(self, shape: tuple[int, ...], scalar: float):
        self.shape, self.scalar = shape, scalar
        self.parts: list[tuple[tuple[int, ...], Hashable]] = []
        self.problems: dict[Hashable, tuple[np.ndarray, tuple[int, ...]]] = {}

    def add(self, positions: tuple[int, ...], key: Hashable, gram: np.ndarray, shape: tuple[int, ...]) -> None:
        self.parts.append((positions, key))
        self.problems[key] = (gram, shape)

    def assemble(self, solutions: dict[Hashable, DenseSolution]) -> KronSolution:
        sols = [(positions, solutions[key]) for positions, key in self.parts]
        loss = self.scalar * math.prod(s.loss for _, s in sols)
        lower = self.scalar * math.prod(s.lower for _, s in sols)
        return KronSolution(self.shape, sols, loss, lower)


def _factorise(sw: Subworkload, store: GramStore) -> _Factorisation:
    """Pull out the parts common to every term; assemble what remains densely (if several terms)."""
    common = set.intersection(*(set(parts) for parts in sw.terms))
    rest: dict[Parts, float] = {}
    for parts, coef in sw.terms.items():
        key = tuple(p for p in parts if p not in common)
        rest[key] = rest.get(key, 0.0) + coef
    scalar = 1.0
    if len(rest) == 1:  # a single Kronecker term: every part is a factor
        ((parts, scalar),) = rest.items()
        common |= set(parts)
    plan = _Factorisation(sw.shape, scalar)
    for positions, gid in sorted(common):
        plan.add(positions, ("gram", gid), store.grams[gid], store.sizes[gid])
    if len(rest) > 1:
        covered = {p for positions, _ in common for p in positions}
        axes = tuple(p for p in range(len(sw.shape)) if p not in covered)
        local = {p: i for i, p in enumerate(axes)}
        terms = {tuple((tuple(local[p] for p in pos), gid) for pos, gid in parts): c for parts, c in rest.items()}
        shape = tuple(sw.shape[p] for p in axes)
        plan.add(axes, ("dense", canonical_key(shape, terms)), _dense_gram(store, terms, shape), shape)
    return plan


def _letters(positions, upper: bool = False) -> str:
    return "".join(chr((65 if upper else 97) + p) for p in positions)


def _dense_gram(store: GramStore, terms: dict[Parts, float], shape: tuple[int, ...]) -> np.ndarray:
    """``sum_k c_k kron(parts_k)`` as a dense ``n x n`` matrix over ``shape`` (C order)."""
    r, n = len(shape), math.prod(shape)
    total = np.zeros((n, n))
    for parts, coef in terms.items():
        if not parts:  # the empty set: a 1 x 1 Gram
            total += coef
            continue
        subscripts = ",".join(_letters(pos) + _letters(pos, upper=True) for pos, _ in parts)
        out = _letters(range(r)) + _letters(range(r), upper=True)
        total += coef * np.einsum(f"{subscripts}->{out}", *(store.tensor(gid) for _, gid in parts)).reshape(n, n)
    return total


def _solve_one(problem: tuple[np.ndarray, tuple[int, ...], float]) -> DenseSolution:
    gram, shape, tol = problem
    return solve_exact(gram, shape, tol=tol)


def _pool_initializer() -> None:
    global _LIMITS
    _LIMITS = single_threaded_blas()


def _solve_all(
    problems: list[tuple[np.ndarray, tuple[int, ...]]], tol: float, workers: int | None
) -> list[DenseSolution]:
    """Exact solves with one BLAS thread each: serially, or in a pool of ``workers`` processes.

    By default the pool (2 processes) is used when there are at least ``POOL_MIN_SOLVES``
    solves of total size ``sum n^3 >= POOL_MIN_WORK``. Largest solves are handed out first.
    """
    if workers is None:
        work = sum(float(g.shape[0]) ** 3 for g, _ in problems)
        many = len(problems) >= POOL_MIN_SOLVES and work >= POOL_MIN_WORK
        workers = min(POOL_WORKERS, os.cpu_count() or 1) if many else 1
    jobs = [(g, s, tol) for g, s in problems]
    if workers <= 1 or len(jobs) < 2:
        with single_threaded_blas():
            return [_solve_one(job) for job in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -jobs[i][0].shape[0])
    out: list[DenseSolution | None] = [None] * len(jobs)
    with ProcessPoolExecutor(max_workers=workers, initializer=_pool_initializer) as pool:
        chunk = max(1, len(jobs) // (16 * workers))
        for i, solution in zip(order, pool.map(_solve_one, [jobs[i] for i in order], chunksize=chunk)):
            out[i] = solution
    return out


# ---------------------------------------------------------------------------------------
# wff and residual
# ---------------------------------------------------------------------------------------
def _fourier_weights(sw: Subworkload, store: GramStore, cache: dict[int, np.ndarray]) -> np.ndarray:
    """Fourier weights of the subworkload: per term, the outer product of its parts' weights."""
    r = len(sw.shape)
    total = np.zeros(sw.shape)
    for parts, coef in sw.terms.items():
        subscripts = ",".join(_letters(pos) for pos, _ in parts)
        for _, gid in parts:
            if gid not in cache:
                cache[gid] = fourier_weights(store.grams[gid], store.sizes[gid])
        weights = [cache[gid] for _, gid in parts]
        total += coef * np.einsum(f"{subscripts}->{_letters(range(r))}", *weights)
    return total


def _residual(sw: Subworkload, store: GramStore) -> KronSolution:
    """ResidualPlanner's measurement of ``A'`` and its loss ``p_A' tr(G)`` on this subworkload."""
    trace = sum(c * math.prod(float(np.trace(store.grams[gid])) for _, gid in parts) for parts, c in sw.terms.items())
    parts = [((m,), centered_basis_solution(n)) for m, n in enumerate(sw.shape)]
    return KronSolution(sw.shape, parts, loss=residual_pcost(sw.shape) * trace, lower=None)
