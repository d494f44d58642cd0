"""DPBench's (non-private) EFPA arithmetic, for reproducing its numbers: its choice of coefficients against a
brute force from the full spectrum, its noise scale by a test that rejects a wrong one, its exact phases, and that
no plan can reach it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ektelo_ng.dpbench.nonprivate import choice_probabilities, efpa_dpbench_calibration
from ektelo_ng.plans import catalog

ROOT = Path(__file__).resolve().parents[1]


def brute_force_probabilities(x: np.ndarray, epsilon: float) -> np.ndarray:
    """From the full DFT: keeping the first k coefficients keeps frequencies 0..k-1 and their mirrors; the score is
    -(sqrt(energy of the rest) + sqrt(2) * (real values kept) / (epsilon / 2)), chosen with exp(epsilon / 4 score)."""
    n = x.size
    spectrum = np.abs(np.fft.fft(x)) ** 2
    scores = []
    for k in range(1, n // 2 + 2):
        kept = {f for f in range(n) if f < k or n - f < k}
        dropped = sum(spectrum[f] for f in range(n) if f not in kept)
        scores.append(-(np.sqrt(dropped) + np.sqrt(2) * len(kept) / (epsilon / 2)))
    weights = np.exp(epsilon / 4 * (np.array(scores) - max(scores)))
    return weights / weights.sum()


@pytest.mark.parametrize("n", [7, 8, 16, 33])
def test_the_choice_of_coefficients_is_the_brute_forces(n):
    x = np.random.default_rng(n).integers(0, 30, n).astype(float)
    for epsilon in (0.1, 1.0, 10.0):
        np.testing.assert_allclose(choice_probabilities(x, epsilon), brute_force_probabilities(x, epsilon),
                                   rtol=1e-9, atol=1e-15)  # fmt: skip


def _total_errors(x, epsilon, draws, seed):
    rng = np.random.default_rng(seed)
    return np.array([efpa_dpbench_calibration(x, epsilon, rng).sum() - x.sum() for _ in range(draws)])


def test_the_noise_is_laplace_at_sqrt_kept_over_half_epsilon_and_not_twice_it():
    """The total's error is the DC coefficient's noise: Laplace(sqrt(kept) / (epsilon / 2)), mixed over the choice."""
    x = np.random.default_rng(0).integers(50, 80, 16).astype(float)
    epsilon = 2.0
    p = choice_probabilities(x, epsilon)
    kept = np.cumsum([1] + [2] * 7 + [1])
    errors = _total_errors(x, epsilon, 4000, seed=1)

    def mixture(factor):
        return lambda e: sum(w * stats.laplace.cdf(e, scale=factor * np.sqrt(k) / (epsilon / 2)) for w, k in zip(p, kept))

    assert stats.kstest(errors, mixture(1.0)).pvalue > 1e-3
    assert stats.kstest(errors, mixture(2.0)).pvalue < 1e-6


def test_the_phases_are_released_exactly_which_is_why_it_is_not_private():
    x = np.random.default_rng(2).integers(0, 1000, 64).astype(float)
    estimate = efpa_dpbench_calibration(x, 50.0, np.random.default_rng(3))
    true, noisy = np.fft.rfft(x), np.fft.rfft(estimate)
    kept = np.flatnonzero(np.abs(noisy) > 1e-6)
    assert kept.size > 1
    same = np.isclose(np.angle(noisy[kept]), np.angle(true[kept]), atol=1e-9)
    flipped = np.isclose(np.abs(np.angle(noisy[kept]) - np.angle(true[kept])), np.pi, atol=1e-9)  # magnitude < 0
    assert np.all(same | flipped)


def test_no_plan_can_reach_it():
    assert not any("dpbench" in name.lower() and "efpa" in name.lower() for name in catalog)
    for path in [*ROOT.joinpath("plans").rglob("*.py"), *ROOT.joinpath("operators").rglob("*.py")]:
        assert "nonprivate" not in path.read_text(encoding="utf-8"), path


# ---- StructureFirst's trees as the authors' code computes them ----------------------------------------------------


def test_the_authors_tree_is_exact_without_noise_and_hays_inference_on_its_nodes():
    from ektelo_ng.dpbench.nonprivate import authors_tree

    rng = np.random.default_rng(0)
    x = rng.poisson(50, 11).astype(float)
    np.testing.assert_allclose(authors_tree(x, 0, 1e15, rng), x, atol=1e-9)
    assert authors_tree(x[:1], 5, 1e15, rng) == pytest.approx(x[:1], abs=1e-9)


def test_the_authors_tree_leaves_inner_nodes_unnoised_when_a_bucket_starts_past_its_length():
    """The same bucket of L = 10 cells at cell 0 and at cell 40, with the same draws: at 0 every node is noised, at 40
    (first leaf index 40 >= L) no inner node is, so the estimate's total, which leans on the exact root, is off by
    far less (17 against 43 on average): the engine's estimate rests on counts it never noised."""
    from ektelo_ng.dpbench.nonprivate import authors_tree

    x = np.random.default_rng(1).poisson(50, 10).astype(float)
    at_start = [abs(authors_tree(x, 0, 0.1, np.random.default_rng(s)).sum() - x.sum()) for s in range(400)]
    further = [abs(authors_tree(x, 40, 0.1, np.random.default_rng(s)).sum() - x.sum()) for s in range(400)]
    assert np.mean(further) < 0.6 * np.mean(at_start)


def test_dpbench_structure_first_draws_ceil_n_over_10_buckets_and_returns_every_cell():
    from ektelo_ng.dpbench.nonprivate import sf_dpbench_trees

    x = np.random.default_rng(2).poisson(20, 97).astype(float)
    estimate = sf_dpbench_trees(x, 0.1, np.random.default_rng(3))
    assert estimate.shape == x.shape and np.all(np.isfinite(estimate))
    assert np.allclose(sf_dpbench_trees(x, 1e12, np.random.default_rng(3)), x, atol=1e-6)
