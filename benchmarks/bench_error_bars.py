"""Error bars at scale: variances and confidence intervals for every answer, without n x n matrices.

Cases (one JSON object each: name, seconds, and quality figures):

- ``prefix2d_hb_1000_{gaussian,laplace}``: all 10^6 answers of the 1000 x 1000 Prefix x Prefix workload
  under the HB x HB strategy (simulated measurement of a random 10^6-cell vector). ``variance_seconds``
  and ``interval_seconds`` time the error bars alone; quality: mean of error^2 / variance over the
  10^6 answers (about 1) and the 95% intervals' coverage (0.95 for Gaussian noise, at least that for
  the Laplace bound, which ``auto`` picks at this size).
- ``residual_planner_d100``: every cell of every <= 3-way marginal at d = 100 (attributes of size 10,
  166,751 marginals, about 1.6e8 cells) from ResidualPlanner, on simulated residual answers of the
  all-zero table; quality: the variances equal the strategy's own per-marginal formula, and the
  coverage of the 95% intervals on a sample of marginals.
- ``exact_laplace_1e6_{identity,hb}``: 10^6 numerically exact Laplace intervals (``operators.laplace_laws``): the
  1000 x 1000 Prefix x Prefix workload under Identity x Identity (answers summing up to 10^6 cells' noise), and
  Identity x Prefix under Identity x HB (each answer mixing an HB tree's rows); time and peak memory of the
  intervals; quality: against the scalar adaptive quadrature of the unrounded law on 200 sampled answers (never
  narrower, at most the stated widening wider) and the 95% coverage over 8 noise draws.
- ``partition_groups_65536``: a partition plan's measurement at scale: 65,536 cells in 1,000 groups whose totals
  are measured with Laplace noise and whose pairs with Gaussian noise, answered on 2,000 range queries by the
  groups path (``operators.covariance``: no ``n x n`` matrix, no iterative solve); quality: the noise variances
  against 500 simulated least-squares estimates (mean ratio about 1).

    python benchmarks/bench_error_bars.py [prefix2d_hb_1000_gaussian prefix2d_hb_1000_laplace residual_planner_d100
                                           exact_laplace_1e6_identity exact_laplace_1e6_hb partition_groups_65536]
"""

from __future__ import annotations

import itertools
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import main  # noqa: E402
from ektelo_ng.operators.matrix import Kronecker  # noqa: E402
from ektelo_ng.kernel.privacy import PureDP, ZCDP  # noqa: E402
from ektelo_ng.operators.matrices import Prefix  # noqa: E402
from ektelo_ng.operators.selection import hb, residual_planner  # noqa: E402
from ektelo_ng.operators.selection.residual_planner import ResidualPlannerEstimate  # noqa: E402
from ektelo_ng.operators.selection.residual_hosts import _unwhiten_rows  # noqa: E402


#: Noise draws the quality figures of the Prefix x Prefix cases average over.
SEEDS = 8


def prefix_case(budget) -> dict:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, 10**6).astype(float)
    W = Kronecker([Prefix(1000), Prefix(1000)])
    start = time.perf_counter()
    strategy = hb((1000, 1000)).with_noise("gaussian" if isinstance(budget, ZCDP) else "laplace")
    estimate = strategy.simulate(x, budget, seed=1)
    solve = time.perf_counter() - start
    start = time.perf_counter()
    variances = estimate.variances(W)
    variance_seconds = time.perf_counter() - start
    start = time.perf_counter()
    found = estimate.intervals(W, 0.95)
    interval_seconds = time.perf_counter() - start
    truth = W @ x
    ratios, covered = [], []
    for seed in range(1, 1 + SEEDS):  # the answers' errors are correlated: average over noise draws
        if seed > 1:
            estimate = strategy.simulate(x, budget, seed=seed)
            found = estimate.intervals(W, 0.95)
        error = found.answers - truth
        ratios.append(np.mean(error**2 / variances))
        covered.append(np.mean(np.abs(error) <= found.halfwidths))
    return dict(
        answers=int(variances.size), reconstruct_seconds=round(solve, 3), variance_seconds=round(variance_seconds, 3),
        interval_seconds=round(interval_seconds, 3), method=found.method, noise_draws=SEEDS,
        mean_squared_error_over_variance=round(float(np.mean(ratios)), 4),
        coverage_95=round(float(np.mean(covered)), 4),
    )


def residual_planner_case() -> dict:
    d, n = 100, 10
    marginals = [()] + [c for k in (1, 2, 3) for c in itertools.combinations(range(d), k)]
    strategy = residual_planner([n] * d, marginals, loss="sum")
    scales = strategy.noise_scales()
    rng = np.random.default_rng(0)
    omegas = {}
    for r in range(4):  # the all-zero table: omega_A = (H H^T)^(1/2) N(0, s_A I), a batch per set size
        subsets = [a for a in scales if len(a) == r]
        spread = np.sqrt([scales[a] for a in subsets])[:, None]
        rows = _unwhiten_rows((n,) * r, spread * rng.standard_normal((len(subsets), (n - 1) ** r)))
        omegas.update(zip(subsets, rows))
    estimate = ResidualPlannerEstimate(strategy, omegas, scales, [])
    start = time.perf_counter()
    variances = estimate.variances()
    variance_seconds = time.perf_counter() - start
    start = time.perf_counter()
    found = estimate.intervals(level=0.95)
    interval_seconds = time.perf_counter() - start
    sample = rng.choice(len(marginals), 300, replace=False)
    offsets = np.cumsum([0] + [n ** len(m) for m in marginals])
    formula = max(abs(variances[offsets[i]] / strategy.variance(marginals[i]) - 1) for i in sample)
    covered = np.mean([np.mean(np.abs(found.answers[offsets[i]:offsets[i + 1]]) <= found.halfwidths[offsets[i]:offsets[i + 1]])
                       for i in sample])
    return dict(
        marginals=len(marginals), answers=int(variances.size), variance_seconds=round(variance_seconds, 3),
        interval_seconds=round(interval_seconds, 3), method=found.method,
        max_relative_difference_from_formula=float(formula), coverage_95_sample=round(float(covered), 4),
    )


def exact_case(kind: str) -> dict:
    import math
    import tracemalloc

    from ektelo_ng.operators.confidence import laplace_halfwidth
    from ektelo_ng.operators.estimate import VectorEstimate
    from ektelo_ng.operators.inference import least_squares
    from ektelo_ng.operators.matrix import Identity
    from ektelo_ng.operators.measurement import Measurement

    n, rng = 1000, np.random.default_rng(0)
    if kind == "identity":
        A, W = Kronecker([Identity(n), Identity(n)]), Kronecker([Prefix(n), Prefix(n)])
    else:
        A, W = Kronecker([Identity(n), hb((n,)).matrix]), Kronecker([Identity(n), Prefix(n)])
    x = rng.integers(0, 20, n * n).astype(float)
    truth = W @ x

    def estimate():
        measured = [Measurement(A, A @ x + rng.laplace(size=A.shape[0]), math.sqrt(2), "laplace")]
        return VectorEstimate(least_squares(measured, size=n * n), measured)

    first = estimate()
    tracemalloc.start()
    start = time.perf_counter()
    found = first.intervals(W, 0.95)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sample = rng.choice(W.shape[0], 200, replace=False)
    rows = Kronecker([W.factors[0], W.factors[1]])
    start = time.perf_counter()
    reference = []
    for i in sample:
        (c,) = next(first._covariance.coefficients(_row(rows, i)))
        reference.append(laplace_halfwidth(np.abs(c) / math.sqrt(2), 0.0, 0.95))
    scalar_seconds = (time.perf_counter() - start) / sample.size
    ratio = found.halfwidths[sample] / np.array(reference)
    covered = [np.mean(found.covers(truth))] + [np.mean(estimate().intervals(W, 0.95).covers(truth)) for _ in range(7)]
    return dict(answers=int(W.shape[0]), interval_seconds=round(seconds, 3), peak_mb=round(peak / 2**20, 1),
                method=found.method, ratio_to_scalar_quadrature=[float(ratio.min()), float(ratio.max())],
                scalar_quadrature_seconds_per_answer=round(scalar_seconds, 5), noise_draws=len(covered),
                coverage_95=round(float(np.mean(covered)), 4))


def _row(W, i: int):
    """Row ``i`` of a two-factor Kronecker product, as a one-row product."""
    from ektelo_ng.operators.matrix import Dense

    first, second = W.factors
    return Kronecker([Dense(first.dense()[[i // second.shape[0]]]), Dense(second.dense()[[i % second.shape[0]]])])


def partition_case() -> dict:
    import scipy.sparse

    from ektelo_ng.operators.estimate import VectorEstimate
    from ektelo_ng.operators.inference import least_squares
    from ektelo_ng.operators.matrix import Sparse
    from ektelo_ng.operators.measurement import Measurement
    from ektelo_ng.operators.workload import RandomRange

    n, rng = 65_536, np.random.default_rng(0)
    groups = np.sort(rng.integers(0, 1000, n))

    def totals(labels):
        count = int(labels.max()) + 1
        return Sparse(scipy.sparse.csr_array((np.ones(n), (labels, np.arange(n))), shape=(count, n)))

    first, second = totals(groups), totals(groups // 2)
    x = rng.poisson(3.0, n).astype(float)
    W = RandomRange((n,), 2000, seed=1)

    def measured():
        return [Measurement(first, first @ x + rng.laplace(0, 2.0, first.shape[0]), np.sqrt(8.0), "laplace"),
                Measurement(second, second @ x + rng.normal(0, 3.0, second.shape[0]), 3.0, "gaussian")]

    measurements = measured()
    estimate = VectorEstimate(least_squares(measurements, size=n), measurements)
    start = time.perf_counter()
    variances = estimate._covariance.noise_variances(W)  # ranges cut groups: their bias is fixed, the spread is noise
    variance_seconds = time.perf_counter() - start
    runs = np.array([W @ least_squares(measured(), size=n) for _ in range(500)])
    ratio = np.var(runs, axis=0, ddof=1) / variances
    return dict(cells=n, groups=1000, answers=W.shape[0], path=estimate._covariance.method,
                variance_seconds=round(variance_seconds, 3), monte_carlo_ratio_mean=round(float(ratio.mean()), 4),
                monte_carlo_ratio_range=[round(float(ratio.min()), 3), round(float(ratio.max()), 3)])


CASES = {
    "prefix2d_hb_1000_gaussian": lambda: prefix_case(ZCDP(0.5)),
    "prefix2d_hb_1000_laplace": lambda: prefix_case(PureDP(1)),
    "residual_planner_d100": residual_planner_case,
    "exact_laplace_1e6_identity": lambda: exact_case("identity"),
    "exact_laplace_1e6_hb": lambda: exact_case("hb"),
    "partition_groups_65536": partition_case,
}

if __name__ == "__main__":
    main(CASES)
