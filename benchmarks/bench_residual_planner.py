"""ResidualPlanner benchmarks on the paper's synthetic domain (n = 10, all <= 3-way marginals).

Prints one JSON object per case: {"name", "seconds", quality figures...}. Targets:
sum selection d=100 < 1 s; max selection d=100 < 10 s, d=200 < 2 min; reconstruction of
every <= 3-way marginal at d=100 from simulated measurements < 30 s.
Unweighted max variance on this (downward-closed) workload is solved at the start point, so
the weighted cases (weights exp(N(0, 1)), seed 0) exercise the Newton iterations.

    python benchmarks/bench_residual_planner.py [--cases sum100 max100 maxw100 max200 maxw200 sum200 recon100]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time

import numpy as np

from ektelo_ng.operators.residual import ResidualReconstruction, SubsetFamily, batched_residual_answers
from ektelo_ng.operators.selection.residual_planner import ResidualPlannerStrategy, residual_planner


def workload(d: int) -> list[tuple[int, ...]]:
    return [()] + [c for k in (1, 2, 3) for c in itertools.combinations(range(d), k)]


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def select(name: str, d: int, loss: str, weighted: bool = False) -> ResidualPlannerStrategy:
    marginals = workload(d)
    weights = np.exp(np.random.default_rng(0).normal(size=len(marginals))) if weighted else None
    start = time.perf_counter()
    strategy = residual_planner([10] * d, marginals, loss=loss, weights=weights)
    seconds = time.perf_counter() - start
    figures = dict(rmse=round(strategy.rmse(), 6), max_variance=round(strategy.max_variance(), 6))
    if weighted:
        figures = dict(weighted_max_variance=round(strategy.objective(), 6))
    emit(
        name=name,
        seconds=round(seconds, 3),
        d=d,
        marginals=len(marginals),
        residual_sets=len(strategy.residual_sets),
        **figures,
    )
    return strategy


def true_marginals(records: np.ndarray, sets: np.ndarray, n: int) -> np.ndarray:
    """Counts of each set's marginal, ``(K, n, ..., n)``, by one bincount over all sets."""
    k, r = sets.shape
    cells = n**r
    flat = np.zeros((records.shape[0], k), dtype=np.int64)
    for j in range(r):
        flat = flat * n + records[:, sets[:, j]]
    flat += np.arange(k) * cells
    counts = np.bincount(flat.ravel(), minlength=k * cells)
    return counts.reshape((k,) + (n,) * r).astype(np.float64)


def simulate(strategy: ResidualPlannerStrategy, records: np.ndarray, rng: np.random.Generator) -> dict:
    """omega_A = Sub(v_A + sqrt(s_A) z) for every closure set (Algorithm 1), batched by size."""
    scales = strategy.noise_scales()
    by_size: dict[int, list[tuple[int, ...]]] = {}
    for a in scales:
        by_size.setdefault(len(a), []).append(a)
    omegas = {}
    for r, sets in by_size.items():
        chunk = max(1, (1 << 22) // 10**r)
        for start in range(0, len(sets), chunk):
            part = sets[start : start + chunk]
            rows = np.array(part, dtype=np.int64).reshape(len(part), r)
            noisy = true_marginals(records, rows, 10)
            sd = np.sqrt([scales[a] for a in part]).reshape((-1,) + (1,) * r)
            noisy += sd * rng.standard_normal(noisy.shape)
            omegas.update(zip(part, batched_residual_answers(noisy)))
    return omegas


def reconstruct(strategy: ResidualPlannerStrategy, d: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    records = rng.integers(0, 10, size=(1000, d))
    start = time.perf_counter()
    omegas = simulate(strategy, records, rng)
    simulated = time.perf_counter() - start
    marginals = workload(d)
    family = SubsetFamily.closure(strategy.residual_sets, d)
    start = time.perf_counter()
    estimates = ResidualReconstruction(strategy.domain, family, omegas).marginals(marginals)
    seconds = time.perf_counter() - start
    # quality: squared error / predicted variance on a sample of 3-way marginals (expect ~1)
    sample = [marginals[i] for i in rng.choice(np.arange(1 + d + math.comb(d, 2), len(marginals)), 500)]
    truth = true_marginals(records, np.array(sample), 10)
    ratios = [np.mean((estimates[a] - t) ** 2) / strategy.variance(a) for a, t in zip(sample, truth)]
    # consistency: a 3-way marginal summed over its last axis equals the reconstructed 2-way one
    a = sample[0]
    consistency = float(np.max(np.abs(estimates[a].sum(axis=2) - estimates[a[:2]])))
    emit(
        name=f"reconstruct_all_upto3_d{d}",
        seconds=round(seconds, 3),
        simulate_seconds=round(simulated, 3),
        marginals=len(estimates),
        mse_over_predicted_variance=round(float(np.mean(ratios)), 4),
        consistency_max_abs=consistency,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", default=["sum100", "max100", "maxw100", "max200", "maxw200", "recon100"])
    cases = parser.parse_args().cases
    if "sum100" in cases or "recon100" in cases:
        strategy = select("sum_selection_d100", 100, "sum")
        if "recon100" in cases:
            reconstruct(strategy, 100)
    if "max100" in cases:
        select("max_selection_d100", 100, "max")
    if "maxw100" in cases:
        select("weighted_max_selection_d100", 100, "max", weighted=True)
    if "sum200" in cases:
        select("sum_selection_d200", 200, "sum")
    if "max200" in cases:
        select("max_selection_d200", 200, "max")
    if "maxw200" in cases:
        select("weighted_max_selection_d200", 200, "max", weighted=True)


if __name__ == "__main__":
    main()
