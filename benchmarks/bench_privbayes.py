"""PrivBayes through the kernel, fitted two ways: least squares on the data vector (PrivBayesLS, ektelo's plan 17)
and one graphical model (PrivBayes+PGM), on the same measurements.

Data: the built-in census-like table and the CPS-schema table (``ektelo_ng.example_tables``, 50,000 records).
Budget: pure epsilon = 1, 0.3 of it on the network (degree 2, conditional tables of at most 10,000 cells),
0.7 on Laplace counts of its conditional tables. Each case prints one JSON object per seed (5 seeds): seconds
(measuring, least squares, model fit), and the mean L1 error over N of the 2-way marginals inside a measured
table ("measured") and of those outside every one ("unmeasured"), for both fits, and their ratios.

    python benchmarks/bench_privbayes.py [privbayes_census privbayes_cps]
"""

from __future__ import annotations

import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

import ektelo_ng as ek  # noqa: E402
from ektelo_ng import example_tables  # noqa: E402
from ektelo_ng.kernel.matrix import Identity, Kronecker, Total  # noqa: E402
from ektelo_ng.operators import pgm  # noqa: E402
from ektelo_ng.operators.inference import least_squares  # noqa: E402
from ektelo_ng.plans.privbayes import measured  # noqa: E402

ROWS, EPSILON, SEEDS = 50_000, 1, range(5)


def _truth(columns, domain, pair) -> np.ndarray:
    shape = [domain[a] for a in pair]
    return np.bincount(np.ravel_multi_index([columns[a] for a in pair], shape), minlength=int(np.prod(shape))
                       ).reshape(shape)


def _seed(columns, domain: dict[str, int], seed: int) -> dict:
    names, sizes = list(domain), list(domain.values())
    started = time.perf_counter()
    session = ek.protect(columns, domain, ek.PureDP(EPSILON), seed=seed)
    network, measurements = measured(session.source, ek.PureDP(EPSILON), 0.3, 2, 10_000, seed, "benchmark")
    measure_seconds = time.perf_counter() - started
    started = time.perf_counter()
    x = least_squares([m.on(Kronecker([Identity(n) if i in m.attributes else Total(n) for i, n in enumerate(sizes)]))
                       for m in measurements]).reshape(sizes)
    ls_seconds = time.perf_counter() - started
    started = time.perf_counter()
    model = pgm.fit(domain, measurements)
    fit_seconds = time.perf_counter() - started
    tables = [set(m.attributes) for m in measurements]
    errors: dict[str, list[tuple[float, float]]] = {"measured": [], "unmeasured": []}
    for pair in combinations(names, 2):
        keep = [names.index(a) for a in pair]
        truth = _truth(columns, domain, pair)
        by_ls = x.sum(axis=tuple(i for i in range(len(names)) if i not in keep))
        where = "measured" if any(set(keep) <= t for t in tables) else "unmeasured"
        errors[where].append((np.abs(by_ls - truth).sum() / ROWS, np.abs(model.marginal(list(pair)) - truth).sum() / ROWS))
    out = {"seed": seed, "network": [[c, list(p)] for c, p in network], "measure_seconds": round(measure_seconds, 2),
           "ls_seconds": round(ls_seconds, 2), "fit_seconds": round(fit_seconds, 2), "method": type(model).__name__}
    for where, pairs in errors.items():
        ls, fitted = np.mean(pairs, axis=0) if pairs else (float("nan"), float("nan"))
        out.update({f"{where}_marginals": len(pairs), f"l1_ls_{where}": round(float(ls), 5),
                    f"l1_pgm_{where}": round(float(fitted), 5), f"ratio_{where}": round(float(fitted / ls), 3)})
    return out


def _case(table) -> dict:
    runs = []
    for seed in SEEDS:
        columns, domain = table(ROWS, seed)
        runs.append(_seed(columns, domain, seed))
    summary = {f"mean_{key}": round(float(np.mean([r[key] for r in runs])), 5)
               for key in ("l1_ls_measured", "l1_pgm_measured", "l1_ls_unmeasured", "l1_pgm_unmeasured")}
    summary["pgm_at_or_below_ls_every_seed"] = all(
        r["l1_pgm_measured"] <= r["l1_ls_measured"] and r["l1_pgm_unmeasured"] <= r["l1_ls_unmeasured"] for r in runs)
    return {**summary, "runs": runs}


if __name__ == "__main__":
    main({"privbayes_census": lambda: _case(example_tables.census), "privbayes_cps": lambda: _case(example_tables.cps)})
