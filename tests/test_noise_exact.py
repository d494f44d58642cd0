"""The exact samplers of kernel/noise.py against their exact laws, and their rare paths forced.

Goodness of fit: chi-square (alpha = 1e-6, the false-failure rate of each acceptance) over bins with
expected count >= 20. Power: the same samples must be rejected against the law at 0.7x and 1.3x the scale.
Rare paths (a uniform whose digits tie with a table entry, the geometric tail, the exact fallback of every
coin) are forced with scripted random words or by withholding the fast path's certain decisions.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ektelo_ng.kernel import noise
from ektelo_ng.kernel.noise import NoiseSource, discrete_gaussian, discrete_laplace, exponential_mechanism, supported_scale

ALPHA = 1e-6
SAMPLES = 200_000


class Scripted:
    """A duck-typed source: the scripted words first (one list per ``words`` call), then seeded ones."""

    is_seeded = True

    def __init__(self, *calls, seed: int = 0):
        self.calls, self.rest = [np.asarray(c, dtype=np.uint64) for c in calls], NoiseSource.seeded(seed)

    def words(self, size):
        if self.calls:
            head = self.calls.pop(0)[:size]
            return np.concatenate([head, self.rest.words(size - head.size)])
        return self.rest.words(size)


# ---- laws ------------------------------------------------------------------------------------


def laplace_cdf(t, z):
    """P(Z <= z) for integers z: P(Z >= k) = p^k / (1 + p) for k >= 1, p = exp(-1/t)."""
    z, p = np.asarray(z, dtype=float), math.exp(-1 / t)
    return np.where(z < 0, np.exp(z / t) / (1 + p), 1 - np.exp(-(z + 1) / t) / (1 + p))


def gaussian_cdf(sigma, z):
    z = np.asarray(z, dtype=float)
    if sigma > 50:  # the discrete law's CDF differs from the continuity-corrected normal by far less than 1e-9
        return stats.norm.cdf((z + 0.5) / sigma)
    wide = np.arange(-int(12 * sigma) - 12, int(12 * sigma) + 13)
    pmf = np.exp(-(wide.astype(float) ** 2) / (2 * sigma**2))
    cdf = np.cumsum(pmf / pmf.sum())
    return np.interp(z, wide, cdf, left=0.0, right=1.0)


def fits(samples, cdf, scale, width) -> bool:
    """Chi-square over integer bins cut at about 64 points in [-width, width] scales (merged to >= 20)."""
    cuts = np.unique(np.floor(np.linspace(-width, width, 65) * scale).astype(np.int64))
    expected = np.diff(np.r_[0.0, cdf(cuts), 1.0]) * samples.size
    observed = np.bincount(np.searchsorted(cuts, samples, side="left"), minlength=cuts.size + 1).astype(float)
    expected, observed = list(expected), list(observed)
    while min(expected) < 20:
        m = int(np.argmin(expected))
        n = m + 1 if m == 0 or (m + 1 < len(expected) and expected[m + 1] < expected[m - 1]) else m - 1
        expected[n], observed[n] = expected[n] + expected[m], observed[n] + observed[m]
        del expected[m], observed[m]
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    return stats.chi2.sf(statistic, len(expected) - 1) > ALPHA


LAPLACE_SCALES = [1.0, 3.0, 37.5, 1e3, 2.0**20 + 3 * 2**10, 2.0**40]
GAUSSIAN_SCALES = [1.0, 3.0, 37.5, 1e3, 2.0**20 + 3 * 2**10, 2.0**40]


@pytest.mark.parametrize("t", LAPLACE_SCALES)
def test_discrete_laplace_law_with_power(t):
    assert supported_scale("laplace", t) == t
    samples = discrete_laplace(NoiseSource.seeded(1), t, SAMPLES)
    assert samples.dtype == np.int64
    assert fits(samples, lambda z: laplace_cdf(t, z), t, 8)
    assert not fits(samples, lambda z: laplace_cdf(0.7 * t, z), t, 8)
    assert not fits(samples, lambda z: laplace_cdf(1.3 * t, z), t, 8)


@pytest.mark.parametrize("sigma", GAUSSIAN_SCALES)
def test_discrete_gaussian_law_with_power(sigma):
    samples = discrete_gaussian(NoiseSource.seeded(2), sigma, SAMPLES)
    assert samples.dtype == np.int64
    assert fits(samples, lambda z: gaussian_cdf(sigma, z), sigma, 4)
    assert not fits(samples, lambda z: gaussian_cdf(0.7 * sigma, z), sigma, 4)
    assert not fits(samples, lambda z: gaussian_cdf(1.3 * sigma, z), sigma, 4)


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
def test_low_digits_of_large_scales_are_uniform(sampler):
    """At scale 2^40 the law is flat over any 4096 consecutive integers to within 2^-28: the low 12 bits
    (the residue R's uniform low digits, and the Gaussian's bracketed exponent) must be uniform."""
    low = sampler(NoiseSource.seeded(3), 2.0**40, SAMPLES) & 4095
    assert stats.chisquare(np.bincount(low, minlength=4096)).pvalue > ALPHA


def test_secure_draws_in_parallel_have_the_law():
    samples = discrete_laplace(NoiseSource(), 1e3, 1 << 21)  # above the threshold for two threads
    assert fits(samples, lambda z: laplace_cdf(1e3, z), 1e3, 8)


# ---- scales, reproducibility -----------------------------------------------------------------


def test_supported_scales_are_the_11_bit_lattice():
    assert supported_scale("gaussian", 0.3) == 1.0
    assert supported_scale("laplace", 3.7) == 3.701171875 == Fraction(1895, 512)
    assert supported_scale("laplace", 2.0**46) == 2.0**46
    for t in np.random.default_rng(0).uniform(1, 2**46, 1000):
        up = supported_scale("laplace", t)
        assert t <= up <= t * (1 + 2**-10) and supported_scale("gaussian", up) == up
        assert (Fraction(up) / Fraction(2) ** (math.frexp(up)[1] - 11)).denominator == 1
    for bad in [0.0, -1.0, math.inf, math.nan, 2.0**46 + 2**36]:
        with pytest.raises(ValueError):
            supported_scale("laplace", bad)
    with pytest.raises(ValueError):
        supported_scale("cauchy", 3.0)
    for bad in [0.5, 3.7, 2.0**47, math.nan]:
        with pytest.raises(ValueError, match="supported"):
            discrete_laplace(NoiseSource(), bad, 3)
        with pytest.raises(ValueError, match="supported"):
            discrete_gaussian(NoiseSource(), bad, 3)


def test_seeded_sources_reproduce_and_secure_ones_do_not():
    for sampler in (discrete_laplace, discrete_gaussian):
        a, b = (sampler(NoiseSource.seeded(9), 37.5, 10_000) for _ in range(2))
        assert np.array_equal(a, b) and not np.array_equal(a, sampler(NoiseSource.seeded(10), 37.5, 10_000))
        assert not np.array_equal(sampler(NoiseSource(), 37.5, 10_000), sampler(NoiseSource(), 37.5, 10_000))
    pick = [exponential_mechanism(NoiseSource.seeded(4), np.arange(50.0), 0.2, 1.0) for _ in range(2)]
    assert pick[0] == pick[1]
    assert discrete_laplace(NoiseSource(), 3.0, 0).shape == (0,)


# ---- exact arithmetic and the rare paths --------------------------------------------------------


def test_exp_floor_is_exact():
    rng = np.random.default_rng(5)
    with localcontext() as decimal:
        decimal.prec = 150
        for _ in range(1500):
            x = Fraction(int(rng.integers(0, 10 ** rng.integers(1, 13))), int(rng.integers(1, 10**12)))
            bits = int(rng.choice([22, 42, 64, 128, 300]))
            exact = int((-(Decimal(x.numerator) / Decimal(x.denominator))).exp() * Decimal(2) ** bits)
            assert noise._exp_floor(x, bits) == exact
    T1, T2, _, _ = noise._tables()
    assert int(T1[noise._N]) == 1 and int(T2[0]) == 2**16  # exp(-44) 2^64 = 1.4; exp(0) 2^16 exactly


def test_fast_geometric_agrees_with_the_exact_one_everywhere_it_decides():
    T1 = noise._tables()[0]
    k = np.arange(1, 1900)  # beyond, exp(-k/64) 2^64 < 2^21 and neighbouring T1 differ by less than 2
    words = np.r_[T1[k] - 1, T1[k] + 1, np.uint64(2**55 - 1), np.uint64(2**55), np.uint64(2**64 - 2),
                  NoiseSource.seeded(6).words(3000), NoiseSource.seeded(7).words(300) >> np.uint64(10)]
    source = Scripted()  # no word may be drawn: each of these is decided by its first 64 bits
    fast = noise._geometric(source, words.copy())
    assert [noise._geometric_exact(source, int(w)) for w in words] == list(fast)
    assert np.array_equal(source.rest.words(1), NoiseSource.seeded(0).words(1))
    assert list(fast[: 2 * k.size]) == list(k) + list(k - 1)


def test_geometric_ties_are_broken_by_more_digits_with_the_right_odds():
    """U starts with T1[k] = floor(exp(-k/64) 2^64): P(K >= k) is the fraction of that last unit below
    exp(-k/64), i.e. exp(-k/64) 2^64 - T1[k]; the outcome is k or k - 1."""
    T1 = noise._tables()[0]
    k = next(k for k in range(300, 400) if 0.3 < (noise._exp_floor(Fraction(k, 64), 96) % 2**32) / 2**32 < 0.7)
    odds = (noise._exp_floor(Fraction(k, 64), 96) % 2**32) / 2**32
    source = NoiseSource.seeded(8)
    draws = [noise._geometric(source, np.array([T1[k]], dtype=np.uint64))[0] for _ in range(1500)]
    assert set(draws) <= {k, k - 1}
    assert stats.binomtest(draws.count(k), 1500, odds).pvalue > ALPHA
    assert stats.binomtest(draws.count(k), 1500, 0.5 * odds if odds > 0.5 else 0.5 + 0.5 * odds).pvalue < ALPHA


def test_the_geometric_tail_is_memoryless():
    """A first word 0 means U < 2^-64 < exp(-44): K = 2816 + a fresh geometric; a first word 1 ties with
    T1[2816] = 1 and reaches the tail with probability exp(-44) 2^64 - 1 = 0.40."""
    after = np.array([noise._geometric(Scripted(seed=s), np.zeros(1, dtype=np.uint64))[0] for s in range(600)])
    assert after.min() >= noise._N
    p = math.exp(-1 / 64)
    assert stats.kstest(after - noise._N, stats.geom(1 - p, loc=-1).cdf).pvalue > 1e-4
    tail = sum(noise._geometric(Scripted(seed=s), np.ones(1, dtype=np.uint64))[0] >= noise._N for s in range(800))
    assert stats.binomtest(tail, 800, noise._exp_floor(Fraction(44), 80) / 2**16 - 1).pvalue > ALPHA


def test_extreme_first_words_reach_the_far_tail_and_the_center():
    t = 64.0
    z = discrete_laplace(Scripted([0]), t, 1)[0]
    assert abs(z) >= 44 * t
    z = discrete_laplace(Scripted([2**64 - 1]), 2.0**20, 1)[0]  # U just below 1: K = 0, |z| < t / 64
    assert abs(z) < 2.0**20 / 64
    saturating = Scripted(*[[0]] * 1500)  # 1500 tails: K >= 1500 * 2816 > 2^22, so X > 2^62 at t = 2^46
    assert abs(int(discrete_laplace(saturating, 2.0**46, 1)[0])) == 2**62


def test_accept_ties_and_undecided_residuals_are_resolved_exactly():
    """``_accept`` reads one word: U1's 32 digits | U2's 16 digits | V's 16 digits."""
    T1, T2, _, _ = noise._tables()

    def rate(word, i, x, runs=1500):
        exact = lambda m: x  # noqa: E731
        return sum(noise._accept(Scripted([word], seed=s), np.array([i]), 64, exact)[0] for s in range(runs))

    # U2's digits tie with T2[j]: accepted with probability exp(-j/2^16) 2^16 - T2[j].
    j = 777
    odds = (noise._exp_floor(Fraction(j, 2**16), 48) % 2**32) / 2**32
    assert stats.binomtest(rate((int(T2[j]) << 16) | 0x1555, j, Fraction(j, 2**16)), 1500, odds).pvalue > ALPHA
    # U1's digits tie with T1[k] >> 32 (U2 and V certain): probability exp(-k/64) 2^32 - (T1[k] >> 32).
    k = 1000
    odds = (noise._exp_floor(Fraction(k, 64), 64) % 2**32) / 2**32
    assert 0.05 < odds < 0.95
    assert stats.binomtest(rate(int(T1[k]) >> 32 << 32, 1024 * k, Fraction(k, 64)), 1500, odds).pvalue > ALPHA
    # V's digits all ones, f = 2^-17: accepted iff V < exp(-f), probability 1 + 2^16 (exp(-f) - 1).
    odds = 1 + 2**16 * math.expm1(-(2.0**-17))
    hits = rate(0xFFFF, 0, Fraction(1, 2**17))
    assert stats.binomtest(hits, 1500, odds).pvalue > ALPHA and stats.binomtest(hits, 1500, 0.65).pvalue < ALPHA
    # x = 0 is always accepted, even from all-ones digits; a far exponent is refused unless U1 < 2^-32.
    assert rate(2**64 - 1, 0, Fraction(0), runs=20) == 20
    assert rate(2 << 32, 2**40, Fraction(2**24), runs=20) == 0


def test_small_exponent_coins_are_exact_when_the_first_bits_do_not_decide():
    """CKS Algorithm 1 for x = r / (64 step) < 1/64: six bits a == 0 leave the first coin to r / step, and then
    1 comes with probability 1 + 64 (exp(-x) - 1) (1 otherwise)."""
    r, step = np.full(4000, 500), 1000
    hits = noise._bernoulli_exp_small(NoiseSource.seeded(14), r, step, np.zeros(4000, dtype=np.uint64)).sum()
    odds = 1 + 64 * math.expm1(-1 / 128)
    assert stats.binomtest(int(hits), 4000, odds).pvalue > ALPHA
    assert stats.binomtest(int(hits), 4000, odds + 0.05).pvalue < ALPHA
    assert noise._bernoulli_exp_small(NoiseSource.seeded(15), r, step, np.full(4000, 5, dtype=np.uint64)).all()


@pytest.fixture
def slow_paths(monkeypatch):
    """Withhold every certain acceptance of ``_accept`` (th = 2^22: survivors go digit by digit) and make
    every residue's first CKS coin go to its rational Bernoulli (six bits 0)."""
    accept, residues = noise._accept, noise._residues
    monkeypatch.setattr(noise, "_accept", lambda source, i, th, exact: accept(source, i, 1 << 22, exact))
    monkeypatch.setattr(noise, "_residues", lambda *args: residues(*args)[:3] + (np.zeros(args[-1], np.uint64),))


@pytest.mark.parametrize("scale", [3.0, 2.0**30])
def test_the_slow_paths_alone_have_the_law(slow_paths, scale):
    lap = discrete_laplace(NoiseSource.seeded(11), scale, 20_000)
    gau = discrete_gaussian(NoiseSource.seeded(12), scale, 6000)
    assert fits(lap, lambda z: laplace_cdf(scale, z), scale, 8)
    assert not fits(lap, lambda z: laplace_cdf(0.7 * scale, z), scale, 8)
    assert fits(gau, lambda z: gaussian_cdf(scale, z), scale, 4)
    assert not fits(gau, lambda z: gaussian_cdf(0.7 * scale, z), scale, 4)


# ---- the exponential mechanism -------------------------------------------------------------------


def exact_softmax(scores, factor):
    """Selection probabilities from exact rationals (60-digit Decimal exponentials), then rounded."""
    top = max(Fraction(s) for s in scores)
    with localcontext() as decimal:
        decimal.prec = 60
        exponents = [factor * (top - Fraction(s)) for s in scores]
        weights = [(-(Decimal(x.numerator) / x.denominator)).exp() for x in exponents]
        return np.array([float(w / sum(weights)) for w in weights])


def selection_counts(scores, epsilon, sensitivity, runs, seed):
    source = NoiseSource.seeded(seed)
    picks = [exponential_mechanism(source, scores, epsilon, sensitivity) for _ in range(runs)]
    return np.bincount(picks, minlength=len(scores))


@pytest.mark.parametrize(
    "scores, epsilon, sensitivity",
    [([0.0, 1.0, 2.5, 3.0, 0.5], 1.0, 1.0), ([0.1, 0.2, 0.30000000000000004, -7.0, 1e-300], 10.0, 0.5),
     (list(np.linspace(-3, 3, 25)), 1.0, 0.75)],
)
def test_exponential_mechanism_frequencies_with_power(scores, epsilon, sensitivity):
    runs = 12_000
    counts = selection_counts(np.array(scores), epsilon, sensitivity, runs, 3)
    right = exact_softmax(scores, Fraction(epsilon) / (2 * Fraction(sensitivity)))
    keep = right * runs >= 5
    assert stats.chisquare(counts[keep], runs * right[keep] / right[keep].sum()).pvalue > ALPHA
    assert counts[~keep].sum() <= 10
    for wrong_factor in (Fraction(epsilon) / Fraction(sensitivity), Fraction(epsilon) / (3 * Fraction(sensitivity))):
        wrong = exact_softmax(scores, wrong_factor)
        assert stats.chisquare(counts[keep], runs * wrong[keep] / wrong[keep].sum()).pvalue < ALPHA


def test_exponential_mechanism_extremes():
    source = NoiseSource.seeded(13)
    assert all(exponential_mechanism(source, np.array([v]), 1.0, 1.0) == 0 for v in (0.0, -1e300, 5.5))
    far = np.array([0.0, -1e6, 2.0**1000, -(2.0**1000), 2.0**1000 - 2.0**948])  # gaps 2^1000, ..., 2^948
    assert {exponential_mechanism(source, far, 1.0, 1.0) for _ in range(200)} == {2}
    tied = np.array([2.0**1000, 2.0**1000 - 2.0**947])  # gap 2^947 times c = 2^-949: weights 1 and e^-1/4
    counts = np.bincount([exponential_mechanism(source, tied, 2.0**-948, 1.0) for _ in range(4000)], minlength=2)
    assert stats.binomtest(int(counts[1]), 4000, 1 / (1 + math.exp(0.25))).pvalue > ALPHA
    wide = np.zeros(100_000)
    wide[12_345] = 50.0  # one candidate has weight e^25 times each other's: expected O(n) work
    assert exponential_mechanism(source, wide, 1.0, 1.0) == 12_345
    for bad in ([], [np.nan], [np.inf], [2.0**1001]):
        with pytest.raises(ValueError):
            exponential_mechanism(source, np.array(bad), 1.0, 1.0)
    with pytest.raises(ValueError):
        exponential_mechanism(source, np.zeros(3), 0.0, 1.0)
