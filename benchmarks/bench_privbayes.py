"""PrivBayes through the kernel, fitted three ways on the same measurements: least squares on the data vector
(PrivBayesLS, ektelo's plan 17), one graphical model (PrivBayes+PGM) and mbi (``side_by_side.compare``).

Data: the built-in census-like table and the CPS-schema table (``ektelo_ng.example_tables``, 50,000 records).
Budget: pure epsilon = 1, 0.3 of it on the network (degree 2, conditional tables of at most 10,000 cells),
0.7 on Laplace counts of its conditional tables. Each case prints one JSON object: means over the 5 seeds,
worst ratios, and per seed the network, seconds, and the mean L1 error over N of the 2-way marginals inside a
measured table ("measured") and of those outside every one ("unmeasured").

    python benchmarks/bench_privbayes.py [privbayes_census privbayes_cps]
"""

from __future__ import annotations

import sys
import time
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402
from side_by_side import compare, summary  # noqa: E402

import ektelo_ng as ek  # noqa: E402
from ektelo_ng import example_tables  # noqa: E402
from ektelo_ng.operators.inference import least_squares  # noqa: E402
from ektelo_ng.plans.privbayes import measured  # noqa: E402

ROWS, EPSILON, SEEDS = 50_000, 1, range(5)


def _seed(columns, sizes: dict[str, int], seed: int) -> dict:
    shape = list(sizes.values())
    started = time.perf_counter()
    session = ek.protect(columns, sizes, ek.PureDP(EPSILON), seed=seed)
    network, measurements = measured(session.source, ek.PureDP(EPSILON), 0.3, 2, 10_000, seed, "benchmark")
    measure_seconds = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    vector = least_squares([m.on_data_vector(shape) for m in measurements]).reshape(shape)
    ls_seconds = round(time.perf_counter() - started, 2)
    tables = [set(m.attributes) for m in measurements]
    pairs = list(combinations(range(len(shape)), 2))
    groups = {"measured": [p for p in pairs if any(set(p) <= t for t in tables)],
              "unmeasured": [p for p in pairs if not any(set(p) <= t for t in tables)]}

    def by_least_squares(subset: tuple[int, ...]):
        return vector.sum(axis=tuple(i for i in range(len(shape)) if i not in subset))

    return {"seed": seed, "network": [[c, list(p)] for c, p in network], "measure_seconds": measure_seconds,
            "ls_seconds": ls_seconds, **compare(columns, sizes, measurements, groups, by_least_squares)}


def _case(table) -> dict:
    runs = [_seed(*table(ROWS, seed), seed) for seed in SEEDS]
    return {"epsilon": EPSILON, "rows": ROWS, **summary(runs), "runs": runs}


if __name__ == "__main__":
    main({"privbayes_census": lambda: _case(example_tables.census), "privbayes_cps": lambda: _case(example_tables.cps)})
