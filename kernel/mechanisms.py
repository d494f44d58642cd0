"""The vetted measurement mechanisms: vector Laplace, vector Gaussian, the exponential mechanism, and
DAWA's noisy dyadic deviations, PHP's private split points, EFPA's private number of Fourier coefficients, StructureFirst's private bucket boundaries.

Each mechanism is two-phase. ``prepare_*`` derives the noise scale, the release grid and the
charge from the operator's own parameters (the matrix and epsilon / rho / sigma) and draws
nothing; the service asks the accountant to charge it, and only then does ``release`` draw
noise. The charge is a function of the noise actually used, never a separate argument.

Answers are released on a grid of step g (a power of two): values are rounded to integer
multiples of g, integer noise codes are added exactly in int64, and the released float is a
deterministic function of that integer (no floating-point Laplace attack). Rounding moves a
coordinate by at most g/2, so it adds at most g per coordinate a record touches to the
sensitivity; the grid is chosen so this slack is at most 2^-20 of the noise scale, and it is
charged. When the data vector holds counts and the matrix is 0/1, answers are already on an
integer grid and there is no slack. See docs/privacy/.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from kernel.matrix import Dense, Diagonal, Fourier, Kronecker, Matrix, Product, Sparse, VStack, Weighted
from kernel.noise import NoiseSource, discrete_gaussian, discrete_laplace, exponential_mechanism, grid_step
from kernel.privacy import PureDP, ZCDP

Unit = type[PureDP] | type[ZCDP]
_INT_LIMIT = 2.0**62


@dataclass(frozen=True)
class Prepared:
    """A measurement ready to release: noise kind and scale (in answer units), grid step, charge."""

    noise: Literal["laplace", "gaussian"]
    scale: float
    grid: float
    cost: Fraction

    def release(self, values: np.ndarray, source: NoiseSource) -> np.ndarray:
        scaled = np.asarray(values, dtype=np.float64) / self.grid
        if scaled.size and np.max(np.abs(scaled)) >= _INT_LIMIT:
            raise ValueError(
                "answers are too large for the release grid at this noise scale; measure fewer cells at once "
                "or with a larger noise scale"
            )
        codes = np.rint(scaled).astype(np.int64)
        units = self.scale / self.grid
        if self.noise == "laplace":
            codes += discrete_laplace(source, units, codes.size)
        else:
            codes += discrete_gaussian(source, units, codes.size)
        return codes * self.grid


def release_many(prepared: list[Prepared], values: list[np.ndarray], source: NoiseSource) -> list[np.ndarray]:
    """``prepared[i].release(values[i], source)`` for every i. Measurements with the same noise law (kind,
    scale, grid) draw their noise in one call: independent draws of one law either way."""
    out: list[np.ndarray | None] = [None] * len(values)
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(prepared):
        groups.setdefault((p.noise, p.scale, p.grid), []).append(i)
    for members in groups.values():
        joined = np.concatenate([np.asarray(values[i]).ravel() for i in members])
        released = prepared[members[0]].release(joined, source)
        bounds = np.cumsum([0] + [np.size(values[i]) for i in members])
        for i, start, stop in zip(members, bounds[:-1], bounds[1:]):
            out[i] = released[start:stop]
    return out


class MatrixFacts:
    """A kernel-built matrix and the public facts that set its noise (sensitivity, column support), each
    computed on first use and kept: a batch measuring one matrix on many sources derives them once."""

    def __init__(self, matrix: Matrix):
        self.matrix = matrix
        self.binary = matrix.binary
        self._sensitivity: dict[str, float] = {}

    @staticmethod
    def of(M: Matrix | MatrixFacts) -> MatrixFacts:
        return M if isinstance(M, MatrixFacts) else MatrixFacts(M)

    def sensitivity(self, norm: Literal["l1", "l2"]) -> float:
        """The largest column norm; refuses a matrix with no non-zero entries."""
        if norm not in self._sensitivity:
            self._sensitivity[norm] = _nonzero_sensitivity(self.matrix, norm)
        return self._sensitivity[norm]

    @functools.cached_property
    def support(self) -> int:
        return column_support(self.matrix)


def prepare_laplace(M: Matrix | MatrixFacts, epsilon: Fraction, integral: bool, unit: Unit) -> Prepared:
    """Laplace noise for M x: scale (L1 sensitivity + rounding slack) / epsilon; charge epsilon (or eps^2/2 zCDP)."""
    M = MatrixFacts.of(M)
    sensitivity = M.sensitivity("l1")
    grid, slack = _grid(M, sensitivity / float(epsilon), integral, "l1")
    return _laplace(sensitivity + slack, grid, epsilon, unit)


def _laplace(sensitivity: float, grid: float, epsilon: Fraction, unit: Unit) -> Prepared:
    cost = epsilon if unit is PureDP else epsilon * epsilon / 2
    return Prepared("laplace", _round_up(sensitivity / float(epsilon)), grid, cost)


def dyadic_deviations(x: np.ndarray) -> np.ndarray:
    """DAWA's bucket costs sum_i |x_i - mean| of the aligned dyadic blocks of widths 2, 4, .., 2^K >= n
    (clipped at n), level by level, left to right: one block per level holds each cell."""
    costs, width = [], 2
    while width < 2 * x.size:
        starts = np.arange(0, x.size, width)
        lengths = np.diff(np.append(starts, x.size))
        means = np.repeat(np.add.reduceat(x, starts) / lengths, lengths)
        costs.append(np.add.reduceat(np.abs(x - means), starts))
        width *= 2
    return np.concatenate(costs)


SPLIT_SENSITIVITY = 2.0
"""A unit change of x moves dev(left) + dev(right) by at most 2 (it lies in one side; see docs/privacy/php.md)."""


def split_scores(x: np.ndarray, chunk: int = 256) -> np.ndarray:
    """PHP's split quality -(dev(x[:k]) + dev(x[k:])) for k = 1 .. len - 1, dev(B) = sum_i |x_i - mean_B|."""

    def prefix_deviations(v: np.ndarray) -> np.ndarray:  # dev(v[:m]) for m = 1 .. len
        means = np.cumsum(v) / np.arange(1, v.size + 1)
        out = np.empty(v.size)
        for lo in range(0, v.size, chunk):  # O(len^2) in cache-sized row blocks
            m = np.arange(lo, min(lo + chunk, v.size))
            spread = np.abs(v[None, :] - means[m, None])
            spread[np.arange(v.size)[None, :] > m[:, None]] = 0.0
            out[m] = spread.sum(axis=1)
        return out

    return -(prefix_deviations(x)[:-1] + prefix_deviations(x[::-1])[::-1][1:])


FOURIER_SENSITIVITY = 1.0
"""||(I - P_k) x||_2 is 1-Lipschitz in the L2 norm, and a unit change has L2 norm <= 1 (docs/privacy/efpa.md)."""


def fourier_tail_norms(x: np.ndarray) -> np.ndarray:
    """||x - P_k x||_2 for k = 1 .. n, P_k the projection on the k lowest real Fourier frequencies: the
    signal EFPA drops by keeping k coefficients."""
    energy = (Fourier(x.size) @ x) ** 2
    tails = np.sqrt(np.maximum(np.cumsum(energy[::-1])[::-1], 0.0))  # tails[r] = ||c[r:]||
    return np.append(tails[1:], 0.0)


def interval_sse(x: np.ndarray) -> np.ndarray:
    """sse[a, b] = sum_{a <= i < b} (x_i - mean)^2 for 0 <= a < b <= n (inf elsewhere), from prefix sums,
    filled a block of rows at a time (one (n + 1)^2 array: touching fresh memory is what costs here)."""
    s1, s2 = np.append(0.0, np.cumsum(x)), np.append(0.0, np.cumsum(x * x))
    positions = np.arange(x.size + 1, dtype=np.float64)
    sse = np.empty((x.size + 1, x.size + 1))
    for start in range(0, x.size + 1, 256):
        stop = min(x.size + 1, start + 256)
        length = positions[None, :] - positions[start:stop, None]  # b - a
        sums = s1[None, :] - s1[start:stop, None]
        block = np.subtract(s2[None, :], s2[start:stop, None], out=sse[start:stop])
        with np.errstate(divide="ignore", invalid="ignore"):
            block -= sums * sums / length
        block[length <= 0] = np.inf
        np.maximum(block, 0.0, out=block)
    return sse


def bucket_costs(x: np.ndarray, most: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """``interval_sse(x)`` and, for j = 1..most, best[j - 1][q]: the least total SSE of the first q cells
    cut into j non-empty buckets (inf when q < j), by dynamic programming in min-plus products."""
    sse = interval_sse(x)
    best = [sse[0]]
    width = 256  # columns per block: rows a >= the block's end have sse[a, q] = inf and are skipped
    scratch = np.empty((sse.shape[0], width))
    for _ in range(1, most):
        previous, current = best[-1], np.empty(sse.shape[0])
        for start in range(0, sse.shape[0], width):
            stop = min(sse.shape[0], start + width)
            block = np.add(previous[:stop, None], sse[:stop, start:stop], out=scratch[:stop, : stop - start])
            current[start:stop] = block.min(axis=0)
        best.append(current)
    return sse, best


def structure_first_boundaries(
    source: NoiseSource, x: np.ndarray, bound: float, buckets: int, epsilon: Fraction
) -> list[int]:
    """StructureFirst: the buckets - 1 inner boundaries, sampled right to left, each by the exponential
    mechanism with epsilon / (buckets - 1) on -(cheapest SSE of the cells left of it in j buckets + SSE of
    the bucket it closes). Counts are clipped to the public ``bound`` F first, so every score moves by at
    most 2 F + 1 (docs/privacy/structure-first.md)."""
    sse, best = bucket_costs(np.clip(x, 0.0, bound), buckets - 1)
    boundaries, right = [], x.size
    for j in range(buckets - 1, 0, -1):
        candidates = np.arange(j, right)  # j buckets left of the boundary, a non-empty one right of it
        scores = -(best[j - 1][candidates] + sse[candidates, right])
        right = int(candidates[select_worst(source, scores, epsilon / (buckets - 1), 2 * bound + 1)])
        boundaries.append(right)
    return boundaries[::-1]


def prepare_dyadic_deviations(n: int, epsilon: Fraction, unit: Unit) -> Prepared:
    """Laplace noise for :func:`dyadic_deviations` of an n-cell vector (n >= 2); see docs/privacy/dawa.md.

    A unit change of x moves the cost of a block of length L by at most 2 (1 - 1/L), and a cell lies
    in one block per level, so the L1 sensitivity is sum_{k=1..K} 2 (1 - 2^-k); rounding each cost to
    the grid adds one grid step per level.
    """
    levels = (n - 1).bit_length()
    sensitivity = sum(2.0 * (1.0 - 2.0**-k) for k in range(1, levels + 1))
    grid = grid_step(sensitivity / float(epsilon) / levels)
    return _laplace(sensitivity + grid * levels, grid, epsilon, unit)


def prepare_gaussian(
    M: Matrix | MatrixFacts, rho: Fraction | None, sigma: float | None, integral: bool, unit: Unit
) -> Prepared:
    """Gaussian noise for M x; charge rho = (L2 sensitivity + slack)^2 / (2 sigma^2), zCDP sessions only."""
    if unit is not ZCDP:
        raise ValueError("Gaussian noise needs a zCDP session (a ZCDP budget); this session is pure DP")
    M = MatrixFacts.of(M)
    sensitivity = M.sensitivity("l2")
    if rho is not None:
        grid, slack = _grid(M, sensitivity / math.sqrt(2 * float(rho)), integral, "l2")
        return Prepared("gaussian", _round_up((sensitivity + slack) / math.sqrt(2 * float(rho))), grid, rho)
    grid, slack = _grid(M, sigma, integral, "l2")
    cost = Fraction(sensitivity + slack) ** 2 / (2 * Fraction(sigma) ** 2)
    return Prepared("gaussian", float(sigma), grid, cost)


def prepare_exponential(W: Matrix, epsilon: Fraction, unit: Unit) -> tuple[float, Fraction]:
    """Sensitivity of the scores |w x - w x_hat| (max |w_ij|) and the charge: eps, or eps^2/8 under zCDP.

    The exponential mechanism is epsilon-bounded-range, hence eps^2/8-zCDP (Cesar and Rogers 2021).
    """
    sensitivity = max_abs_entry(W)
    if sensitivity == 0:
        raise ValueError("the workload has no non-zero entries: every query scores 0")
    return sensitivity, exponential_cost(epsilon, unit)


def exponential_cost(epsilon: Fraction, unit: Unit) -> Fraction:
    return epsilon if unit is PureDP else epsilon * epsilon / 8


def select_worst(source: NoiseSource, scores: np.ndarray, epsilon: Fraction, sensitivity: float) -> int:
    return int(exponential_mechanism(source, scores, float(epsilon), sensitivity))


# ---- sensitivity helpers -------------------------------------------------------------------


def _nonzero_sensitivity(M: Matrix, norm: Literal["l1", "l2"]) -> float:
    sensitivity = M.sensitivity(norm)
    if not sensitivity > 0:
        raise ValueError("the matrix has no non-zero entries: it measures nothing")
    return sensitivity


def _round_up(value: float) -> float:
    """Absorb the few half-ulp roundings of the scale formulas: never under-noise."""
    return value * (1.0 + 2.0**-48)


def _grid(M: MatrixFacts, scale: float, integral: bool, norm: str) -> tuple[float, float]:
    """Release grid step and the sensitivity slack its rounding adds."""
    if integral and M.binary:  # counts times a 0/1 matrix are integers: no rounding at all
        return min(1.0, grid_step(scale)), 0.0
    support = M.support
    grid = grid_step(scale / support)
    return grid, grid * (support if norm == "l1" else math.sqrt(support))


def column_support(M: Matrix) -> int:
    """An upper bound on the number of non-zero entries in any column (exact for the common classes)."""
    if M.binary:
        return max(1, int(round(M.sensitivity("l1"))))
    if isinstance(M, Dense):
        return max(1, int((M.array != 0).sum(axis=0).max()))
    if isinstance(M, Sparse):
        return max(1, int(np.diff(M.matrix.tocsc().indptr).max()))
    if isinstance(M, Diagonal):
        return 1
    if isinstance(M, Weighted):
        return column_support(M.base)
    if isinstance(M, Kronecker):
        return math.prod(column_support(f) for f in M.factors)
    if isinstance(M, VStack):
        return sum(column_support(b) for b in M.blocks)
    if isinstance(M, Product) and len(M.factors) == 2 and isinstance(M.factors[0], Diagonal):
        return column_support(M.factors[1])
    return M.shape[0]


def max_abs_entry(M: Matrix) -> float:
    """max |M_ij| (exact for the common classes; otherwise the max column L2 norm, an upper bound)."""
    if M.binary:
        return 1.0 if M.sensitivity("l1") > 0 else 0.0
    if isinstance(M, Dense):
        return float(np.abs(M.array).max())
    if isinstance(M, Sparse):
        return float(np.abs(M.matrix.data).max(initial=0.0))
    if isinstance(M, Diagonal):
        return float(np.abs(M.values).max())
    if isinstance(M, Weighted):
        return abs(M.weight) * max_abs_entry(M.base)
    if isinstance(M, Kronecker):
        return math.prod(max_abs_entry(f) for f in M.factors)
    if isinstance(M, VStack):
        return max(max_abs_entry(b) for b in M.blocks)
    return M.sensitivity("l2")
