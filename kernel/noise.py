"""Secure, fast, discrete noise: discrete Laplace and discrete Gaussian samplers, the exponential mechanism.

Randomness comes from the operating system's CSPRNG (``os.urandom``) unless a seeded source is
asked for explicitly (``NoiseSource.seeded``), which is reproducible and says so (``is_seeded``).
Samplers are vectorized with numpy; released values are integers (codes on a public grid).
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_MANTISSA = 2.0**-53
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

    def uniform(self, size: int) -> np.ndarray:
        """Uniform doubles in the open interval (0, 1), 53 random bits each."""
        return _open_unit(self.words(size))


def _open_unit(words: np.ndarray) -> np.ndarray:
    """The top 53 bits of each word as a double strictly between 0 and 1."""
    unit = (words >> np.uint64(11)).view(np.int64).astype(np.float64)  # int64 converts faster than uint64
    unit += 0.5
    unit *= _MANTISSA
    return unit


def _check_scale(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and 0 < value < 2.0**52 / 64):
        raise ValueError(f"{name} must be a positive finite noise scale below 2^46 grid units, got {value}")
    return value


def _parallel(sampler):
    """Run large secure draws in chunks on all cores (numpy and os.urandom release the GIL).

    Seeded sources stay serial so that their streams are reproducible.
    """

    @functools.wraps(sampler)
    def draw(source: NoiseSource, scale: float, size: int) -> np.ndarray:
        workers = os.cpu_count() or 1
        if source.is_seeded or workers < 2 or size < _PARALLEL_MIN:
            return sampler(source, scale, size)
        bounds = np.linspace(0, size, workers + 1).astype(int)
        with ThreadPoolExecutor(workers) as pool:
            parts = pool.map(lambda n: sampler(source, scale, n), np.diff(bounds))
            return np.concatenate(list(parts))

    return draw


_BLOCK = 1 << 16
"""Samples drawn per pass of the discrete Gaussian's rejection loop: its temporaries stay in cache."""


def _laplace_magnitudes(words: np.ndarray, t: float) -> np.ndarray:
    """|Z| for discrete Laplace(t) from each word's top 53 bits, as integer-valued doubles (see below)."""
    p = math.exp(-1.0 / t)
    magnitude = _open_unit(words)
    np.log(magnitude, out=magnitude)
    magnitude += math.log((1.0 + p) / 2.0)
    magnitude *= -t
    np.floor(magnitude, out=magnitude)
    np.maximum(magnitude, 0.0, out=magnitude)
    return magnitude


@_parallel
def discrete_laplace(source: NoiseSource, t: float, size: int) -> np.ndarray:
    """int64 samples with P(z) proportional to exp(-|z| / t), one random word each.

    With p = exp(-1/t): P(|Z| >= k) = 2 p^k / (1 + p) for k >= 1, so for uniform U,
    |Z| = max(0, floor(-t log(U (1 + p) / 2))) by inversion; the word's lowest bit (unused by
    U, which takes the top 53) gives the sign.
    """
    t = _check_scale("discrete Laplace scale", t)
    words = source.words(size)
    codes = _laplace_magnitudes(words, t).astype(np.int64)
    np.negative(codes, out=codes, where=(words & np.uint64(1)).astype(bool))
    return codes


@_parallel
def discrete_gaussian(source: NoiseSource, sigma: float, size: int) -> np.ndarray:
    """int64 samples with P(z) proportional to exp(-z^2 / (2 sigma^2)).

    Rejection from discrete Laplace with t = floor(sigma) + 1 (Canonne, Kamath, Steinke 2020):
    accept y with probability exp(-(|y| - sigma^2 / t)^2 / (2 sigma^2)). Proposals are drawn at most
    ``_BLOCK`` at a time and tested on their magnitudes (|y| exactly, as doubles) before their signs are
    applied; only accepted ones become integers.
    """
    sigma = _check_scale("discrete Gaussian sigma", sigma)
    t = math.floor(sigma) + 1.0
    center, spread = sigma**2 / t, 2 * sigma**2
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        batch = min(_BLOCK, max(1024, int(1.6 * (size - filled))))
        words = source.words(batch)  # the proposals' words, then the acceptance uniforms (one word each)
        magnitude = _laplace_magnitudes(words, t)
        threshold = magnitude - center
        np.square(threshold, out=threshold)
        np.negative(threshold, out=threshold)
        threshold /= spread
        np.exp(threshold, out=threshold)  # exp(-(|y| - sigma^2 / t)^2 / (2 sigma^2))
        accept = np.flatnonzero(source.uniform(batch) < threshold)[: size - filled]
        kept = out[filled : filled + accept.size]
        np.copyto(kept, magnitude[accept], casting="unsafe")
        np.negative(kept, out=kept, where=(words[accept] & np.uint64(1)).astype(bool))
        filled += accept.size
    return out


def grid_step(scale: float) -> float:
    """The release grid for a noise scale: the power of two about 2^-20 times the scale."""
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"noise scale must be positive and finite, got {scale}")
    return 2.0 ** (math.floor(math.log2(scale)) - 20)


def exponential_mechanism(source: NoiseSource, scores: np.ndarray, epsilon: float, sensitivity: float) -> int:
    """Index i with probability proportional to exp(epsilon * score_i / (2 * sensitivity)).

    The general (non-monotone) exponential mechanism, sampled as the argmax of the scaled scores
    plus independent Gumbel noise (the Gumbel-max trick).
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.all(np.isfinite(scores)):
        raise ValueError("scores must be a non-empty vector of finite numbers")
    if not (epsilon > 0 and sensitivity > 0):
        raise ValueError("epsilon and sensitivity must be positive")
    gumbel = -np.log(-np.log(source.uniform(scores.size)))
    return int(np.argmax(epsilon * scores / (2.0 * sensitivity) + gumbel))
