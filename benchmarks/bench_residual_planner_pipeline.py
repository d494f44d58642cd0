"""ResidualPlanner through the kernel, end to end: d attributes of size 10, 100,000 records, every <= 3-way
marginal (the paper's synthetic setting), budget rho = 1.

Targets (d = 100): under 120 s in total within 8 GB. Prints one JSON object per case with the time split
into selecting the plan, planning hosts, counting (the kernel's vectorize of each host marginal, batched
in vectorize_many requests: its only passes over the table), measuring (one Gaussian measurement per
host, batched in gaussian_batch requests, each charged as its own request; then un-whitening), and
reconstructing every workload marginal (in chunks, discarded). It also checks the budget spent and the
empirical error of 200 sampled 3-way marginals against the predicted variance (the benchmark made the
data, so it may count the truth itself; the plan never does).

    python benchmarks/bench_residual_planner_pipeline.py [pipeline_d30 pipeline_d100 ...]
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main, true_marginal  # noqa: E402

import ektelo_ng as ek  # noqa: E402
from ektelo_ng.operators.residual import SubsetFamily  # noqa: E402
from ektelo_ng.operators.selection.residual_hosts import count_hosts, decode, measure_hosts, plan_hosts  # noqa: E402
from ektelo_ng.operators.selection.residual_planner import ResidualPlannerEstimate, residual_planner as select  # noqa: E402

ROWS = 100_000
SIZE = 10
RHO = 1
CHUNK = 20_000  # marginals reconstructed per call (about 160 MB of 3-way tensors)


def _workload(d: int) -> list[tuple[int, ...]]:
    return [()] + [c for k in (1, 2, 3) for c in itertools.combinations(range(d), k)]


def _pipeline(d: int, max_host_cells: int = 10_000) -> dict:
    rng = np.random.default_rng(0)
    names = [f"a{i}" for i in range(d)]
    columns = {name: rng.integers(0, SIZE, ROWS) for name in names}
    session = ek.protect(columns, ek.Domain.from_dict(dict.fromkeys(names, SIZE)), ek.ZCDP(RHO), seed=0)
    source, budget, workload = session.source, ek.ZCDP(RHO), _workload(d)
    clock, times = time.perf_counter(), {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        times[name] = round(now - clock, 2)
        clock = now

    strategy = select(source.domain, workload, budget=budget)
    family = SubsetFamily.closure(strategy.workload, d)
    lap("select_s")
    hosts = plan_hosts(source.domain.sizes, family, max_host_cells)
    lap("plan_hosts_s")
    vectors = count_hosts(source, hosts)
    lap("count_s")
    planned = strategy.noise_scales()
    measurements = measure_hosts(vectors, hosts, planned, source.domain.sizes, budget.rho)
    omegas, applied = decode(measurements, family, planned, source.domain.sizes)
    lap("measure_s")
    estimate = ResidualPlannerEstimate(strategy, omegas, applied, measurements)
    del omegas
    for start in range(0, len(workload), CHUNK):
        estimate.marginals(workload[start : start + CHUNK])
    lap("reconstruct_s")

    sample = [workload[i] for i in np.random.default_rng(1).choice(np.arange(1 + d + d * (d - 1) // 2, len(workload)), 200)]
    got = estimate.marginals(sample)
    sizes = dict.fromkeys(names, SIZE)
    ratios = [np.mean((got[s] - true_marginal(columns, sizes, [names[i] for i in s])) ** 2) / estimate.variance(s)
              for s in sample]
    return {
        "d": d, "rows": ROWS, "marginals": len(workload), "residual_sets": len(family), "hosts": len(hosts),
        "max_host_cells": max_host_cells, "kernel_requests": len(session.transcript()),
        **times, "total_s": round(sum(times.values()), 2),
        "spent_equals_budget": session.budget.spent == budget,
        "sampled_mse_over_predicted_variance": round(float(np.mean(ratios)), 4),
        "predicted_rmse_3way": round(math.sqrt(estimate.variance(workload[-1])), 3),
    }


def pipeline_d30() -> dict:
    return _pipeline(30)


def pipeline_d100() -> dict:
    return _pipeline(100)


def pipeline_d100_no_sharing() -> dict:
    """One host per 3-way marginal (every marginal counted by its own table scan), for comparison."""
    return _pipeline(100, max_host_cells=1)


if __name__ == "__main__":
    main({f.__name__: f for f in [pipeline_d30, pipeline_d100, pipeline_d100_no_sharing]})
