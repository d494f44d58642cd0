"""The vetted measurement mechanisms: vector Laplace and Gaussian, the exponential mechanism, DAWA's noisy
dyadic deviations, PHP's split points, EFPA's number of Fourier coefficients, StructureFirst's boundaries,
PrivBayes's network steps. ``prepare_*`` derives scale, grid and charge from the operator's own parameters; the
service charges; only then ``release`` draws exact integer noise codes onto a power-of-two grid whose rounding
slack is charged (docs/privacy/laplace.md, arithmetic.md, noise.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from .matrix import Fourier, HStack, Kronecker, Matrix, Product, Transpose, VStack, Weighted
from .matrix.rounding import EXACT, LIMIT, UNIT, Evaluation, evaluation, gamma, leaf_entries
from .noise import NoiseSource, discrete_gaussian, discrete_laplace, exponential_mechanism, grid_step, supported_scale
from .privacy import PureDP, ZCDP

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
        codes = np.rint(np.asarray(values, dtype=np.float64) / self.grid).astype(np.int64)  # below 2^61: _grid
        sample = discrete_laplace if self.noise == "laplace" else discrete_gaussian
        codes += sample(source, self.scale / self.grid, codes.size)
        return codes * self.grid


def release_many(prepared: list[Prepared], values: list[np.ndarray], source: NoiseSource) -> list[np.ndarray]:
    """``prepared[i].release(values[i], source)`` for every i, one draw per noise law (independent either way)."""
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
    """A kernel-built matrix and the public facts that set its noise, each computed once (a batch reuses them):
    proven upper bounds for the arithmetic the kernel runs (kernel.matrix.rounding, docs/privacy/arithmetic.md)."""

    def __init__(self, matrix: Matrix):
        self.matrix = matrix
        self._sensitivity: dict[str, float] = {}
        self._evaluations: dict[tuple[float, bool], Evaluation] = {}

    @staticmethod
    def of(M: Matrix | MatrixFacts) -> MatrixFacts:
        return M if isinstance(M, MatrixFacts) else MatrixFacts(M)

    def evaluation(self, size: float, integral: bool = True) -> Evaluation:
        """Bounds on the kernel's float evaluation of M on (if ``integral``, integer) vectors of L1 norm <= size."""
        if (size, integral) not in self._evaluations:
            self._evaluations[size, integral] = evaluation(self.matrix, size, integral)
        return self._evaluations[size, integral]

    def sensitivity(self, norm: Literal["l1", "l2"]) -> float:
        """An upper bound on the exact matrix's largest column norm: the computed norms (exact for integer L1),
        plus a column's rounding error, a relative margin for the norms' own sums, products and roots, and an
        absolute one for underflows (2^-1074 per product or square). Refuses a matrix with no non-zero entries."""
        if norm not in self._sensitivity:
            unit = self.evaluation(1.0)
            if not unit.peak < LIMIT:
                raise ValueError(f"this matrix has entries or products up to {unit.peak:.3g}, beyond what the kernel "
                                 "evaluates safely (2^500): rescale it")
            computed, margin = self.matrix.sensitivity(norm), 1 + gamma(4 * sum(self.matrix.shape) + 64)
            if unit.exact and unit.size < EXACT:  # integer columns: exact L1 norms; L2 roots exact if integral
                exact_root = computed == round(computed) < 2**26  # then sqrt(q) rounds to k only for q = k^2
                computed = computed if norm == "l1" or exact_root else computed * margin
            else:
                operations = float(self.matrix.shape[0]) * self.matrix.shape[1] + 64
                underflow = operations * 2.0**-1074 if norm == "l1" else math.sqrt(operations) * 2.0**-537
                computed = (computed + unit.error) * margin + underflow
            if not computed > 0:
                raise ValueError("the matrix has no non-zero entries: it measures nothing")
            self._sensitivity[norm] = computed
        return self._sensitivity[norm]

    def released(self, norm: Literal["l1", "l2"], size: float, integral: bool = True) -> tuple[float, Evaluation]:
        """(sensitivity of what the kernel releases on vectors of L1 norm <= size, the evaluation bounds):
        each neighbour's float result is within ``error`` (L1, hence L2) of the exact one."""
        bounds = self.evaluation(size, integral)
        if not bounds.peak < LIMIT:
            raise ValueError(f"this matrix's products can reach {bounds.peak:.3g} on vectors of up to {size:.3g} "
                             "records, beyond what the kernel evaluates safely (2^500): rescale it")
        return self.sensitivity(norm) + 2 * bounds.error, bounds


def prepare_laplace(M: Matrix | MatrixFacts, epsilon: Fraction, size: float, unit: Unit) -> Prepared:
    """Laplace noise for M x (||x||_1 <= size): scale (released L1 sensitivity + slack) / eps; charge eps (eps^2/2)."""
    M = MatrixFacts.of(M)
    sensitivity, bounds = M.released("l1", size)
    grid, slack = _grid(M.matrix, sensitivity / float(epsilon), bounds, "l1")
    return _laplace(Fraction(sensitivity) + Fraction(slack), grid, epsilon, unit)


def _laplace(sensitivity: Fraction, grid: float, epsilon: Fraction, unit: Unit) -> Prepared:
    cost = epsilon if unit is PureDP else epsilon * epsilon / 2
    return Prepared("laplace", _sampled("laplace", sensitivity / epsilon, grid), grid, cost)


def _sampled(noise: Literal["laplace", "gaussian"], squared_or_scale: Fraction, grid: float, root: bool = False
             ) -> float:
    """The smallest scale the exact samplers draw that is >= the exact scale (or >= its square root, when
    ``root``); refused, before any charge, if out of their range."""
    units = squared_or_scale / (Fraction(grid) ** 2 if root else Fraction(grid))
    t = math.sqrt(units) if root else float(units)
    while Fraction(t) ** (2 if root else 1) < units:
        t = math.nextafter(t, math.inf)
    return supported_scale(noise, t) * grid


def dyadic_deviations(x: np.ndarray) -> np.ndarray:
    """DAWA's costs sum_i |x_i - mean| of the aligned dyadic blocks of widths 2, 4, .., 2^K >= n (clipped), by level."""
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


def split_sensitivity(length: int, size: float) -> float:
    """SPLIT_SENSITIVITY plus twice the float error of a score on ``length`` cells holding at most ``size``
    records: 12 gamma_{2 length + 5} size (two sums of |x_i - mean|, means from a cumsum and a division)."""
    return SPLIT_SENSITIVITY + 2 * 12 * gamma(2 * length + 5) * size


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


@functools.lru_cache(maxsize=64)
def _fourier_unit_error(n: int) -> float:
    return evaluation(Fourier(n), 1.0, True).error  # per record; computed once per size (its norms cost 0.1 s)


def fourier_sensitivity(n: int, size: float, offsets: np.ndarray) -> float:
    """FOURIER_SENSITIVITY plus twice the float error of a score -(tail + offset): the coefficients'
    rounding (L1, hence L2) and relative gamma_{n+6} for the squares, sums, root and the offset's addition."""
    coefficients = _fourier_unit_error(n) * max(size, 1.0)  # the bound is a S + b <= (a + b) S for S >= 1
    return FOURIER_SENSITIVITY + 2 * (coefficients + gamma(n + 6) * (2 * size + float(np.max(np.abs(offsets)))))


def fourier_tail_norms(x: np.ndarray) -> np.ndarray:
    """||x - P_k x||_2 for k = 1 .. n, P_k the projection on the k lowest Fourier frequencies (what EFPA drops)."""
    energy = (Fourier(x.size) @ x) ** 2
    tails = np.sqrt(np.maximum(np.cumsum(energy[::-1])[::-1], 0.0))  # tails[r] = ||c[r:]||
    return np.append(tails[1:], 0.0)


def interval_sse(x: np.ndarray) -> np.ndarray:
    """sse[a, b] = sum_{a <= i < b} (x_i - mean)^2, 0 <= a < b <= n (inf elsewhere): prefix sums, stored by b."""
    s1, s2 = np.append(0.0, np.cumsum(x)), np.append(0.0, np.cumsum(x * x))
    positions = np.arange(x.size + 1, dtype=np.float64)
    by_end = np.empty((x.size + 1, x.size + 1))
    for start in range(0, x.size + 1, 256):
        stop = min(x.size + 1, start + 256)
        length = positions[start:stop, None] - positions[None, :]  # b - a
        sums = s1[start:stop, None] - s1[None, :]
        block = np.subtract(s2[start:stop, None], s2[None, :], out=by_end[start:stop])
        with np.errstate(divide="ignore", invalid="ignore"):
            block -= sums * sums / length
        block[length <= 0] = np.inf
        np.maximum(block, 0.0, out=block)
    return by_end.T


def bucket_costs(x: np.ndarray, most: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """``interval_sse(x)`` and best[j - 1][q], the least SSE of the first q cells in j = 1..most non-empty buckets."""
    sse = interval_sse(x)
    by_end, best = sse.T, [sse[0].copy()]
    width = 8  # rows of q per block: a block and its sums stay in cache; a >= q has sse[a, q] = inf
    scratch = np.empty((width, sse.shape[0]))
    for _ in range(1, most):
        previous, current = best[-1], np.empty(sse.shape[0])
        for start in range(0, sse.shape[0], width):
            stop = min(sse.shape[0], start + width)
            block = np.add(by_end[start:stop, :stop], previous[None, :stop], out=scratch[: stop - start, :stop])
            current[start:stop] = block.min(axis=1)
        best.append(current)
    return sse, best


def structure_first_sensitivity(n: int, bound: float, buckets: int, size: float) -> float:
    """2 F + 1 for counts clipped to F (docs/privacy/structure-first.md), plus twice the float error of a
    score: prefix sums of x and x^2 (<= F S, S = min(size, n F)) make each SSE off by 8 gamma_{n+4} F S,
    and a score adds up to ``buckets`` of them. Refuses (before any charge) scores that could overflow."""
    reach = min(size, n * bound) * bound * (buckets + 1)
    if not reach < LIMIT:
        raise ValueError(f"the bound {bound} makes StructureFirst's scores too large to compute safely")
    return 2 * bound + 1 + 2 * 10 * gamma(n + buckets + 4) * reach


def structure_first_boundaries(
    source: NoiseSource, costs: tuple[np.ndarray, list[np.ndarray]], buckets: int, epsilon: Fraction,
    sensitivity: float,
) -> list[int]:
    """The buckets - 1 inner boundaries, right to left, each by the exponential mechanism at eps / (buckets - 1)
    on -(least SSE left of it in j buckets + SSE of the bucket it closes) (docs/privacy/structure-first.md)."""
    sse, best = costs
    boundaries, right = [], sse.shape[0] - 1
    for j in range(buckets - 1, 0, -1):
        candidates = np.arange(j, right)  # j buckets left of the boundary, a non-empty one right of it
        scores = -(best[j - 1][candidates] + sse[candidates, right])
        right = int(candidates[select_worst(source, scores, epsilon / (buckets - 1), sensitivity)])
        boundaries.append(right)
    return boundaries[::-1]


def dependence_score(counts: np.ndarray, child: int) -> float:
    """PrivBayes's score of a child (axis) given its parents, sum |c(x, pi) - c(x) c(pi) / n|: float64 (counts and
    their sums exact) summed by fsum, the same work for any n, off by < 2^-50 n (docs/privacy/privbayes.md)."""
    c = np.moveaxis(counts, child, 0).reshape(counts.shape[child], -1).astype(np.float64)
    n = max(c.sum(), 1.0)  # an empty table: all zeros, scored 0 by the same work (its skip took 1/20 the time)
    return math.fsum(np.abs(c - np.outer(c.sum(1), c.sum(0)) / n).ravel())


def dependence_sensitivity(size: float) -> float:
    """4, plus twice the rounding of a score of at most size records (docs/privacy/privbayes.md)."""
    return 4 + 2.0**-49 * size


def prepare_dyadic_deviations(n: int, size: float, epsilon: Fraction, unit: Unit) -> Prepared:
    """Laplace noise for :func:`dyadic_deviations` of an n-cell vector (n >= 2) of at most ``size`` records: L1
    sensitivity sum_{k=1..K} 2 (1 - 2^-k) (one block per level holds a cell, each moving <= 2 (1 - 1/L)), plus
    per level twice the float error 4 gamma_{2n+4} size and one grid step (docs/privacy/dawa.md)."""
    levels = (n - 1).bit_length()
    sensitivity = sum(2.0 * (1.0 - 2.0**-k) for k in range(1, levels + 1)) + 2 * levels * 4 * gamma(2 * n + 4) * size
    grid = grid_step(sensitivity / float(epsilon) / levels)
    if not 2 * size * (1 + gamma(2 * n + 4)) / grid < _INT_LIMIT:
        raise ValueError("the deviations can be too large for the release grid at this epsilon: use a smaller one")
    return _laplace(Fraction(sensitivity) + Fraction(grid) * levels, grid, epsilon, unit)


def prepare_gaussian(M: Matrix | MatrixFacts, rho: Fraction | None, sigma: float | None, size: float,
                     unit: Unit) -> Prepared:
    """Gaussian noise for M x, x integral with ||x||_1 <= size; charge rho = (released L2 sensitivity +
    slack)^2 / (2 sigma^2), zCDP sessions only."""
    if unit is not ZCDP:
        raise ValueError("Gaussian noise needs a zCDP session (a ZCDP budget); this session is pure DP")
    M = MatrixFacts.of(M)
    sensitivity, bounds = M.released("l2", size)
    if rho is not None:
        grid, slack = _grid(M.matrix, sensitivity / math.sqrt(2 * float(rho)), bounds, "l2")
        squared = (Fraction(sensitivity) + Fraction(slack)) ** 2 / (2 * rho)
        return Prepared("gaussian", _sampled("gaussian", squared, grid, root=True), grid, rho)
    grid, slack = _grid(M.matrix, sigma, bounds, "l2")
    sigma = _sampled("gaussian", Fraction(sigma), grid)
    cost = (Fraction(sensitivity) + Fraction(slack)) ** 2 / (2 * Fraction(sigma) ** 2)
    return Prepared("gaussian", sigma, grid, cost)


def prepare_exponential(W: Matrix, estimate: np.ndarray, size: float, epsilon: Fraction) -> float:
    """Sensitivity of the float scores |W x - W x_hat|: max |w_ij| plus twice a score's rounding (W's error on
    an entry of x - x_hat, and max |w_ij| times the subtraction's), checked (docs/privacy/exponential-mechanism.md)."""
    W = MatrixFacts.of(W)
    reach = (size + float(np.abs(estimate).sum())) * (1 + gamma(estimate.size + 2))
    _, bounds = W.released("l1", reach, integral=False)
    largest = max_abs_entry(W)
    sensitivity = largest + 2 * (bounds.entry_error + UNIT * largest * reach)
    return selectable(epsilon, sensitivity)


def exponential_cost(epsilon: Fraction, unit: Unit) -> Fraction:
    return epsilon if unit is PureDP else epsilon * epsilon / 8


def selectable(epsilon: Fraction, sensitivity: float) -> float:
    """``sensitivity``, checked before any charge to give a rate epsilon / (2 sensitivity) the exact sampler accepts."""
    if not (sensitivity > 0 and 2.0**-1000 <= epsilon / (2 * Fraction(sensitivity)) <= 2.0**1000):
        raise ValueError(f"epsilon {float(epsilon):.3g} over twice the score sensitivity {sensitivity:.3g} must lie "
                         "between 2^-1000 and 2^1000: rescale the scores")
    return sensitivity


def select_worst(source: NoiseSource, scores: np.ndarray, epsilon: Fraction, sensitivity: float) -> int:
    return int(exponential_mechanism(source, scores, epsilon, sensitivity))


# ---- helpers -------------------------------------------------------------------------------


def _grid(M: Matrix, scale: float, bounds: Evaluation, norm: str) -> tuple[float, float]:
    """Release grid step (a power of two) and the sensitivity slack its rounding adds: none for exact integer
    answers (step <= 1); else every row may round differently, step about 2^-20 of the scale per row. Coarse
    enough that no code reaches 2^61, so the release cannot overflow (docs/privacy/arithmetic.md)."""
    reach = bounds.peak + bounds.error
    floor = 2.0 ** math.ceil(math.log2(reach / 2.0**61)) if reach > 0 else 0.0
    if bounds.exact and floor <= 1.0:
        return max(min(1.0, grid_step(scale)), floor), 0.0
    grid = max(grid_step(scale / M.shape[0]), floor)
    return grid, grid * (M.shape[0] if norm == "l1" else math.isqrt(M.shape[0] - 1) + 1)  # >= sqrt(m)


def max_abs_entry(M: MatrixFacts) -> float:
    """An upper bound on max |M_ij|: exact for leaves, composed through the structure, else the largest column norm."""
    m = M.matrix
    if isinstance(m, Weighted):
        return abs(m.weight) * max_abs_entry(MatrixFacts(m.base)) * (1 + UNIT)
    if isinstance(m, Kronecker):
        return math.prod(max_abs_entry(MatrixFacts(f)) for f in m.factors) * (1 + gamma(len(m.factors)))
    if isinstance(m, (VStack, HStack)):
        return max(max_abs_entry(MatrixFacts(b)) for b in m.blocks)
    if isinstance(m, Transpose):
        return max_abs_entry(MatrixFacts(m.base))
    return M.sensitivity("l1") if isinstance(m, Product) else leaf_entries(m)[0]
