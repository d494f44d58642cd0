"""HDMM optimizer timings and errors: one JSON object per line per case.

    python benchmarks/bench_hdmm.py [case ...]      (default: every case but opt0)
    python benchmarks/bench_hdmm.py opt0 [--reference PYTHON] [--repeats 3]

``opt0`` runs OPT_0 on the five cases of issue 37 (Laplace AllRange and Prefix at n = 1,024 and AllRange at
2,048, p = n / 16, one start; Gaussian AllRange and Prefix at 1,024), ours and, with ``--reference``, the
reference HDMM code (the Python of a scratch environment where it is installed; it runs
benchmarks/reference_hdmm_opt0.py) side by side, interleaved, both on one BLAS thread, medians of the
repeats. Both strategies are scored by this project's error formula. Fields: seconds / rmse (ours at its
defaults), seconds_at_reference_rmse (ours capped at the fewest steps whose RMSE is at or below the
reference's; the runs are deterministic, so the cap is found by bisection), speedup_at_equal_rmse and
speedup_at_defaults (reference seconds over ours), evaluations and ms_per_evaluation (loss-and-gradient
calls; Gaussian: our dual points), blas_gflop_per_evaluation (the formulas' BLAS-3 work, counted below)
and the rate it ran at against machine_gflops (a 2,048 x 2,048 DGEMM on one thread, measured here).

Fields: name, seconds (wall clock of the optimizer call), cpu_seconds (its process CPU time:
on a shared machine the less load-dependent number; BLAS runs single-threaded), rmse (at unit noise: Laplace eps = 1,
Gaussian sigma = 1), table_rmse (J Table 4/5 units: Gaussian times sigma = 4.22468 for
eps = 1, delta = 1e-6), svd_bound_rmse (same units), target_rmse / target_seconds (the issue's
targets; table values from the HDMM journal) and the optimizer's settings.

``hdmm_random_range_256x256`` is DPBench's 2-D workload (2,000 random boxes on 256 x 256): the whole
``hdmm`` selection, and OPT_kron alone, against the Identity strategy (its SVD bound would need an
eigendecomposition on 65,536 cells, so it is left out).
"""

from __future__ import annotations

import itertools
import json
import math
import time

from ektelo_ng.operators.selection.hdmm.bound import svd_bound
from ektelo_ng.operators.matrix import AllRange
from ektelo_ng.operators.matrices import MarginalStack, Prefix
from ektelo_ng.operators.selection.hdmm import hdmm, identity_strategy, opt_0, opt_kron, opt_marginals
from ektelo_ng.operators.workload import RandomRange

SIGMA = 4.22468


def _report(name, strategy, timing, bound=True, **extra):
    seconds, cpu_seconds = timing
    scale = SIGMA if strategy.noise == "gaussian" else 1.0
    record = {
        "name": name,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "rmse": strategy.rmse(),
        "table_rmse": scale * strategy.rmse(),
        "svd_bound_rmse": scale * math.sqrt(svd_bound(strategy.workload, strategy.noise) / strategy.num_queries) if bound else None,
        "noise": strategy.noise,
        "strategy_rows": strategy.matrix.shape[0],
        **extra,
    }
    print(json.dumps(record), flush=True)


def _timed(fn, *args, **kwargs):
    start, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, (time.perf_counter() - start, time.process_time() - cpu)


def opt0_laplace_allrange_1024():
    for maxiter in (600, None):
        strategy, timing = _timed(opt_0, AllRange(1024), "laplace", restarts=1, seed=0, maxiter=maxiter)
        _report(f"opt0_laplace_allrange_1024_maxiter{maxiter or 'default'}", strategy, timing, target_rmse=11.08,
                target_seconds=10, reference_implementation_seconds=128, restarts=1)


def opt0_laplace_allrange_4096():
    for maxiter in (800, None):
        strategy, timing = _timed(opt_0, AllRange(4096), "laplace", restarts=1, seed=0, maxiter=maxiter)
        _report(f"opt0_laplace_allrange_4096_maxiter{maxiter or 'default'}", strategy, timing, target_rmse=14.38,
                target_seconds=60, restarts=1, p=strategy.matrix.theta.shape[0])


def opt0_gaussian_prefix_1024():
    strategy, timing = _timed(opt_0, Prefix(1024), "gaussian")
    _report("opt0_gaussian_prefix_1024", strategy, timing, target_rmse=12.49, target_seconds=60)


def optm_laplace_3way_20x10():
    W = MarginalStack([10] * 20, [s for k in range(4) for s in itertools.combinations(range(20), k)])
    for restarts in (0, 1):
        strategy, timing = _timed(opt_marginals, W, "laplace", restarts=restarts, seed=0)
        _report(f"optm_laplace_upto3way_20x10_restarts{restarts}", strategy, timing, target_seconds=30,
                restarts=restarts, workload_marginals=len(W.blocks))


def hdmm_random_range_256x256():
    W = RandomRange((256, 256), 2000, seed=0)
    identity_rmse = identity_strategy(W).rmse()
    for name, select in (("hdmm", hdmm), ("opt_kron", opt_kron)):
        strategy, timing = _timed(select, W, "laplace", seed=0)
        _report(f"{name}_laplace_random_range_256x256", strategy, timing, bound=False, optimizer=strategy.optimizer,
                identity_rmse=identity_rmse)


def measure_reconstruct_kron_1e8():
    """End to end through the kernel on 10^8 cells: select (OPT_kron), vectorize, secure Laplace, reconstruct."""
    import resource

    import numpy as np

    import ektelo_ng as ek
    from ektelo_ng.kernel.limits import Limits
    from ektelo_ng.operators.matrix import Kronecker
    from ektelo_ng.plans.hdmm import hdmm as hdmm_plan

    sizes = {f"a{i}": 100 for i in range(4)}
    rng = np.random.default_rng(0)
    limits = Limits(max_cells=1 << 28, memory=1 << 34)  # the owner of a 10^8-cell histogram raises the defaults
    session = ek.protect({n: rng.integers(0, 100, 1_000_000) for n in sizes}, ek.Domain.from_dict(sizes), ek.PureDP(1),
                         limits=limits)
    W = Kronecker([Prefix(100)] * 4)
    start, cpu = time.perf_counter(), time.process_time()
    estimate = hdmm_plan(session.source, W, 1, restarts=1)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({
        "name": "measure_reconstruct_kron_1e8", "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
        "cells": int(estimate.x.size), "target_seconds": 60,
        "peak_memory_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2), "target_memory_gb": 24,
        "budget_spent": str(session.budget.spent.epsilon),
    }), flush=True)


CASES = {f.__name__: f for f in [opt0_laplace_allrange_1024, opt0_laplace_allrange_4096, opt0_gaussian_prefix_1024,
                                  hdmm_random_range_256x256,
                                  optm_laplace_3way_20x10, measure_reconstruct_kron_1e8]}

OPT0_CASES = [("laplace", "allrange", 1024), ("laplace", "prefix", 1024), ("laplace", "allrange", 2048),
              ("gaussian", "allrange", 1024), ("gaussian", "prefix", 1024)]


def opt0(reference: str | None, repeats: int) -> None:
    """Issue 37's side-by-side: ours and the reference's OPT_0, one BLAS thread each (module docstring)."""
    import statistics
    import tempfile

    from ektelo_ng.kernel.matrix.threads import single_threaded_blas

    with single_threaded_blas():
        machine = _gemm_gflops()
    for noise, shape, n in OPT0_CASES:
        W = (AllRange if shape == "allrange" else Prefix)(n)
        ours, theirs = [], []
        with tempfile.TemporaryDirectory() as scratch:
            for _ in range(repeats):  # interleaved, so that both sides see the same machine load
                if reference:
                    theirs.append(_reference_opt0(reference, shape, n, noise, f"{scratch}/strategy.npy"))
                ours.append(_our_opt0(W, noise))
        record = {"name": f"opt0_{noise}_{shape}_{n}", "noise": noise, "n": n, "repeats": repeats,
                  "seconds": round(statistics.median(r["seconds"] for r in ours), 3), "rmse": ours[0]["rmse"],
                  "evaluations": ours[0]["evaluations"], "machine_gflops": round(machine, 1)}
        record.update(_rates(record, _blas_flops(noise, n, "ours")))
        if theirs:
            ref = {"seconds": round(statistics.median(r["seconds"] for r in theirs), 3), "rmse": theirs[0]["rmse"],
                   "evaluations": theirs[0]["evaluations"]}
            ref.update(_rates(ref, _blas_flops(noise, n, "reference")))
            record.update({f"reference_{key}": value for key, value in ref.items()})
            cap = _cap_reaching(W, noise, ref["rmse"], ours[0]["steps_cap"])
            if cap is not None:
                at_cap = [_our_opt0(W, noise, cap)["seconds"] for _ in range(repeats)]
                record["steps_at_reference_rmse"] = cap
                record["seconds_at_reference_rmse"] = round(statistics.median(at_cap), 3)
                record["speedup_at_equal_rmse"] = round(ref["seconds"] / record["seconds_at_reference_rmse"], 1)
            record["speedup_at_defaults"] = round(ref["seconds"] / record["seconds"], 1)
        print(json.dumps(record), flush=True)


def _our_opt0(W, noise: str, maxiter: int | None = None) -> dict:
    """Our OPT_0 optimizer alone (as the reference's ``optimize``), timed; its strategy scored after."""
    import importlib

    import numpy as np

    from ektelo_ng.operators.selection.hdmm.gram import Gram
    from ektelo_ng.operators.selection.hdmm.opt0 import GAUSSIAN_MAXITER, LAPLACE_MAXITER, optimize_factor

    module, name = (("opt0", "pidentity_loss") if noise == "laplace" else ("gaussian", "DualPoint"))
    module = importlib.import_module(f"ektelo_ng.operators.selection.hdmm.{module}")
    counted, calls = getattr(module, name), [0]

    def counting(*args):
        calls[0] += 1
        return counted(*args)

    setattr(module, name, counting)
    try:
        gram = Gram.of(W)
        start = time.perf_counter()
        factor = optimize_factor(gram, noise, np.random.default_rng(0), restarts=1, maxiter=maxiter)
        seconds = time.perf_counter() - start
    finally:
        setattr(module, name, counted)
    cap = maxiter or (LAPLACE_MAXITER if noise == "laplace" else GAUSSIAN_MAXITER)
    return {"seconds": seconds, "rmse": _score(W, factor, noise), "evaluations": calls[0], "steps_cap": cap}


def _reference_opt0(python: str, shape: str, n: int, noise: str, out: str) -> dict:
    import pathlib
    import subprocess

    import numpy as np

    from ektelo_ng.operators.matrix import Dense
    from ektelo_ng.operators.selection.hdmm import PIdentity

    runner = pathlib.Path(__file__).with_name("reference_hdmm_opt0.py")
    reply = subprocess.run([python, str(runner), "--workload", shape, "--n", str(n), "--noise", noise, "--out", out],
                           capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    result = json.loads(reply)
    saved = np.load(out)
    factor = PIdentity(saved) if noise == "laplace" else Dense(saved)
    W = (AllRange if shape == "allrange" else Prefix)(n)
    return {**result, "rmse": _score(W, factor, noise)}


def _score(W, factor, noise: str) -> float:
    """RMSE at unit noise of a one-block strategy, by this project's error formula (the same for both sides)."""
    from ektelo_ng.operators.selection.hdmm import KroneckerStrategy

    return KroneckerStrategy(W, [(1.0, (W,))], [factor], noise).rmse()


def _cap_reaching(W, noise: str, target: float, most: int) -> int | None:
    """The fewest steps whose (deterministic) run reaches RMSE <= target, by bisection; None if ``most`` does not."""
    if _our_opt0(W, noise, most)["rmse"] > target:
        return None
    low, high = 0, most  # low fails (no steps is the start), high reaches
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if _our_opt0(W, noise, middle)["rmse"] <= target else (middle, high)
    return high


def _blas_flops(noise: str, n: int, side: str) -> float:
    """BLAS-3 flops of one loss-and-gradient call (Gaussian, ours: one dual point).

    Laplace, ours (opt0.pidentity_loss): four p x p x n products, 8 p^2 n, and a p x p inverse; the structured
    Gram product is O(n p) memory-bound work, not counted. Laplace, reference: four products with the dense
    n x n Gram (8 p n^2) and three p x p x n ones (6 p^2 n). Gaussian, ours: a symmetric eigendecomposition
    (LAPACK dsyevd: about 4/3 n^3 to tridiagonalize, 4/3 n^3 for divide and conquer, 2 n^3 to transform back)
    and O(n^2) more. Gaussian, reference: Cholesky and inverse (n^3) and two n^3 products (4 n^3).
    """
    p = max(n // 16, 1)
    if noise == "laplace":
        return 8 * p * p * n + 2 * p**3 if side == "ours" else 8 * p * n * n + 6 * p * p * n
    return (4 / 3 + 4 / 3 + 2) * n**3 if side == "ours" else 5 * n**3


def _rates(record: dict, flops: float) -> dict:
    per = record["seconds"] / max(record["evaluations"], 1)
    return {"ms_per_evaluation": round(1e3 * per, 3), "blas_gflop_per_evaluation": round(flops / 1e9, 4),
            "gflops": round(flops / per / 1e9, 1)}


def _gemm_gflops() -> float:
    import numpy as np

    a, b = np.random.default_rng(0).random((2, 2048, 2048))
    a @ b
    start = time.perf_counter()
    a @ b
    return 2 * 2048**3 / (time.perf_counter() - start) / 1e9


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"cases to run: opt0 or any of {', '.join(CASES)}")
    parser.add_argument("--reference", help="opt0: the Python of an environment where the reference HDMM is installed")
    parser.add_argument("--repeats", type=int, default=3, help="opt0: runs of each side per case (medians)")
    args = parser.parse_args()
    unknown = sorted(set(args.cases) - set(CASES) - {"opt0"})
    if unknown:
        parser.error(f"unknown case(s) {unknown}")
    for name in args.cases or list(CASES):
        if name == "opt0":
            opt0(args.reference, args.repeats)
        else:
            CASES[name]()
