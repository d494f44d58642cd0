"""Inference benchmarks: least squares, NNLS and multiplicative weights on implicit strategies.

Prints one JSON object per case: {"name", "seconds" (the solve alone), "setup_seconds",
quality figures}. "residual" is the relative normal-equation residual ||A^T W (A x - y)|| /
||A^T W y|| (0 at the exact least squares solution); "rmse" is per cell against the true
vector. Data: Poisson(5) counts; noise: Laplace at epsilon = 1 (scale = L1 sensitivity).
Targets: ls_quadtree_256 < 2 s; ls_h2xh2_2048 < 60 s.

    python benchmarks/bench_inference.py [CASE ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

from ektelo_ng.operators.matrix import Matrix  # noqa: E402
from ektelo_ng.operators.measurement import Measurement, known_total  # noqa: E402
from ektelo_ng.operators.inference import least_squares, multiplicative_weights, nnls  # noqa: E402
from ektelo_ng.operators.selection import classic  # noqa: E402
from ektelo_ng.operators.workload import RandomRange  # noqa: E402


def _measure(A: Matrix, seed: int = 0) -> tuple[np.ndarray, Measurement]:
    rng = np.random.default_rng(seed)
    x = rng.poisson(5.0, A.shape[1]).astype(float)
    scale = A.sensitivity("l1")
    return x, Measurement(A, A @ x + rng.laplace(0.0, scale, A.shape[0]), np.sqrt(2.0) * scale)


def _report(measurements: list[Measurement], x: np.ndarray, estimate: np.ndarray, seconds: float, setup: float) -> dict:
    def normal(v):  # sum_i M_i^T W_i^2 (M_i v - y_i), or its right-hand side for v = None
        return sum(m.matrix.T @ (m.weights**2 * ((0 if v is None else m.matrix @ v) - m.answers)) for m in measurements)

    A = measurements[0].matrix
    return {
        "seconds": round(seconds, 3),
        "setup_seconds": round(setup, 3),
        "cells": A.shape[1],
        "queries": sum(m.matrix.shape[0] for m in measurements),
        "residual": float(np.linalg.norm(normal(estimate)) / np.linalg.norm(normal(None))),
        "rmse": round(float(np.sqrt(np.mean((estimate - x) ** 2))), 4),
    }


def _least_squares_case(build, extra=lambda n: []):
    def case() -> dict:
        start = time.perf_counter()
        A = build()
        x, m = _measure(A)
        setup = time.perf_counter() - start
        measurements = [m, *extra(A.shape[1])]
        start = time.perf_counter()
        estimate = least_squares(measurements)
        return _report(measurements, x, estimate, time.perf_counter() - start, setup)

    return case


def nnls_h2() -> dict:
    A = classic.h2(1024).matrix
    x, m = _measure(A)
    measurements = [m, known_total(1024, float(x.sum()), 1e-2)]
    start = time.perf_counter()
    estimate = nnls(measurements)
    seconds = time.perf_counter() - start
    # residual: nonzero where the constraint x >= 0 is active
    return {**_report(measurements, x, estimate, seconds, 0.0), "zero_cells": int((estimate == 0).sum())}


def mw_h2() -> dict:
    A = classic.h2(4096).matrix
    x, m = _measure(A)
    start = time.perf_counter()
    estimate = multiplicative_weights([m], float(x.sum()), iterations=50)
    return _report([m], x, estimate, time.perf_counter() - start, 0.0)


def greedy_h_dpbench() -> dict:
    W = RandomRange(4096, 1000, seed=0)
    start = time.perf_counter()
    A = classic.greedy_h(W).matrix
    return {"seconds": round(time.perf_counter() - start, 3), "queries": A.shape[0], "sensitivity": A.sensitivity()}


CASES = {
    "ls_quadtree_256": _least_squares_case(lambda: classic.quadtree((256, 256)).matrix),
    "ls_quadtree_256_known_total": _least_squares_case(
        lambda: classic.quadtree((256, 256)).matrix, lambda n: [known_total(n, 5.0 * n, 1.0)]
    ),
    "ls_hb_256": _least_squares_case(lambda: classic.hb((256, 256)).matrix),
    "ls_h2xh2_2048": _least_squares_case(lambda: classic.h2((2048, 2048)).matrix),
    "nnls_h2_1024_known_total": nnls_h2,
    "mw_h2_4096": mw_h2,
    "select_greedy_h_4096": greedy_h_dpbench,
}


if __name__ == "__main__":
    main(CASES)
