"""Two revisions of the project side by side, in one run: every case in a fresh process of each, alternately.

    python benchmarks/bench_before_after.py --before PYTHON [--after PYTHON] [--repeats 3] [CASE ...]

PYTHON is an interpreter with a revision installed in a venv of its own, for a fair comparison of two alike
environments (for the one before a change: ``git worktree add /tmp/before REV`` and ``python3 -m venv
/tmp/venv-before && /tmp/venv-before/bin/pip install /tmp/before``; the same with this checkout for ``--after``,
which defaults to this interpreter). The clock starts once the package is imported. Cases run with a neutral
working directory, so each interpreter imports its own installed revision. One JSON object per case: each revision's median seconds over the repeats, their ratio
(after / before), and the case's quality figures (the mean error and its standard error over the seeded trials,
the noise scales the kernel chose), which should agree within sampling error.

Cases: the quick DPBench replay (``ektelo-ng dpbench``), HDMM, ResidualPlanner and QuerySmasher end to end through
the kernel, a Laplace and a Gaussian measurement of a 10^7-cell Kronecker strategy, and the secure samplers'
throughput.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TRIALS = 10


def _errors(errors: list[float]) -> dict:
    return {"mean_error": round(float(np.mean(errors)), 4),
            "standard_error": round(float(np.std(errors, ddof=1) / math.sqrt(len(errors))), 4)}


def dpbench_quick() -> dict:
    """The README's main job: the small built-in replay (twelve plans, four shapes, 1e3-1e7 records, 3 trials)."""
    from ektelo_ng.cli import main

    with tempfile.TemporaryDirectory() as folder:
        assert main(["dpbench", "--out", folder, "--no-progress", "--jobs", "1"]) == 0
        rows = json.loads((Path(folder) / "results.json").read_text())
    by_plan: dict[str, list[float]] = {}
    for row in rows:
        by_plan.setdefault(row["algorithm"], []).append(float(row["L2"]))
    return {"runs": len(rows), "mean_L2_by_plan": {k: round(float(np.mean(v)), 3) for k, v in sorted(by_plan.items())}}


def _table_1d(n: int, rows: int = 100_000):
    import ektelo_ng as ek

    rng = np.random.default_rng(0)
    values = np.minimum(rng.geometric(4.0 / n, rows) - 1, n - 1)
    return {"v": values}, ek.Domain.from_dict({"v": n}), np.bincount(values, minlength=n)


def hdmm_prefix_1024() -> dict:
    """The HDMM plan on Prefix(1024) at epsilon 1, TRIALS seeded kernels: the RMSE of its answers."""
    import ektelo_ng as ek
    from ektelo_ng.plans import catalog

    columns, domain, truth = _table_1d(1024)
    W = ek.workload.Prefix(1024)
    errors = []
    for trial in range(TRIALS):
        session = ek.protect(columns, domain, ek.PureDP(1), seed=trial)
        estimate = catalog["HDMM"](session.source, W, ek.PureDP(1), restarts=1, seed=0)
        errors.append(float(np.sqrt(np.mean((estimate.answer(W) - W @ truth) ** 2))))
    return _errors(errors)


def _marginal_error(estimate, columns, domain, marginals) -> float:
    import itertools

    total = 0.0
    for attributes in marginals:
        names = [domain.names[i] for i in attributes]
        shape = [domain.sizes[i] for i in attributes]
        truth = np.bincount(np.ravel_multi_index([columns[n] for n in names], shape), minlength=int(np.prod(shape)))
        total += float(np.abs(np.ravel(estimate.marginal(tuple(attributes))) - truth).sum())
    return total / len(list(itertools.chain(marginals)))


def residual_planner_census() -> dict:
    """ResidualPlanner on the census-like table (7 attributes), all 2-way marginals at rho = 0.5: L1 per marginal."""
    import itertools

    import ektelo_ng as ek
    from ektelo_ng.example_tables import census
    from ektelo_ng.plans import catalog

    columns, sizes = census(20_000, seed=0)
    domain = ek.Domain.from_dict(sizes)
    marginals = list(itertools.combinations(range(len(sizes)), 2))
    errors = []
    for trial in range(TRIALS):
        session = ek.protect(columns, domain, ek.ZCDP("1/2"), seed=trial)
        estimate = catalog["ResidualPlanner"](session.source, marginals, ek.ZCDP("1/2"))
        errors.append(_marginal_error(estimate, columns, domain, marginals))
    return _errors(errors)


def query_smasher_census() -> dict:
    """QuerySmasher on the census-like table: prefix queries on every 2-way marginal of its first four attributes."""
    import itertools

    import ektelo_ng as ek
    from ektelo_ng.example_tables import census
    from ektelo_ng.operators.selection.query_smasher import query_class_workload
    from ektelo_ng.plans import catalog

    columns, sizes = census(20_000, seed=0)
    names = list(sizes)[:4]
    columns = {n: columns[n] for n in names}
    domain = ek.Domain.from_dict({n: sizes[n] for n in names})
    workload = query_class_workload(domain.sizes, "prefix", ways=(2,))
    errors = []
    for trial in range(TRIALS):
        session = ek.protect(columns, domain, ek.ZCDP("1/2"), seed=trial)
        estimate = catalog["QuerySmasher"](session.source, workload, ek.ZCDP("1/2"))
        truth = []
        for attributes, matrix in workload:
            shape = [domain.sizes[i] for i in attributes]
            counts = np.bincount(np.ravel_multi_index([columns[names[i]] for i in attributes], shape),
                                 minlength=int(np.prod(shape)))
            truth.append(matrix @ counts)
        errors.append(float(np.sqrt(np.mean((estimate.answers() - np.concatenate(truth)) ** 2))))
    return _errors(errors)


def _kronecker_session(budget):
    import ektelo_ng as ek

    sizes = {"a": 10, "b": 10, "c": 100, "d": 1000}  # 10^7 cells
    rng = np.random.default_rng(0)
    columns = {name: rng.integers(0, size, 1_000_000) for name, size in sizes.items()}
    from ektelo_ng.kernel.limits import Limits
    from ektelo_ng.matrix import Hierarchical, Identity, Kronecker, Prefix

    strategy = Kronecker([Identity(10), Prefix(10), Hierarchical(100, 4), Identity(1000)])
    # 1.57e7 answers: about 8.4e9 counted steps, over the default 2^32 per request (the owner raises it)
    limits = Limits(work=2**36)
    return ek.protect(columns, ek.Domain.from_dict(sizes), budget, limits=limits).source.vectorize(), strategy


def kernel_laplace_1e7() -> dict:
    import ektelo_ng as ek

    x, strategy = _kronecker_session(ek.PureDP(1))
    start = time.perf_counter()
    answer = x.laplace(strategy, 1)
    return {"measure_seconds": round(time.perf_counter() - start, 3), "noise_scale": answer.scale}


def kernel_gaussian_1e7() -> dict:
    from fractions import Fraction

    import ektelo_ng as ek

    x, strategy = _kronecker_session(ek.ZCDP(1))
    start = time.perf_counter()
    answer = x.gaussian(strategy, rho=Fraction(1, 2))
    return {"measure_seconds": round(time.perf_counter() - start, 3), "noise_scale": answer.scale}


def noise_throughput() -> dict:
    """10^7 secure discrete Laplace and Gaussian samples each, at scale 10^4 grid steps."""
    from ektelo_ng.kernel.noise import NoiseSource, discrete_gaussian, discrete_laplace, supported_scale

    out = {}
    for name, sampler in (("laplace", discrete_laplace), ("gaussian", discrete_gaussian)):
        scale = supported_scale(name, 1e4)
        sampler(NoiseSource(), scale, 1000)
        start = time.perf_counter()
        sampler(NoiseSource(), scale, 10_000_000)
        out[f"{name}_samples_per_second"] = round(1e7 / (time.perf_counter() - start))
    return out


CASES = {f.__name__: f for f in [dpbench_quick, hdmm_prefix_1024, residual_planner_census, query_smasher_census,
                                 kernel_laplace_1e7, kernel_gaussian_1e7, noise_throughput]}


def _run(python: str, case: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:  # a neutral directory: the interpreter's own install is imported
        done = subprocess.run([python, str(Path(__file__).resolve()), "--case", case], capture_output=True, text=True,
                              cwd=folder, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{case} failed under {python}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"default: all of {', '.join(CASES)}")
    parser.add_argument("--before", help="the interpreter of the revision before")
    parser.add_argument("--after", default=sys.executable, help="the interpreter of the revision after (default: this)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        import ektelo_ng.plans  # noqa: F401  (imports are not what is compared)

        start = time.perf_counter()
        result = CASES[args.case]()
        print(json.dumps({"seconds": round(time.perf_counter() - start, 3), **result}))
        return
    if not args.before:
        parser.error("give --before PYTHON: an interpreter with the revision to compare with installed")
    for case in args.cases or CASES:
        runs = {"before": [], "after": []}
        for _ in range(args.repeats):
            for side in ("before", "after"):
                runs[side].append(_run(getattr(args, side), case))
        seconds = {side: statistics.median(r["seconds"] for r in rs) for side, rs in runs.items()}
        record = {"name": case, "seconds": seconds["after"], "seconds_before": seconds["before"],
                  "ratio": round(seconds["after"] / seconds["before"], 3),
                  "before": {k: v for k, v in runs["before"][-1].items() if k != "seconds"},
                  "after": {k: v for k, v in runs["after"][-1].items() if k != "seconds"}}
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
