"""Exact discrete noise: discrete Laplace and discrete Gaussian samplers, the exponential mechanism.

No probability is a float: every random decision compares a uniform U, whose binary digits are random words,
with an exact integer ratio or exp(-x) for rational x (``_exp_floor``); numpy decides from U's first digits
against exact integer tables, and ties go to ``_Uniform``, which draws more digits. See docs/privacy/noise.md.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import numpy as np

_N = 2816  # the geometric table's length: exp(-_N / 64) = exp(-44) < 2^-63; beyond it, memorylessness
_CAP = 1 << 62  # magnitudes saturate here (probability < exp(-2^16), see the docs)
_BLOCK = 1 << 16  # samples per vectorized pass: temporaries stay in cache
_PARALLEL_MIN = 1 << 20


class NoiseSource:
    """Random 64-bit words: the OS CSPRNG by default, or a seeded generator on explicit request."""

    def __init__(self) -> None:
        self._generator: np.random.Generator | None = None

    @classmethod
    def seeded(cls, seed: int) -> NoiseSource:
        """A reproducible (not secure) source; answers drawn from it must be flagged."""
        source = cls()
        source._generator = np.random.Generator(np.random.PCG64(seed))
        return source

    @property
    def is_seeded(self) -> bool:
        return self._generator is not None

    def words(self, size: int) -> np.ndarray:
        """``size`` uniformly random uint64 words."""
        if self._generator is not None:
            return self._generator.integers(0, 2**64, size=size, dtype=np.uint64, endpoint=False)
        return np.frombuffer(os.urandom(8 * size), dtype=np.uint64)


def _exp_floor(x: Fraction, bits: int) -> int:
    """floor(exp(-x) 2^bits) for rational x >= 0, exactly: exp(-x / 2^j) enclosed by its Taylor series in fixed
    point with directed rounding, squared j times; guard bits double until both bounds share a floor."""
    if x == 0:
        return 1 << bits
    n, d = x.numerator, x.denominator
    j = (n // d).bit_length() + 1
    d, guard = d << j, j + 16
    while True:
        p = bits + guard
        lo = hi = term_lo = term_hi = 1 << p
        i = 0
        while term_hi > 1:
            i += 1
            term_lo, term_hi = term_lo * n // (d * i), -(-term_hi * n // (d * i))
            lo, hi = (lo - term_hi, hi - term_lo) if i % 2 else (lo + term_lo, hi + term_hi)
        lo, hi = max(lo - 1, 0), hi + 1
        for _ in range(j):
            lo, hi = lo * lo >> p, -(-(hi * hi) >> p)
        if lo >> guard == hi >> guard:
            return lo >> guard
        guard *= 2


class _Uniform:
    """A uniform U on [0, 1) known by its first ``bits`` binary digits; more are drawn only when needed."""

    def __init__(self, source: NoiseSource, prefix: int, bits: int) -> None:
        self.source, self.prefix, self.bits = source, prefix, bits

    def below_exp(self, x: Fraction) -> bool:
        """Whether U < exp(-x): U lies in [prefix, prefix + 1) / 2^bits, which decides it unless that
        interval holds exp(-x); then 64 more digits are drawn (probability 2^-bits)."""
        while True:
            bound = _exp_floor(x, self.bits)
            if self.prefix != bound:
                return self.prefix < bound
            self.prefix, self.bits = self.prefix << 64 | int(self.source.words(1)[0]), self.bits + 64


@functools.cache
def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """T1[k] = floor(exp(-k/64) 2^64) (T1[0] = 2^64 - 1), T2[j] = floor(exp(-j/2^16) 2^16) for j < 1024,
    the ascending T1[_N..1], and the guide G[b] = #{k >= 1: T1[k] >= b 2^48}."""
    T1 = np.array([2**64 - 1] + [_exp_floor(Fraction(k, 64), 64) for k in range(1, _N + 1)], dtype=np.uint64)
    T2 = np.array([_exp_floor(Fraction(j, 1 << 16), 16) for j in range(1024)], dtype=np.uint64)
    ascending = T1[:0:-1].copy()
    G = _N - np.searchsorted(ascending, np.arange(1 << 16, dtype=np.uint64) << np.uint64(48))
    assert np.all(G[128:-1] - G[129:] <= 1)  # words >= 2^55: at most one threshold per 2^48-wide bucket
    return T1, T2, ascending, G


def _geometric(source: NoiseSource, words: np.ndarray) -> np.ndarray:
    """K with P(K >= k) = exp(-k/64) by inversion of U = words / 2^64 (ties, and K >= _N: ``_geometric_exact``)."""
    T1, _, ascending, G = _tables()
    g = G[words >> 48]
    g -= words > T1[g]
    small = np.flatnonzero(words < 2**55)  # buckets holding several thresholds: binary search
    g[small] = _N - np.searchsorted(ascending, words[small])
    for m in np.flatnonzero((T1[g] == words) | (g == _N)):
        g[m] = _geometric_exact(source, int(words[m]))
    return g


def _geometric_exact(source: NoiseSource, word: int) -> int:
    """K for U beginning with ``word``, by exact comparisons; if U < exp(-_N/64), K = _N + a fresh K."""
    u, base = _Uniform(source, word, 64), 0
    while u.below_exp(Fraction(_N, 64)):
        u, base = _Uniform(source, int(source.words(1)[0]), 64), base + _N
    lo, hi = 0, _N  # U < exp(-lo/64) holds and U < exp(-hi/64) fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if u.below_exp(Fraction(mid, 64)) else (lo, mid)
    return base + lo


def _accept(source: NoiseSource, i: np.ndarray, th: int | np.ndarray, exact: Callable[[int], Fraction]) -> np.ndarray:
    """Independent Bernoulli(exp(-x_m)) coins, exactly, for x_m = exact(m) (called only when needed). Needs
    integers i_m <= 2^16 x_m and, wherever i_m < (_N + 1) 2^10, th_m >= 2^22 (x_m - i_m / 2^16); the three
    coins exp(-k/64) exp(-j/2^16) exp(-f), i = 1024 k + j, are drawn from one word (docs/privacy/noise.md)."""
    T1, T2, _, _ = _tables()
    k, j = i >> 10, i & 1023
    words = source.words(i.size)
    p1, p2, v = words >> 32, words >> 16 & 0xFFFF, (words & 0xFFFF).astype(np.int64)
    t1, t2 = T1[np.minimum(k, _N)] >> 32, T2[j]
    yes = (p1 < t1) & (k <= _N) & (p2 < t2) & (v < ((1 << 22) - th) >> 6)  # k > _N: exp(-k/64) < 2^-63
    no = (p1 > t1) | (p2 > t2)
    for m in np.flatnonzero(~(yes | no)):
        f = exact(int(m)) - Fraction(int(i[m]), 1 << 16)
        assert f >= 0
        coins = [(p1[m], 32, Fraction(int(k[m]), 64)), (p2[m], 16, Fraction(int(j[m]), 1 << 16)), (v[m], 16, f)]
        yes[m] = all(_Uniform(source, int(p), bits).below_exp(x) for p, bits, x in coins)
    return yes


def _bernoulli_exp_small(source: NoiseSource, r: np.ndarray, step: int, a: np.ndarray) -> np.ndarray:
    """Bernoulli(exp(-r / (64 step))), 0 <= r < step, exactly (Canonne, Kamath and Steinke's Algorithm 1)."""
    out, live, k = np.ones(r.size, dtype=bool), np.flatnonzero(a == 0), 1
    while live.size:
        hit = _uniform_below(source, step if k == 1 else 64 * step * k, live.size) < r[live]
        out[live[~hit]] = k % 2 == 1
        live, k = live[hit], k + 1
    return out


def _uniform_below(source: NoiseSource, n: int, size: int) -> np.ndarray:
    """``size`` uniform integers in [0, n): the top bits of words, rejecting values >= n (no modulo bias)."""
    if n == 1:
        return np.zeros(size, dtype=np.int64)
    draw = source.words(2 * size + 64) >> (64 - (n - 1).bit_length())
    draw = draw[draw < n].astype(np.int64)
    return draw[:size] if draw.size >= size else np.r_[draw, _uniform_below(source, n, size - draw.size)]


def supported_scale(kind: str, t: float) -> float:
    """The smallest scale >= t that the samplers support exactly: w 2^e with integer w in [2^10, 2^11) (11
    significant bits, at most 2^-10 above t), from 1 to 2^46 grid units; the float is that rational."""
    if kind not in ("laplace", "gaussian"):
        raise ValueError(f"kind must be 'laplace' or 'gaussian', got {kind!r}")
    t = float(t)
    if not (math.isfinite(t) and 0 < t <= 2.0**46):
        raise ValueError(f"noise scale must be positive and at most 2^46 grid units, got {t}")
    mantissa, exponent = math.frexp(max(t, 1.0))
    return math.ldexp(math.ceil(mantissa * 2048), exponent - 11)


def _lattice(t: float) -> tuple[int, int, int]:
    """(w, b, s) with t = w 2^e = 64 w 2^b / 2^s: b = max(e - 6, 0) <= 30, s = max(6 - e, 0) <= 16."""
    t = float(t)
    if not (math.isfinite(t) and 1 <= t <= 2.0**46 and supported_scale("laplace", t) == t):
        raise ValueError(
            f"noise scale {t} is not supported exactly (1 to 2^46 grid units, 11 significant "
            "bits): round it up with supported_scale"
        )
    mantissa, exponent = math.frexp(t)
    return int(mantissa * 2048), max(exponent - 17, 0), max(17 - exponent, 0)


def _draw(
    sampler: Callable[[NoiseSource, float, int], np.ndarray], source: NoiseSource, scale: float, size: int
) -> np.ndarray:
    """``sampler`` in cache-sized blocks, on all cores for large secure draws (seeded ones stay serial to reproduce)."""
    _lattice(scale)
    _tables()

    def run(n: int) -> np.ndarray:
        out = np.empty(n, dtype=np.int64)
        for start in range(0, n, _BLOCK):
            out[start : start + _BLOCK] = sampler(source, scale, min(_BLOCK, n - start))
        return out

    workers = os.cpu_count() or 1
    if source.is_seeded or workers < 2 or size < _PARALLEL_MIN:
        return run(int(size))
    with ThreadPoolExecutor(workers) as pool:
        return np.concatenate(list(pool.map(run, np.diff(np.linspace(0, size, workers + 1).astype(int)))))


def _residues(source: NoiseSource, w: int, b: int, size: int) -> tuple[np.ndarray, ...]:
    """From one word each: R uniform on [0, w 2^b) (Lemire, then low bits), a fair sign, R's validity, 6 more bits."""
    words = source.words(size)
    lemire = (words >> 40).astype(np.int64) * w
    r = (lemire >> 24 << b) | (words & ((1 << b) - 1)).astype(np.int64)
    return r, (words >> 39 & 1).astype(bool), (lemire & 0xFFFFFF) >= (1 << 24) % w, words >> 30 & 63


def _laplace(source: NoiseSource, t: float, size: int) -> np.ndarray:
    """|Z| = (K w 2^b + R) >> s, geometric with ratio exp(-1/t); a fair sign, (-, 0) drawn again (see noise.md)."""
    w, b, s = _lattice(t)
    step = w << b
    k = _geometric(source, source.words(size))
    r, negative, todo = np.empty(size, dtype=np.int64), np.empty(size, dtype=bool), np.arange(size)
    while todo.size:
        candidate, sign, keep, a = _residues(source, w, b, todo.size)
        keep &= _bernoulli_exp_small(source, candidate, step, a)
        r[todo[keep]], negative[todo[keep]] = candidate[keep], sign[keep]
        todo = todo[~keep]
    magnitude = np.minimum(np.minimum(k, _CAP // step) * step + r >> s, _CAP)
    again = np.flatnonzero(negative & (magnitude == 0))
    if again.size:
        magnitude[again], negative[again] = _laplace(source, t, again.size), False
    return np.where(negative, -magnitude, magnitude)


def discrete_laplace(source: NoiseSource, t: float, size: int) -> np.ndarray:
    """int64 samples with P(z) proportional to exp(-|z| / t), exactly (t from ``supported_scale``)."""
    return _draw(_laplace, source, t, size)


def _gaussian(source: NoiseSource, sigma: float, size: int) -> np.ndarray:
    """Canonne, Kamath and Steinke's Algorithm 3: a discrete Laplace(sigma) proposal y kept with probability
    exp(-(|y| - sigma)^2 / (2 sigma^2)) by one ``_accept`` coin that also accepts its residue (see noise.md)."""
    w, b, s = _lattice(sigma)
    step, q = w << b, max(b - 6, 0)
    center, divisor = 64 * step, w * w << 2 * (b - q)
    cap = (center << 6) >> s
    out, filled = np.empty(size, dtype=np.int64), 0
    while filled < size:
        n = int(1.36 * (size - filled)) + 16
        k = _geometric(source, source.words(n))
        r, negative, keep, _ = _residues(source, w, b, n)
        magnitude = np.minimum(np.minimum(k, _CAP // step) * step + r >> s, _CAP)
        keep &= ~negative | (magnitude != 0)
        m = np.abs((np.minimum(magnitude, cap) << s) - center) >> q
        th = np.where(magnitude > cap, 1 << 22, 128 + (1 + 512 * (2 * m + 1) // divisor if q else 0))
        keep &= _accept(
            source,
            (r << 16) // center + 8 * m * m // divisor,
            th,
            lambda j: Fraction(int(r[j]), center) + Fraction(((int(magnitude[j]) << s) - center) ** 2, 2 * center**2),
        )
        kept = np.where(negative, -magnitude, magnitude)[keep][: size - filled]
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out


def discrete_gaussian(source: NoiseSource, sigma: float, size: int) -> np.ndarray:
    """int64 samples with P(z) proportional to exp(-z^2 / (2 sigma^2)), exactly (sigma from ``supported_scale``)."""
    return _draw(_gaussian, source, sigma, size)


def exponential_mechanism(source: NoiseSource, scores: np.ndarray, epsilon: float, sensitivity: float) -> int:
    """Index i with probability proportional to exp(epsilon * score_i / (2 * sensitivity)), exactly: a uniform i kept
    with probability exp(-c (max - score_i)), floats as rationals, float bounds shrunk past their rounding; noise.md."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.all(np.abs(scores) <= 2.0**1000):
        raise ValueError("scores must be a non-empty vector of finite numbers of magnitude at most 2^1000")
    if not (0 < epsilon < math.inf and 0 < sensitivity < math.inf):
        raise ValueError("epsilon and sensitivity must be positive and finite")
    rate = Fraction(epsilon) / (2 * Fraction(sensitivity))
    if not 2.0**-1000 <= rate <= 2.0**1000:
        raise ValueError("epsilon / sensitivity must lie within 2^-999 and 2^1001")
    low = float(rate) if Fraction(float(rate)) <= rate else math.nextafter(float(rate), 0.0)
    top = scores.max()
    with np.errstate(over="ignore", under="ignore"):
        bound = np.minimum(low * 65536.0 * (top - scores) * (1.0 - 2.0**-50), 2.0**62).astype(np.int64)
    while True:
        pick = _uniform_below(source, scores.size, scores.size)
        gap = lambda m: rate * (Fraction(float(top)) - Fraction(float(scores[pick[m]])))  # noqa: E731
        kept = np.flatnonzero(_accept(source, bound[pick], 65, gap))
        if kept.size:
            return int(pick[kept[0]])
