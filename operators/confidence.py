"""Confidence intervals for answers estimated from noisy measurements.

A least-squares answer's error is a fixed linear combination ``X = sum_j c_j z_j`` of the
measurements' independent noise ``z_j`` (its coefficients come from ``operators.covariance``).
Its distribution, and so the interval ``answer +- q`` with ``P(|X| <= q) = level``, is:

- **Gaussian noise** only: normal, ``q = z_level * sd``, exact.
- **Laplace noise** (``c_j z_j`` is Laplace with scale ``a_j = |c_j| b_j``): the characteristic
  function is ``phi(t) = exp(-g t^2 / 2) prod_j 1 / (1 + a_j^2 t^2)`` (``g``: the Gaussian part's
  variance), and ``P(|X| <= x) = (2 / pi) int_0^inf sin(x t) phi(t) / t dt`` (Gil-Pelaez for a
  symmetric law), integrated numerically to ~1e-9 and solved for ``q``: numerically exact, for one law
  (:func:`laplace_halfwidth`: the reference the many-answer path, ``operators.laplace_laws``, is tested against).
- **Sound bound** when the coefficients are too many to compute: with ``V`` the variance alone,
  ``log E exp(lambda X) <= u^2 / (1 - u^2)`` for ``u = lambda sqrt(V / 2) < 1`` (each Laplace term has
  ``-log(1 - y) <= y / (1 - y)``, ``y = lambda^2 a_j^2 <= u^2``; each Gaussian term
  ``lambda^2 g / 2 <= u^2``), so Chernoff gives ``P(|X| >= k sqrt(V / 2)) <= 2 min_u exp(-u k + u^2 / (1 - u^2))``;
  ``k`` is solved once per level. Wider than exact (about 4.7 sd at 95%), never too narrow. Knowing the largest
  Laplace term's share ``rho = max_j 2 a_j^2 / V`` tightens it: ``y_j <= rho u^2``, so the exponent is at most
  ``-u k + u^2 / (1 - rho u^2)``, which tends to the Gaussian Chernoff bound (about 2.7 sd at 95%) as the
  answer mixes many rows; ``k(rho)`` is tabulated once per level and read at the grid point above ``rho``.

The kernel's noise is discrete on a grid about 2^-20 of its scale; the intervals treat it as
continuous with the same variance (the difference is far below the integration tolerance).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.integrate
import scipy.optimize
import scipy.special

#: Relative rounding under which Laplace scales count as equal (they enter the law as powers).
SCALE_DIGITS = 10


@dataclass(frozen=True)
class ConfidenceIntervals:
    """``lower <= truth <= upper`` with probability ``level`` for each answer; ``method`` says how."""

    answers: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float
    method: str

    @property
    def halfwidths(self) -> np.ndarray:
        return (self.upper - self.lower) / 2

    def covers(self, truth: np.ndarray) -> np.ndarray:
        """Which intervals contain the true answers ``truth``."""
        truth = np.asarray(truth, dtype=np.float64)
        return (self.lower <= truth) & (truth <= self.upper)


def check_level(level: float) -> float:
    """``level`` as a float strictly between 0 and 1 (a clear error otherwise)."""
    if not isinstance(level, numbers.Real) or isinstance(level, bool) or not 0 < level < 1:
        raise ValueError(f"a confidence level must be a number strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    return float(level)


def normal_halfwidths(variances: np.ndarray, level: float) -> np.ndarray:
    """Exact half-widths for Gaussian errors with these variances."""
    z = scipy.special.ndtri(0.5 + check_level(level) / 2)
    return z * np.sqrt(np.asarray(variances, dtype=np.float64))


@lru_cache(maxsize=64)
def chernoff_factor(level: float) -> float:
    """``k`` with ``2 min_{0<u<1} exp(-u k + u^2 / (1 - u^2)) = 1 - level`` (see the module docstring)."""
    target = math.log((1 - check_level(level)) / 2)

    def exponent(k: float) -> float:
        best = scipy.optimize.minimize_scalar(
            lambda u: -u * k + u * u / (1 - u * u), bounds=(0.0, 1.0 - 1e-12), method="bounded",
            options={"xatol": 1e-12},
        )
        return best.fun - target

    return scipy.optimize.brentq(exponent, 1e-9, 1e4, xtol=1e-12)


def bound_halfwidths(variances: np.ndarray, level: float, shares: np.ndarray | None = None) -> np.ndarray:
    """Sound half-widths from the variances (and, if given, each answer's largest Laplace term's share of its
    variance, ``rho``), for any mix of Laplace and Gaussian noise (the module docstring)."""
    spread = np.sqrt(np.asarray(variances, dtype=np.float64) / 2)
    if shares is None:
        return chernoff_factor(check_level(level)) * spread
    grid, factors = _share_table(check_level(level))
    above = np.searchsorted(grid, np.clip(np.asarray(shares, dtype=np.float64), 0.0, 1.0))  # grid[above] >= rho
    return factors[np.minimum(above, grid.size - 1)] * spread


#: The grid of shares ``rho`` the tightened bound is tabulated on: 0, then geometric from 1e-6 to 1.
_SHARES = np.concatenate([[0.0], np.geomspace(1e-6, 1.0, 480)])


@lru_cache(maxsize=8)
def _share_table(level: float) -> tuple[np.ndarray, np.ndarray]:
    """``k(rho)`` at each grid share: the least ``k`` with ``2 min_u exp(-u k + u^2 / (1 - rho u^2)) <= 1 - level``,
    that is ``min_u (u^2 / (1 - rho u^2) + log(2 / (1 - level))) / u`` over ``0 < u < rho^-1/2``."""
    tail = math.log(2 / (1 - level))

    def factor(rho: float) -> float:
        top = 1 / math.sqrt(rho) if rho > 0 else math.sqrt(tail) * 4
        found = scipy.optimize.minimize_scalar(lambda u: (u * u / (1 - rho * u * u) + tail) / u,
                                               bounds=(1e-9, top * (1 - 1e-12)), method="bounded",
                                               options={"xatol": 1e-12})
        return float(found.fun) * (1 + 1e-9)  # any u gives a sound k; the margin covers the minimizer's rounding

    return _SHARES, np.array([factor(float(rho)) for rho in _SHARES])


def central_probability(x: float, laplace_scales: np.ndarray, gaussian_variance: float) -> float:
    """``P(|X| <= x)`` for ``X`` = sum of independent Laplace(``laplace_scales``) plus N(0, ``gaussian_variance``)."""
    scales, counts = _compressed(laplace_scales)
    variance = 2 * float(counts @ scales**2) + gaussian_variance
    if not variance > 0:
        return 1.0
    return _central(x / math.sqrt(variance), *_standardized(scales, counts, gaussian_variance, variance))


def laplace_halfwidth(laplace_scales: np.ndarray, gaussian_variance: float, level: float) -> float:
    """The numerically exact ``q`` with ``P(|X| <= q) = level`` (X as in :func:`central_probability`)."""
    level = check_level(level)
    scales, counts = _compressed(laplace_scales)
    variance = 2 * float(counts @ scales**2) + gaussian_variance
    if not variance > 0:
        return 0.0
    standard = _standardized(scales, counts, gaussian_variance, variance)
    upper = chernoff_factor(level) / math.sqrt(2)
    root = scipy.optimize.brentq(lambda x: _central(x, *standard) - level, 0.0, upper, xtol=1e-10)
    return root * math.sqrt(variance)


def _compressed(laplace_scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct non-zero scales (to ``SCALE_DIGITS`` significant digits) and how often each occurs."""
    a = np.abs(np.asarray(laplace_scales, dtype=np.float64).ravel())
    a = a[a > 0]
    if a.size == 0:
        return a, a
    exponent = np.floor(np.log10(a))
    rounded = np.round(a / 10.0**exponent, SCALE_DIGITS - 1) * 10.0**exponent
    scales, counts = np.unique(rounded, return_counts=True)
    return scales, counts.astype(np.float64)


def _standardized(scales, counts, gaussian_variance, variance) -> tuple[np.ndarray, np.ndarray, float]:
    return scales / math.sqrt(variance), counts, gaussian_variance / variance


def _central(x: float, scales: np.ndarray, counts: np.ndarray, gaussian: float) -> float:
    """Gil-Pelaez for a symmetric law of unit variance: (2 / pi) int_0^inf sin(x t) phi(t) / t dt."""
    if x <= 0:
        return 0.0

    def phi(t: float) -> float:
        return math.exp(-0.5 * gaussian * t * t - float(counts @ np.log1p((scales * t) ** 2)))

    split = 8 * math.pi / x
    head, _ = scipy.integrate.quad(lambda t: math.sin(x * t) * phi(t) / t if t > 0 else x, 0.0, split,
                                   limit=200, epsabs=1e-11, epsrel=1e-10)
    tail, _ = scipy.integrate.quad(lambda t: phi(t) / t, split, np.inf, weight="sin", wvar=x,
                                   limlst=100, epsabs=1e-11)
    return min(1.0, max(0.0, 2 / math.pi * (head + tail)))
