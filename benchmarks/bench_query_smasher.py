"""QuerySmasher benchmarks: selection time, RMSE (pcost 1) and peak memory, one JSON line per case.

    python benchmarks/bench_query_smasher.py                 # every case, each in its own process
    python benchmarks/bench_query_smasher.py prefix12_d40_n10

Targets: 1+2-way prefix on d = 40, n = 10 under 60 s (certified optimum RMSE 33.693);
1-way range + 2-way affine + 3-way prefix on d = 40, n = 40 (10,701 residual sets) under
30 minutes and 16 GB (the paper: 3032 s and 227 GB on 128 cores; d = 10: 60 s, 3.4 GB).
``seconds`` covers building the workload and selecting the plan (decomposition, every
solve, allocation). Every case uses the exact solver unless its name ends in ``_wff``;
``_reconstruct`` simulates the measurements on 10,000 random records and reconstructs every
answer (its ``empirical_rmse`` should be close to the predicted ``rmse``).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

from ektelo_ng.operators.selection.query_smasher import query_class_workload, query_smasher  # noqa: E402


def mixed(d: int, n: int) -> list:
    """1-way range + 2-way affine + 3-way prefix (the paper's scalability workload)."""
    domain = [n] * d
    return (
        query_class_workload(domain, "range", ways=(1,))
        + query_class_workload(domain, "affine", ways=(2,))
        + query_class_workload(domain, "prefix", ways=(3,))
    )


def run(workload: list, d: int, n: int, solver: str = "exact") -> dict:
    start = time.perf_counter()
    strategy = query_smasher([n] * d, workload, solver=solver)
    seconds = time.perf_counter() - start
    record = {
        "rmse": round(strategy.rmse(), 4),
        "select_seconds": round(seconds, 2),
        "queries": strategy.num_queries,
        "residual_sets": len(strategy.residual_sets),
        "distinct_subworkloads": len({id(strategy.solution(a)) for a in strategy.residual_sets}),
    }
    if solver == "exact":
        lower, _ = strategy.error_bounds()
        record["certified_rmse_lower"] = round((lower / strategy.num_queries) ** 0.5, 4)
    return record


def reconstruct(d: int, n: int, records: int = 10_000, seed: int = 0) -> dict:
    """Simulate the 1+2-way prefix plan on random records, reconstruct every answer, compare errors."""
    workload = query_class_workload([n] * d, "prefix", (1, 2))
    strategy = query_smasher([n] * d, workload)
    rng = np.random.default_rng(seed)
    data = rng.integers(0, n, size=(records, d))

    def marginal(subset: tuple[int, ...]) -> np.ndarray:
        if not subset:
            return np.array([float(records)])
        cells = np.ravel_multi_index(tuple(data[:, a] for a in subset), [n] * len(subset))
        return np.bincount(cells, minlength=n ** len(subset)).astype(float)

    start = time.perf_counter()
    answers = strategy.simulate(marginal, strategy.budget, rng).answers()
    seconds = time.perf_counter() - start
    truth = np.concatenate([m @ marginal(tuple(a)) for a, m in workload])
    return {
        "rmse": round(strategy.rmse(), 4),
        "empirical_rmse": round(math.sqrt(float(np.mean((answers - truth) ** 2))), 4),
        "measure_reconstruct_seconds": round(seconds, 2),
        "queries": strategy.num_queries,
    }


CASES = {
    "prefix12_d40_n10": lambda: run(query_class_workload([10] * 40, "prefix", (1, 2)), 40, 10),
    "prefix12_d40_n10_reconstruct": lambda: reconstruct(40, 10),
    "prefix12_d40_n10_wff": lambda: run(query_class_workload([10] * 40, "prefix", (1, 2)), 40, 10, "wff"),
    "range1_affine2_prefix3_d10_n40": lambda: run(mixed(10, 40), 10, 40),
    "range1_affine2_prefix3_d40_n40": lambda: run(mixed(40, 40), 40, 40),
    "range1_affine2_prefix3_d40_n40_wff": lambda: run(mixed(40, 40), 40, 40, "wff"),
}

if __name__ == "__main__":
    main(CASES)
