"""DPBench's EFPA and StructureFirst arithmetic, which is NOT differentially private: for reproducing DPBench's numbers
only.

DPBench ran its EFPA (Acs, Castelluccia and Chen, ICDM 2012) with noise calibrated to an L2 sensitivity of 1 on the
unnormalised real FFT, whose coefficients one record moves by up to sqrt(n / 2 + 1), and it perturbs only the
coefficients' magnitudes, releasing their phases exactly (docs/dpbench.md). The catalog's ``EFPA`` plan is the
private EFPA, measured through the kernel. This module reproduces the published engine's arithmetic on a data
vector its caller already holds, as ``Strategy.simulate`` does: it reads no kernel, spends no budget, and is in no
catalog, so that no plan can use it. Its one use is to show that the replay's difference from DPBench's EFPA numbers
is the calibration, not the replay (``benchmarks/bench_dpbench.py efpa_dpbench``).

``sf_dpbench_trees`` does the same for StructureFirst: the authors' per-bucket tree (which DPBench ran) numbers a
bucket's leaves by their absolute cell index and its padding from the bucket's length L, and adds noise to an inner
node only when its first leaf's index is below L, so every bucket that starts at or beyond its own length releases
its inner nodes, its total among them, exactly (``benchmarks/bench_dpbench.py sf_dpbench``).
"""

from __future__ import annotations

import math

import numpy as np

from ektelo_ng.plans.structure_first import BOUND_OVER_MEAN, BUCKETS_PER_CELL, structure_epsilon


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


def sf_dpbench_trees(x: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """DPBench's StructureFirst as the authors' code computes it (NOT private): ceil(n / 10) buckets whose boundaries
    are drawn right to left, each uniformly among the positions that leave room for the buckets to its left (what
    the authors' exponential mechanism amounts to at DPBench's eps / 20 and clipping bound: their engine's error is
    the same on flat, stepped and real counts under the same seeds), then each bucket measured by the authors'
    tree (``authors_tree``) with the rest of the budget."""
    x = np.asarray(x, dtype=np.float64).ravel()
    n, buckets = x.size, math.ceil(BUCKETS_PER_CELL * x.size)
    structure = structure_epsilon(n, buckets, epsilon, BOUND_OVER_MEAN * x.sum() / n)
    cuts, right = [n], n
    for left_buckets in range(buckets - 1, 0, -1):
        right = int(rng.integers(left_buckets, right))
        cuts.append(right)
    cuts = [0, *cuts[::-1]]
    return np.concatenate([authors_tree(x[a:b], a, epsilon - float(structure), rng) for a, b in zip(cuts, cuts[1:])])


def authors_tree(segment: np.ndarray, begin: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The authors' binary tree over one bucket of L cells starting at cell ``begin`` (NOT private): ceil(log2 L) + 1
    levels, Laplace(levels / eps) on each leaf, leaves padded with exact zeros to a power of two, an inner node noised
    only if its first leaf's index (absolute for cells, L onwards for padding) is below L; then Hay et al.'s
    inference for a tree whose nodes all have the same variance."""
    size = segment.size
    levels = math.ceil(math.log2(size)) + 1 if size > 1 else 1
    scale = levels / epsilon
    if size == 1:
        return segment + rng.laplace(0.0, scale, 1)
    counts = np.zeros(2 ** (levels - 1))
    counts[:size] = segment
    first = np.r_[np.arange(begin, begin + size), size + np.arange(counts.size - size)]
    noisy = [counts + np.r_[rng.laplace(0.0, scale, size), np.zeros(counts.size - size)]]
    for _ in range(1, levels):
        counts, first = counts.reshape(-1, 2).sum(axis=1), first[::2]
        noisy.append(counts + np.where(first < size, rng.laplace(0.0, scale, counts.size), 0.0))
    z = [noisy[0]]  # bottom up: z = ((b - 1) b^i y + (b^i - 1) sum of the children's z) / (b^(i+1) - 1), b = 2
    for height in range(1, levels):
        alpha = 2.0**height
        z.append((alpha * noisy[height] + (alpha - 1) * z[-1].reshape(-1, 2).sum(axis=1)) / (2 * alpha - 1))
    estimate = z[-1]  # top down: each child gets its z plus an equal share of what its parent's estimate leaves
    for height in range(levels - 2, -1, -1):
        children = z[height]
        estimate = children + np.repeat((estimate - children.reshape(-1, 2).sum(axis=1)) / 2, 2)
    return estimate[:size]
