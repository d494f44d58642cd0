"""Kernel benchmarks: measuring an implicit Kronecker strategy over 10^7 cells with secure noise, and the
round-trip overhead of a small request to an out-of-process kernel.

    python benchmarks/bench_kernel.py [CASE ...]

Targets (issue 3): Laplace and Gaussian measurement of a 10^7-cell vector under 5 s each;
out-of-process round trip under 5 ms for a small answer. (Vectorizing 10^7 rows: bench_vectorize.py.)
"""

from __future__ import annotations

import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

import ektelo_ng as ek  # noqa: E402
from ektelo_ng.session import kernel_process  # noqa: E402
from ektelo_ng.operators.matrix import Identity, Kronecker  # noqa: E402
from ektelo_ng.operators.matrices import Hierarchical, Prefix  # noqa: E402

SIZES = {"a": 10, "b": 10, "c": 100, "d": 1000}  # 10^7 cells


def _session(budget):
    rng = np.random.default_rng(0)
    columns = {name: rng.integers(0, size, 1_000_000) for name, size in SIZES.items()}
    return ek.protect(columns, ek.Domain.from_dict(SIZES), budget)


def _strategy():
    return Kronecker([Identity(10), Prefix(10), Hierarchical(100, 4), Identity(1000)])


def measure_laplace_1e7() -> dict:
    x = _session(ek.PureDP(1)).source.vectorize()
    start = time.perf_counter()
    answer = x.laplace(_strategy(), 1)
    seconds = time.perf_counter() - start
    return {"cells": x.size, "answers": int(answer.values.size), "measure_seconds": round(seconds, 3),
            "noise_scale": answer.scale}


def measure_gaussian_1e7() -> dict:
    x = _session(ek.ZCDP(1)).source.vectorize()
    start = time.perf_counter()
    answer = x.gaussian(_strategy(), rho=Fraction(1, 2))
    seconds = time.perf_counter() - start
    return {"cells": x.size, "answers": int(answer.values.size), "measure_seconds": round(seconds, 3),
            "noise_scale": answer.scale}


def round_trip_out_of_process() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "t.csv").write_text("v\n" + "\n".join(str(i % 16) for i in range(1000)) + "\n")
        (folder / "d.json").write_text('{"v": 16}')
        with kernel_process(folder / "t.csv", folder / "d.json", ek.PureDP(10**6)) as session:  # a unix socket
            x = session.source.vectorize()
            M = Identity(16)
            x.laplace(M, 1)  # warm up
            times = []
            for _ in range(200):
                start = time.perf_counter()
                x.laplace(M, 1)
                times.append(time.perf_counter() - start)
    return {"median_ms": round(1000 * float(np.median(times)), 3), "p95_ms": round(1000 * float(np.quantile(times, 0.95)), 3)}


if __name__ == "__main__":
    main({f.__name__: f for f in [measure_laplace_1e7, measure_gaussian_1e7, round_trip_out_of_process]})
