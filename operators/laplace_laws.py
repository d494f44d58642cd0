"""Exact confidence half-widths for many answers at once, each answer's error a sum of independent Laplace terms
plus a Gaussian part (the law ``operators.confidence`` describes): a million answers in seconds.

Three steps, each with its error accounted for so that an interval can be wider than exact, never narrower:

1. **Scales on a grid.** Every Laplace scale is rounded *up* to the grid ``2^(m / GRID)`` (at most 0.034% per
   rounding), and after the law is put in units near its sd, scales below ``2^FLOOR_OCTAVES`` up to that floor.
   Rounding a scale up can only widen the interval: any sum ``Y`` of independent Laplace and Gaussian terms is
   log-concave, so symmetric and unimodal, and ``s -> P(|Y + s| <= x)`` is even and non-increasing in ``|s|``;
   ``|a L|`` grows stochastically with ``a``, so ``P(|Y + a L| <= x) = E P(|Y + a L| <= x | L)`` falls as ``a``
   grows (Anderson's argument; the same holds for the Gaussian part's variance, rounded up too). Multiplying every
   scale by ``r`` multiplies the quantile by ``r``, so ``k`` roundings give at most ``2^(k / GRID) - 1`` more than
   the exact width. Laws equal after rounding, up to a grid shift, share one computation.
2. **Gil-Pelaez with a bounded tail.** ``P(|X| <= x) = (2/pi) int_0^inf sin(x t) f(t) dt`` with ``f = phi / t``.
   On ``[0, T]``: Gauss-Legendre panels of width 1 with ``NODES`` nodes (the integrand is analytic, ``phi``'s poles
   lie at least ``sqrt(2) / r`` from the real axis for a law of variance about 1: error far below 1e-12). Beyond
   ``T >= 2`` every factor of ``f`` is positive, decreasing and convex, so two integrations by parts give
   ``int_T^inf sin(x t) f(t) dt = cos(x T) f(T) / x - sin(x T) f'(T) / x^2 + R`` with ``|R| <= |f'(T)| / x^2``;
   ``R``'s bound is subtracted (a lower bound on the probability: the interval errs wide), and ``T`` is the
   smallest power of two that makes it below ``TAIL`` at the smallest possible quantile.
3. **The quantile from a grid.** The probability and the density on ``GRID_POINTS`` points up to the Chernoff
   bound (``confidence.chernoff_factor``, which holds for every law and is the fallback), for all laws at once by
   matrix products; the quantile in its cell by cubic Hermite interpolation (about 1e-8 off), then one Newton
   step on the probability itself (off by the square of that: the quadrature's own error remains, about 1e-12).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from .confidence import check_level, chernoff_factor

#: Grid points per octave of scale: a rounding up widens by at most 2^(1/2048) - 1 = 0.034%.
GRID = 2048
#: Scales below 2^FLOOR_OCTAVES of a law's sd count as that much (rounding up: sound, and negligible).
FLOOR_OCTAVES = -24
#: Gauss-Legendre nodes per unit panel of the truncated integral.
NODES = 10
#: The largest probability the truncation's remainder may take from the answer.
TAIL = 1e-9
#: Truncation points tried (powers of two): a law dominated by one Laplace term needs the largest.
TRUNCATIONS = 2.0 ** np.arange(2, 12)
#: Points of the probability grid each law's quantile is interpolated on.
GRID_POINTS = 64
#: Laws integrated at once (their characteristic functions: LAW_BLOCK x nodes floats).
LAW_BLOCK = 2048
#: Sets of laws whose quantiles are remembered (the most recently used; keyed by the laws' hashes and the level).
REMEMBER = 64
#: ... of at most this many laws each (so at most about 100 MB in all).
REMEMBER_LAWS = 1 << 16

_REMEMBERED: OrderedDict[tuple[bytes, float], np.ndarray] = OrderedDict()


@dataclass(frozen=True)
class Laws:
    """Laws ``i = 0 .. len(gaussian) - 1``: law ``i`` is ``N(0, gaussian[i])`` plus, for every entry ``e`` with
    ``law[e] == i``, ``counts[e]`` independent Laplace terms of scale ``2^(bins[e] / GRID)``."""

    law: np.ndarray
    bins: np.ndarray
    counts: np.ndarray
    gaussian: np.ndarray
    #: How many times each scale was rounded up to the grid (besides the floor): the intervals are at most
    #: ``widening`` wider than exact.
    roundings: int = 1

    @property
    def widening(self) -> float:
        """The most by which an interval from these laws exceeds the exact one, relative (from ``roundings``)."""
        return 2.0 ** ((self.roundings + 1) / GRID) - 1  # one more: a law's own rounding to its floor and Gaussian grid


def grid_bins(scales: np.ndarray) -> np.ndarray:
    """The least grid points at or above positive ``scales`` (``2^(m / GRID) >= scale``)."""
    scales = np.asarray(scales, dtype=np.float64)
    mantissa, exponent = np.frexp(scales)  # scale = mantissa 2^exponent, mantissa in [0.5, 1)
    bins = np.ceil(np.log2(mantissa) * GRID).astype(np.int64) + exponent.astype(np.int64) * GRID
    low = np.exp2((bins - exponent * GRID) / GRID) < mantissa  # log2's rounding: never a point below the scale
    return bins + low


def coefficient_laws(blocks: list[np.ndarray], laplace: np.ndarray) -> Laws:
    """The laws of answers whose errors are ``c @ z`` for the rows ``c`` of ``blocks`` (answers x measured rows)
    and unit-variance noise ``z``, Laplace where ``laplace`` (a term of scale ``|c_j| / sqrt 2``), else Gaussian."""
    law, bins, gaussian, start = [], [], [], 0
    for c in blocks:
        answer, row = np.nonzero(c[:, laplace])
        law.append(answer + start)
        bins.append(grid_bins(np.abs(c[:, laplace][answer, row]) / math.sqrt(2)))
        gaussian.append(np.sum(c[:, ~laplace] ** 2, axis=1))
        start += c.shape[0]
    law, bins = np.concatenate([np.zeros(0, np.int64), *law]), np.concatenate([np.zeros(0, np.int64), *bins])
    return Laws(law, bins, np.ones(law.size), np.concatenate([np.zeros(0), *gaussian]))


def kronecker_laws(products: list[tuple[float, list[np.ndarray]]], noise: str,
                   work_limit: int) -> tuple[np.ndarray, Laws] | None:
    """The laws of the answers of Kronecker products under one Kronecker measurement: per product a multiplier and
    per factor its coefficients (rows measured x factor rows), an answer's coefficients being the multiplier times
    the Kronecker product of its factors' columns. Each factor's columns are rounded to the grid and those with
    equal histograms share a law, then the factors combine (scales multiply: grid points add). Returns the law of
    each answer (in row order) and the laws; None past ``work_limit`` terms."""
    answer_laws, parts, offset = [], [], 0
    for multiplier, coefficients in products:
        if noise != "laplace":  # Gaussian: each answer's variance is the product of its factors' sums of squares
            variance = np.ones(1)
            for c in coefficients:
                variance = np.multiply.outer(variance, np.sum(c * c, axis=0)).ravel()
            parts.append(Laws(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), multiplier**2 * variance))
            answer_laws.append(offset + np.arange(variance.size))
            offset += variance.size
            continue
        law, bins, counts, count, of_answer = np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1), 1, np.zeros(1, np.int64)
        for c in coefficients:
            f_law, f_bins, f_counts, f_count, f_of_answer = _distinct_columns(c)
            if law.size * f_law.size > work_limit:
                return None
            law = np.add.outer(law * f_count, f_law).ravel()
            bins = np.add.outer(bins, f_bins).ravel()
            counts = np.multiply.outer(counts, f_counts).ravel()
            of_answer = np.add.outer(of_answer * f_count, f_of_answer).ravel()
            count *= f_count
        bins = bins + grid_bins(np.array([abs(multiplier) / math.sqrt(2)]))[0]  # unit Laplace noise: scale 1/sqrt 2
        parts.append(Laws(law + offset, bins, counts, np.zeros(count), len(coefficients) + 1))
        answer_laws.append(of_answer + offset)
        offset += count
    joined = Laws(*(np.concatenate([np.zeros(0, dtype), *(getattr(p, name) for p in parts)])
                    for name, dtype in (("law", np.int64), ("bins", np.int64), ("counts", float), ("gaussian", float))),
                  max((p.roundings for p in parts), default=1))
    return np.concatenate([np.zeros(0, np.int64), *answer_laws]), joined


def _distinct_columns(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """The columns of ``c`` as grid histograms of their non-zero magnitudes, equal ones merged: the entries' law,
    grid point and count, the number of laws, and each column's law."""
    answer, measured = np.nonzero(c.T)
    bins = grid_bins(np.abs(c.T[answer, measured]))
    low = int(bins.min(initial=0))
    table = scipy.sparse.csr_array((np.ones(answer.size), (answer, bins - low)),
                                   shape=(c.shape[1], int(bins.max(initial=low)) - low + 1))
    table.sum_duplicates()
    keys = np.column_stack([_row_hash(table, seed) for seed in (1, 2)])
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    distinct = table[first].tocoo()
    return (distinct.row.astype(np.int64), distinct.col.astype(np.int64) + low, distinct.data, first.size,
            inverse.ravel().astype(np.int64))


def halfwidths(laws: Laws, level: float) -> np.ndarray:
    """Each law's ``q`` with ``P(|X| <= q) >= level``, at most ``widening`` wider than the exact one (the module
    docstring); 0 for a law without noise."""
    level = check_level(level)
    count = laws.gaussian.size
    top = _log2_variances(laws)
    noisy = np.isfinite(top)
    shift = np.where(noisy, np.floor(top / 2 * GRID), 0).astype(np.int64)  # each law's sd, in grid points
    floor = FLOOR_OCTAVES * GRID
    bins = np.maximum(laws.bins - shift[laws.law], floor) - floor
    table = scipy.sparse.csr_array((laws.counts.astype(np.float64), (laws.law, bins)),
                                   shape=(count, int(bins.max(initial=0)) + 1))
    table.sum_duplicates()
    positive = laws.gaussian > 0
    scaled = np.exp2(np.where(positive, np.log2(np.where(positive, laws.gaussian, 1.0)) - 2 * shift / GRID, -np.inf))
    gaussian = np.ceil(np.ldexp(scaled, 40)) / 2.0**40  # up to a grid too: sound
    keys = np.column_stack([_row_hash(table, seed) for seed in (1, 2)] + [gaussian.view(np.uint64)])
    _, first, inverse = np.unique(keys[noisy], axis=0, return_index=True, return_inverse=True)
    representatives = np.flatnonzero(noisy)[first]
    remembered = (keys[representatives].tobytes(), level)  # the same strategy run again: the same laws
    unit = _REMEMBERED.pop(remembered, None)
    if unit is None:
        unit = np.concatenate([np.empty(0)] + [
            _standard_quantiles(table[chunk], gaussian[chunk], level)
            for chunk in np.array_split(representatives, max(1, -(-representatives.size // LAW_BLOCK)))])
    if representatives.size <= REMEMBER_LAWS:
        _REMEMBERED[remembered] = unit
    while len(_REMEMBERED) > REMEMBER:
        _REMEMBERED.popitem(last=False)
    found = np.zeros(count)
    found[noisy] = unit[inverse.ravel()] * np.exp2(shift[noisy] / GRID)
    return found


def _log2_variances(laws: Laws) -> np.ndarray:
    """``log2`` of each law's variance (rounded scales), without overflow or underflow; -inf for no noise."""
    count = laws.gaussian.size
    terms = 1 + 2 * laws.bins / GRID + np.log2(laws.counts)  # log2(counts 2 scale^2)
    positive = laws.gaussian > 0
    gaussian = np.log2(np.where(positive, laws.gaussian, 1.0))
    top = np.where(positive, gaussian, -np.inf)
    np.maximum.at(top, laws.law, terms)
    safe = np.where(np.isfinite(top), top, 0.0)
    total = np.bincount(laws.law, weights=np.exp2(terms - safe[laws.law]), minlength=count)
    total = total + np.exp2(np.where(positive, gaussian - safe, -np.inf))
    return np.where(total > 0, safe + np.log2(np.where(total > 0, total, 1.0)), -np.inf)


def _row_hash(table: scipy.sparse.csr_array, seed: int) -> np.ndarray:
    """A 64-bit hash of each row of whole counts, ``sum_j count_j salt_j mod 2^64`` with random odd salts: equal
    rows, equal hashes; unequal ones collide with probability about 2^-64 per pair (two seeds: 2^-128)."""
    salt = np.random.default_rng(seed).integers(0, 2**63, size=table.shape[1], dtype=np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        mixed = table.data.astype(np.uint64) * salt[table.indices]
        running = np.concatenate([np.zeros(1, np.uint64), np.cumsum(mixed, dtype=np.uint64)])
        return running[table.indptr[1:]] - running[table.indptr[:-1]]


def _standard_quantiles(table: scipy.sparse.csr_array, gaussian: np.ndarray, level: float) -> np.ndarray:
    """Quantiles of noisy laws whose scales are ``2^((column + FLOOR_OCTAVES GRID) / GRID)`` (variance about 1)."""
    used = np.unique(table.indices)
    squares = np.exp2(2 * (used + FLOOR_OCTAVES * GRID) / GRID)  # scale^2 of each used column
    H = table[:, used]
    variance = 2 * (H @ squares) + gaussian
    reach = chernoff_factor(level) * np.sqrt(variance / 2)  # a sound quantile for each law: the fallback
    x = np.linspace(0, reach.max(), GRID_POINTS + 1)
    smallest = level * math.sqrt(float(variance.min()) / 2)  # a log-concave law of variance V has f(0) <= 1/sqrt(2V)
    truncation = _truncations(H, squares, gaussian, smallest)
    out = np.empty(gaussian.size)
    for T in np.unique(truncation):
        rows = np.flatnonzero(truncation == T)
        law = _Integrand(H[rows], squares, gaussian[rows], float(T))
        rough = _hermite_roots(x, *law.on_grid(x), level, reach[rows])
        out[rows] = np.minimum(law.polished(rough, level), reach[rows])
    return out


def _log_phi(H, squares: np.ndarray, gaussian: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``log phi(t)`` of each law (rows) at each ``t`` (columns), a few ``t`` at a time (squares x t floats)."""
    step = max(1, (1 << 22) // max(squares.size, 1))
    out = np.empty((gaussian.size, t.size))
    for i in range(0, t.size, step):
        part = t[i:i + step] ** 2
        out[:, i:i + step] = -(H @ np.log1p(np.multiply.outer(squares, part))) - 0.5 * np.multiply.outer(gaussian, part)
    return out


def _tail_terms(H, squares: np.ndarray, gaussian: np.ndarray, T: float) -> tuple[np.ndarray, np.ndarray]:
    """``f(T)`` and ``f'(T)`` for ``f = phi / t``."""
    f = np.exp(_log_phi(H, squares, gaussian, np.array([T]))[:, 0]) / T
    slope = -gaussian * T - H @ (2 * squares * T / (1 + squares * T * T)) - 1 / T  # (log f)'
    return f, f * slope


def _truncations(H, squares: np.ndarray, gaussian: np.ndarray, x: float) -> np.ndarray:
    """Per law, the least ``T`` in ``TRUNCATIONS`` whose remainder bound ``|f'(T)| / x^2`` is below ``TAIL``."""
    chosen = np.full(gaussian.size, TRUNCATIONS[-1])
    for T in TRUNCATIONS[::-1]:
        _, slope = _tail_terms(H, squares, gaussian, float(T))
        chosen = np.where(np.abs(slope) / x**2 * 2 / math.pi <= TAIL, T, chosen)
    return chosen


class _Integrand:
    """Laws sharing a truncation ``T``: their characteristic functions at the Gauss-Legendre nodes on ``[0, T]``
    and the tail terms at ``T``, from which ``P(|X| <= x)`` (a lower bound) and the density follow at any ``x``."""

    def __init__(self, H, squares: np.ndarray, gaussian: np.ndarray, T: float) -> None:
        nodes, weights = np.polynomial.legendre.leggauss(NODES)
        left = np.arange(int(T), dtype=np.float64)
        self.t = (left[:, None] + (nodes + 1) / 2).ravel()
        self.weighted = np.exp(_log_phi(H, squares, gaussian, self.t)) * (np.tile(weights / 2, left.size) * 2 / math.pi)
        self.f, self.slope = _tail_terms(H, squares, gaussian, T)
        self.T = T

    def on_grid(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The probability's lower bound and the density at grid points ``x`` (``x[0] = 0``), for every law."""
        t = self.t
        probability = self.weighted @ (np.sin(np.multiply.outer(t, x[1:])) / t[:, None])
        density = self.weighted @ np.cos(np.multiply.outer(t, x))
        first = np.zeros((probability.shape[0], 1))
        return np.hstack([first, probability + self._tail(x[1:][None, :])]), density

    def polished(self, x: np.ndarray, level: float) -> np.ndarray:
        """One Newton step from ``x`` (one per law) towards the level, on the probability itself."""
        phase = np.multiply.outer(x, self.t)
        probability = np.sum(self.weighted * np.sin(phase) / self.t, axis=1) + self._tail(x[:, None])[:, 0]
        density = np.sum(self.weighted * np.cos(phase), axis=1)
        return x - (probability - level) / density

    def _tail(self, x: np.ndarray) -> np.ndarray:
        """``(2 / pi)`` times the tail's two boundary terms less its remainder bound (laws x points)."""
        f, slope, T = self.f[:, None], self.slope[:, None], self.T
        return 2 / math.pi * (f * np.cos(x * T) / x - slope * np.sin(x * T) / x**2 - np.abs(slope) / x**2)


def _hermite_roots(x: np.ndarray, probability: np.ndarray, density: np.ndarray, level: float,
                   reach: np.ndarray) -> np.ndarray:
    """Each law's ``x`` where the cubic Hermite interpolant of its probabilities first reaches ``level``; the
    sound ``reach`` where the grid never does."""
    laws = probability.shape[0]
    above = probability >= level
    cell = np.maximum(np.argmax(above, axis=1), 1)  # first grid point at or above the level
    found = above.any(axis=1)
    rows = np.arange(laws)
    a, h = x[cell - 1], x[cell] - x[cell - 1]
    p0, p1 = probability[rows, cell - 1], probability[rows, cell]
    d0, d1 = density[rows, cell - 1] * h, density[rows, cell] * h
    low, high = np.zeros(laws), np.ones(laws)
    for _ in range(48):  # bisection on the cubic: monotone enough within one cell, and cheap
        s = (low + high) / 2
        value = ((2 * s**3 - 3 * s**2 + 1) * p0 + (s**3 - 2 * s**2 + s) * d0 + (-2 * s**3 + 3 * s**2) * p1
                 + (s**3 - s**2) * d1)
        below = value < level
        low, high = np.where(below, s, low), np.where(below, high, s)
    return np.where(found, np.minimum(a + high * h, reach), reach)
