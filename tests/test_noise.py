"""The samplers against their exact distributions, and an empirical privacy audit of the exponential mechanism.

Goodness of fit: chi-square against the exact pmf, rejecting at alpha = 1e-6 (the false-failure
rate of each acceptance). Each test also shows power: the same test rejects the pmf of a scale
0.7x and 1.3x the true one.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ektelo_ng.operators.matrix import Dense
from ektelo_ng.kernel.limits import Work
from ektelo_ng.kernel.matrix import SealedMatrix
from ektelo_ng.kernel.mechanisms import exponential
from ektelo_ng.operators.normal_form import normal_form
from ektelo_ng.kernel.noise import (
    NoiseSource, discrete_gaussian, discrete_laplace, exponential_mechanism, supported_scale,
)

ALPHA = 1e-6
SAMPLES = 200_000


def laplace_pmf(t, support):
    p = math.exp(-1 / t)
    return (1 - p) / (1 + p) * p ** np.abs(support)


def gaussian_pmf(sigma, support):
    wide = np.arange(-int(40 * sigma) - 50, int(40 * sigma) + 51)
    weights = np.exp(-(wide.astype(float) ** 2) / (2 * sigma**2))
    return np.exp(-(support.astype(float) ** 2) / (2 * sigma**2)) / weights.sum()


def fits(samples, pmf) -> bool:
    """Chi-square over bins with expected count >= 20 (tails pooled)."""
    low, high = int(samples.min()), int(samples.max())
    support = np.arange(low, high + 1)
    probabilities = pmf(support)
    observed = np.bincount(samples - low, minlength=support.size).astype(float)
    expected = probabilities * samples.size
    keep = expected >= 20
    pooled_observed = np.r_[observed[keep], observed[~keep].sum() + samples.size * (1 - probabilities.sum())]
    pooled_expected = np.r_[expected[keep], samples.size - expected[keep].sum()]
    if pooled_expected[-1] < 20:
        pooled_observed[-2] += pooled_observed[-1]
        pooled_expected[-2] += pooled_expected[-1]
        pooled_observed, pooled_expected = pooled_observed[:-1], pooled_expected[:-1]
    statistic = np.sum((pooled_observed - pooled_expected) ** 2 / pooled_expected)
    return stats.chi2.sf(statistic, pooled_observed.size - 1) > ALPHA


@pytest.mark.parametrize("t", [1.0, supported_scale("laplace", 3.7), 25.0])  # scales the exact sampler draws
def test_discrete_laplace_has_the_right_law_and_the_test_has_power(t):
    samples = discrete_laplace(NoiseSource.seeded(1), t, SAMPLES)
    assert samples.dtype == np.int64
    assert fits(samples, lambda s: laplace_pmf(t, s))
    assert not fits(samples, lambda s: laplace_pmf(0.7 * t, s))
    assert not fits(samples, lambda s: laplace_pmf(1.3 * t, s))


@pytest.mark.parametrize("sigma", [1.0, supported_scale("gaussian", 4.2), 30.0])
def test_discrete_gaussian_has_the_right_law_and_the_test_has_power(sigma):
    samples = discrete_gaussian(NoiseSource.seeded(2), sigma, SAMPLES)
    assert fits(samples, lambda s: gaussian_pmf(sigma, s))
    assert not fits(samples, lambda s: gaussian_pmf(0.7 * sigma, s))
    assert not fits(samples, lambda s: gaussian_pmf(1.3 * sigma, s))


def test_secure_source_has_no_seed_and_does_not_repeat():
    source = NoiseSource()
    assert not source.is_seeded and not any("seed" in name for name in vars(source))
    assert not np.array_equal(source.words(64), NoiseSource().words(64))
    a, b = NoiseSource.seeded(5), NoiseSource.seeded(5)
    assert a.is_seeded and np.array_equal(a.words(64), b.words(64))
    u = (source.words(100_000) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    assert stats.kstest(u, "uniform").pvalue > ALPHA


def softmax(scores, factor):
    weights = np.exp(factor * (scores - scores.max()))
    return weights / weights.sum()


def selection_counts(scores, epsilon, sensitivity, runs, seed):
    source = NoiseSource.seeded(seed)
    picks = [exponential_mechanism(source, scores, epsilon, sensitivity) for _ in range(runs)]
    return np.bincount(picks, minlength=scores.size)


def test_exponential_mechanism_frequencies_and_power():
    scores = np.array([0.0, 1.0, 2.5, 3.0, 0.5])
    counts = selection_counts(scores, 1.0, 1.0, 40_000, 3)
    right = stats.chisquare(counts, 40_000 * softmax(scores, 1.0 / 2)).pvalue
    wrong = stats.chisquare(counts, 40_000 * softmax(scores, 1.0)).pvalue  # missing the factor 2
    assert right > ALPHA and wrong < ALPHA


def test_exponential_mechanism_privacy_audit_on_neighbouring_inputs():
    """Non-monotone scores |w x - w x_hat| on neighbours x, x + e_0: one score rises, the other falls.

    W = [[1, 0], [1, 1]], x - x_hat = (0.5, -3.5): scores (0.5, 3) become (1.5, 2). With eps = 1 the
    correct mechanism's ratio P(pick 0 | x') / P(pick 0 | x) is 1.96 <= e; scaling by eps / sensitivity
    (the reference kernel's under-noised selection) gives 4.98 > e. The audit accepts the ratio if its
    5-standard-error lower confidence bound is at most e^eps: with 15,000 runs that bound is about 4.16 for the
    under-noised variant, about 9 standard errors above e.
    """
    epsilon = 1.0
    W = Dense([[1.0, 0.0], [1.0, 1.0]])
    x, neighbour, estimate = np.array([3.0, 3.0]), np.array([4.0, 3.0]), np.array([2.5, 6.5])
    sealed = SealedMatrix(normal_form(W), Work())
    sensitivity = exponential.sensitivity(sealed, 7.0, exponential.offsets(sealed, estimate, Work()), Fraction(1))
    assert 1.0 < sensitivity < 1.0 + 1e-12  # max |w_ij| plus the scores' float error
    scores = [np.abs(W @ (v - estimate)) for v in (x, neighbour)]

    def audit(effective_sensitivity):
        runs = 15_000
        first = selection_counts(scores[0], epsilon, effective_sensitivity, runs, 4)[0]
        second = selection_counts(scores[1], epsilon, effective_sensitivity, runs, 5)[0]
        ratio = second / first
        spread = ratio * math.sqrt(1 / first + 1 / second)
        return ratio - 5 * spread <= math.exp(epsilon)

    assert audit(sensitivity)  # the kernel's mechanism passes
    assert not audit(sensitivity / 2)  # the under-noised variant fails: the audit has power
