"""Secure noise throughput: discrete Laplace and Gaussian samples per second, secure and seeded.

Target (issue 3): at least 5 million secure samples per second (OpenDP's float Laplace: ~0.03 million/s here).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

from kernel.noise import NoiseSource, discrete_gaussian, discrete_laplace  # noqa: E402

SAMPLES = 10_000_000


def _rate(sampler, source) -> dict:
    sampler(source, 3.0, 1000)  # warm up
    start = time.perf_counter()
    sampler(source, 1e6, SAMPLES)
    seconds = time.perf_counter() - start
    return {"samples": SAMPLES, "sample_seconds": round(seconds, 3), "samples_per_second": round(SAMPLES / seconds)}


def secure_discrete_laplace() -> dict:
    return _rate(discrete_laplace, NoiseSource())


def secure_discrete_gaussian() -> dict:
    return _rate(discrete_gaussian, NoiseSource())


def seeded_discrete_laplace() -> dict:
    return _rate(discrete_laplace, NoiseSource.seeded(0))


if __name__ == "__main__":
    main({f.__name__: f for f in [secure_discrete_laplace, secure_discrete_gaussian, seeded_discrete_laplace]})
