"""DPBench's EFPA arithmetic, which is NOT differentially private: for reproducing DPBench's numbers only.

DPBench ran its EFPA (Acs, Castelluccia and Chen, ICDM 2012) with noise calibrated to an L2 sensitivity of 1 on the
unnormalised real FFT, whose coefficients one record moves by up to sqrt(n / 2 + 1), and it perturbs only the
coefficients' magnitudes, releasing their phases exactly (docs/dpbench.md). The catalog's ``EFPA`` plan is the
private EFPA, measured through the kernel. This module reproduces the published engine's arithmetic on a data
vector its caller already holds, as ``Strategy.simulate`` does: it reads no kernel, spends no budget, and is in no
catalog, so that no plan can use it. Its one use is to show that the replay's difference from DPBench's EFPA numbers
is the calibration, not the replay (``benchmarks/bench_dpbench.py efpa_dpbench``).
"""

from __future__ import annotations

import numpy as np


def _candidates(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The FFT coefficients, and for each candidate (keep the first j + 1 coefficients): how many real values it
    keeps, and the energy it drops."""
    coefficients = np.fft.rfft(x)  # unnormalised, as DPBench's scipy.fftpack packing
    multiplicity = np.full(coefficients.size, 2)
    multiplicity[0] = 1
    if x.size % 2 == 0:
        multiplicity[-1] = 1  # the Nyquist coefficient is real
    energy = multiplicity * np.abs(coefficients) ** 2
    kept = np.cumsum(multiplicity)
    dropped = np.maximum(energy.sum() - np.cumsum(energy), 0.0)
    return coefficients, kept, dropped


def choice_probabilities(x: np.ndarray, epsilon: float) -> np.ndarray:
    """The probability that DPBench's EFPA keeps the first j + 1 coefficients, for each j: an exponential mechanism
    with half of ``epsilon``, scores -(sqrt(dropped energy) + sqrt(2) kept / (epsilon / 2)), score sensitivity 1."""
    _, kept, dropped = _candidates(np.asarray(x, dtype=np.float64))
    half = epsilon / 2
    logits = half / 2 * -(np.sqrt(dropped) + np.sqrt(2) * kept / half)
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def efpa_dpbench_calibration(x: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """DPBench's EFPA estimate of ``x`` at ``epsilon`` as its code computes it (NOT differentially private)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    coefficients, kept, _ = _candidates(x)
    j = rng.choice(coefficients.size, p=choice_probabilities(x, epsilon))
    scale = np.sqrt(kept[j]) / (epsilon / 2)
    noisy = np.zeros_like(coefficients)
    magnitude = np.abs(coefficients[: j + 1]) + rng.laplace(0.0, scale, j + 1)
    noisy[: j + 1] = magnitude * np.exp(1j * np.angle(coefficients[: j + 1]))  # the phases, exactly
    return np.fft.irfft(noisy, x.size)
