"""MWEM and its ektelo variants (ektelo plans 7 and 18-20).

Each of T rounds spends eps/(2T) choosing a badly approximated workload query privately
(``worst_approx``: the exponential mechanism on |w x - w x_hat|) among those not measured yet (as
DPBench's MWEM, which drops each selected query from the candidates), and eps/(2T) measuring it with
Laplace noise; then the estimate is inferred again from every measurement so far.

- ``mwem``: multiplicative weights over the history (Hardt, Ligett and McSherry), each round
  starting from the previous estimate; x_hat starts uniform at scale N.
- ``mwem_b``: each round also measures, at no extra cost, the aligned intervals of width 2^t
  that the selected query does not touch (ektelo's H2 augmentation; 1-D only).
- ``mwem_c``: non-negative least squares with the total, instead of multiplicative weights.
- ``mwem_d``: both.
- ``mwem_star``: DPBench's MWEM*, MWEM with the number of rounds T read from DPBench's tuned table of the
  signal strength eps * N (``MWEM_STAR_ROUNDS``), instead of a fixed T.

The record count N is public in MWEM's paper (it sets the uniform start and the scale of the
weights). Here ``records=N`` declares it public; with ``records=None`` the plan first spends
``total_share`` of the budget (default 5%) on a noisy total and the rounds share the rest.
``records_or_noisy_total`` and ``split_budget`` are shared with the grid and AHP plans.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Literal

import numpy as np

from ..operators.matrix import Matrix, Product, Sparse, VStack
from ..kernel.matrix.threads import single_threaded_blas
from ..operators import measure
from ..operators import algebra
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.measurement import SPARSE_NONZEROS, Measurement, known_total
from ..operators.inference import multiplicative_weights, nnls
from ..operators.linalg import explicit_sparse
from ..operators.partition import workload_based
from ..operators.selection import classic
from ..operators.budget import Budget, epsilon_of
from .common import by_signal, records_or_noisy_total, signal_table

#: Multiplicative-weights passes over every measured query after each round: DPBench's MWEM runs 100.
SWEEPS = 100

#: Standard deviation given to a public total in NNLS, relative to one round's measurement noise:
#: weighs the total 10^6 times more than a round, yet keeps L-BFGS-B well conditioned.
PUBLIC_TOTAL_RELATIVE_STD = 1e-3


class MWEMEstimate(VectorEstimate):
    """MWEM's estimate, the workload rows it selected round by round, and every measurement taken.

    No error bars: multiplicative weights (and NNLS) are not linear in the noise."""

    def __init__(self, x: np.ndarray, selected: Sequence[int], measurements: Sequence[Measurement], workload: Matrix,
                 inference: str) -> None:
        how = "multiplicative weights" if inference == "mw" else "non-negative least squares"
        super().__init__(x, measurements, workload=workload, error_bars=False,
                         note=f"{how} over privately selected queries: not linear in the noise, no error bars")
        self.selected = tuple(selected)


def mwem(
    source: Handle,
    workload: Matrix,
    budget: Budget,
    *,
    shape: Sequence[int] | None = None,
    rounds: int | Callable[[float], int] = 10,
    records: float | None = None,
    total_share: float | Fraction | str = 0.05,
    augment: bool = False,
    inference: Literal["mw", "nnls"] = "mw",
) -> MWEMEstimate:
    """MWEM (plan 7) with the chosen augmentation and inference; spends exactly ``budget``.

    ``rounds`` is a number, or a function of the record count (public, or the noisy total once
    bought) returning the number (MWEM*).
    """
    fixed = None if callable(rounds) else _positive_rounds(rounds)
    if inference not in ("mw", "nnls"):
        raise ValueError(f"inference must be 'mw' or 'nnls', got {inference!r}")
    vector, dims = measure.data_vector(source, shape)
    if augment and len(dims) != 1:
        raise ValueError(f"H2 augmentation adds 1-D intervals; the domain has {len(dims)} dimensions")
    n = vector.size
    count = records_or_noisy_total(vector, epsilon_of(budget), records, total_share)
    rounds = fixed if fixed is not None else _positive_rounds(rounds(count.value))
    if rounds > workload.shape[0]:
        raise ValueError(f"MWEM measures each workload query at most once: {rounds} rounds need at least as many "
                         f"queries, the workload has {workload.shape[0]}")
    step = count.remaining / (2 * rounds)
    x = np.full(n, count.value / n)
    selected: list[int] = []
    unmeasured = np.arange(workload.shape[0])
    history: list[Measurement] = []
    with single_threaded_blas():  # many small products: a second BLAS thread only adds synchronisation
        for t in range(rounds):
            candidates = algebra.row_subset(workload, unmeasured) if selected else workload
            position = measure.worst_approx(vector, candidates, x, step)
            selected.append(int(unmeasured[position]))
            unmeasured = np.delete(unmeasured, position)
            row = algebra.rows(workload, selected[-1])
            query = classic.mwem_h2_augmentation(row, n, t) if augment else Sparse(row)  # a box: its cells only
            history.append(measure.laplace(vector, query, step))
            if inference == "mw":
                x = _multiplicative_weights_on_atoms(history, count.value, x)
            else:
                public = known_total(n, count.value, PUBLIC_TOTAL_RELATIVE_STD * history[0].noise_std)
                x = nnls([*history, *(count.measurements or (public,))], size=n, x0=x)
    return MWEMEstimate(x, selected, (*count.measurements, *history), workload, inference)


def _multiplicative_weights_on_atoms(history: Sequence[Measurement], total: float, x0: np.ndarray) -> np.ndarray:
    """``multiplicative_weights(history, total, x0=x0)`` run on the atoms of the measured queries (the
    groups of cells every measured query weighs alike): each update scales all cells of an atom by
    one factor, so the atoms' totals follow multiplicative weights on one column per atom, and every
    cell keeps its share of its atom's start. The same estimate on a few thousand atoms instead of
    every cell (64 boxes on 256 x 256 cells)."""
    measured = VStack([m.matrix for m in history])
    explicit = explicit_sparse(measured, SPARSE_NONZEROS)  # one CSR: a product per round, not per query
    atoms = workload_based(measured if explicit is None else Sparse(explicit), seed=0)
    pick = atoms.representatives()
    reduced = [m.on(Product([m.matrix, pick])) for m in history]
    start = atoms.matrix() @ x0
    totals = multiplicative_weights(reduced, total, x0=start, iterations=SWEEPS)
    share = np.divide(x0, start[atoms.labels], out=np.zeros_like(x0), where=x0 > 0)
    return totals[atoms.labels] * share


def _positive_rounds(rounds) -> int:
    if int(rounds) < 1:
        raise ValueError(f"rounds must be a positive number, got {rounds!r}")
    return int(rounds)


def mwem_b(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
           rounds: int = 10, records: float | None = None, total_share: float | Fraction | str = 0.05) -> MWEMEstimate:
    """MWEM-b: MWEM measuring H2 augmentation intervals alongside each selected query (plan 18)."""
    return mwem(source, workload, budget, shape=shape, rounds=rounds, records=records, total_share=total_share,
                augment=True)


def mwem_c(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
           rounds: int = 10, records: float | None = None, total_share: float | Fraction | str = 0.05) -> MWEMEstimate:
    """MWEM-c: MWEM with NNLS and the (public or noisy) total instead of multiplicative weights (plan 19)."""
    return mwem(source, workload, budget, shape=shape, rounds=rounds, records=records, total_share=total_share,
                inference="nnls")


def mwem_d(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
           rounds: int = 10, records: float | None = None, total_share: float | Fraction | str = 0.05) -> MWEMEstimate:
    """MWEM-d: H2 augmentation and NNLS with the total (plan 20)."""
    return mwem(source, workload, budget, shape=shape, rounds=rounds, records=records, total_share=total_share,
                augment=True, inference="nnls")


# ---- MWEM*: rounds from the signal strength eps * N ------------------------------------------

#: MWEM*'s number of rounds T by signal strength eps * N (eps: the whole budget; N: the public record count, or
#: the noisy total), for 1-D and 2-D domains: DPBench's tuned tables (its mwemND_adaptive_engine, 'DEFALUT1D' and
#: 'DEFALUT2D'), rows (signal, T), read as DPBench reads them: T = int(linear interpolation between the rows).
MWEM_STAR_ROUNDS: dict[int, tuple[tuple[float, int], ...]] = {
    1: ((0, 2), (1, 2), (10, 2), (100, 4), (1e3, 8), (1e4, 12), (1e5, 60), (1e6, 80), (1e7, 140), (1e8, 140),
        (1e9, 140), (1e20, 140)),
    2: ((0, 12), (500, 12), (1e3, 12), (5e3, 32), (1e4, 32), (1e5, 60), (5e5, 120), (1e6, 140), (5e6, 140),
        (1e7, 140), (1e8, 140), (1e20, 140)),
}


def mwem_star(source: Handle, workload: Matrix, budget: Budget, *, shape: Sequence[int] | None = None,
              records: float | None = None, total_share: float | Fraction | str = 0.05,
              table: Sequence[tuple[float, int]] | None = None) -> MWEMEstimate:
    """MWEM*: MWEM with T = int(``by_signal(table, eps * N)``) rounds, N public (``records``) or the noisy
    total bought with ``total_share`` of the budget (DPBench); ``table`` defaults to DPBench's for the domain's
    dimensions (``MWEM_STAR_ROUNDS``)."""
    vector, dims = measure.data_vector(source, shape)
    rows = signal_table(MWEM_STAR_ROUNDS[min(len(dims), 2)] if table is None else table, "table", _positive_rounds)
    epsilon = float(epsilon_of(budget))

    def rounds(records: float) -> int:
        return int(by_signal(rows, epsilon * records))

    return mwem(vector, workload, budget, shape=dims, rounds=rounds, records=records, total_share=total_share)
