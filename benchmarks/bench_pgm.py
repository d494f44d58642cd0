"""Graphical-model inference (operators.pgm) on ResidualPlanner's measurements of every 2-way marginal.

Data: 100,000 records of a random Bayesian network (each attribute depends on up to two earlier ones), d
attributes of size 10, so the marginals have real structure. Measurements: ResidualPlanner's plan for every
<= 2-way marginal, measured through the in-process kernel at zCDP rho = 1 (default host marginals). All
2-way marginals triangulate to the complete graph, so ``fit`` takes the approximate method. Each case prints
one JSON object: seconds (fit alone, and measuring), peak memory, final loss, iterations, and the mean L1
error (over N) of the fitted 2-way marginals against the truth, beside ResidualPlanner's own least-squares
reconstruction of the same marginals. ``--save PATH.npz`` keeps the measurement pieces (for a side-by-side
with another implementation).

    python benchmarks/bench_pgm.py [pgm_d20 pgm_d100]
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

import ektelo_ng as ek  # noqa: E402
from ektelo_ng.operators.pgm import fit  # noqa: E402
from ektelo_ng.operators.pgm.loss import terms  # noqa: E402
from ektelo_ng.operators.selection.residual_planner import residual_planner  # noqa: E402

ROWS = 100_000
SIZE = 10
RHO = 1


def bayesian_network(d: int, rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Ancestral samples: attribute i draws from a Dirichlet table given up to two random earlier attributes."""
    data = np.zeros((rows, d), dtype=np.int64)
    for i in range(d):
        parents = sorted(rng.choice(i, size=min(i, 2), replace=False)) if i else []
        table = rng.dirichlet(np.full(SIZE, 0.3), size=SIZE ** len(parents))
        given = np.ravel_multi_index([data[:, p] for p in parents], (SIZE,) * len(parents)) if parents else 0
        cumulative = np.cumsum(table, axis=1)[given if parents else np.zeros(rows, dtype=np.int64)]
        data[:, i] = np.minimum((cumulative < rng.random(rows)[:, None]).sum(axis=1), SIZE - 1)
    return {f"a{i}": data[:, i] for i in range(d)}


def _truth(columns: dict[str, np.ndarray], subset: tuple[int, ...]) -> np.ndarray:
    flat = np.ravel_multi_index([columns[f"a{i}"] for i in subset], (SIZE,) * len(subset))
    return np.bincount(flat, minlength=SIZE ** len(subset)).reshape((SIZE,) * len(subset))


def save_pieces(path: str, measurements, sizes, truth: dict) -> None:
    """The measurement pieces (clique, dense matrix, answers, std) as arrays named p<k>_<field>, and the true
    2-way marginals as t<i>_<j>."""
    arrays = {f"t{i}_{j}": table for (i, j), table in truth.items()}
    k = 0
    for term in terms(measurements, sizes, "l2", 10**6):
        M = term.matrix if isinstance(term.matrix, np.ndarray) else term.matrix.dense()
        for clique, y, w in zip(term.cliques, term.answers, term.weights):
            arrays.update({f"p{k}_clique": np.asarray(clique, dtype=np.int64), f"p{k}_matrix": M,
                           f"p{k}_answers": y, f"p{k}_std": 1.0 / w})
            k += 1
    np.savez_compressed(path, count=k, sizes=np.asarray(sizes), **arrays)


def _case(d: int, save: str | None = None) -> dict:
    rng = np.random.default_rng(0)
    columns = bayesian_network(d, ROWS, rng)
    domain = ek.Domain.from_sizes([SIZE] * d)
    pairs = list(itertools.combinations(range(d), 2))
    started = time.perf_counter()
    session = ek.protect(columns, domain, ek.ZCDP(RHO), seed=0)
    strategy = residual_planner(domain, [()] + [(i,) for i in range(d)] + pairs)
    measurements = strategy.measure(session.source, ek.ZCDP(RHO))
    measuring = time.perf_counter() - started
    truth = {p: _truth(columns, p) for p in pairs}
    if save:
        save_pieces(save, measurements, domain.sizes, truth)
    least_squares = strategy.reconstruct(measurements)
    started = time.perf_counter()
    model = fit(domain, measurements)
    seconds = time.perf_counter() - started
    ours = [np.abs(model.marginal(p) - truth[p]).sum() / ROWS for p in pairs]
    theirs = [np.abs(least_squares.marginal(p) - truth[p]).sum() / ROWS for p in pairs]
    return {"fit_seconds": round(seconds, 2), "measure_seconds": round(measuring, 2),
            "method": type(model).__name__, "iterations": len(model.history) - 1, "loss": model.history[-1],
            "pieces": sum(1 for _ in pairs) + d + 1, "l1_pgm_2way": float(np.mean(ours)),
            "l1_least_squares_2way": float(np.mean(theirs)), "total": model.total}


if __name__ == "__main__":
    save = None
    if "--save" in sys.argv:
        at = sys.argv.index("--save")
        save = sys.argv[at + 1]
        del sys.argv[at : at + 2]
    main({"pgm_d20": lambda: _case(20, save), "pgm_d100": lambda: _case(100, save)})
