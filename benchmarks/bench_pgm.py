"""Graphical-model inference (operators.pgm) on ResidualPlanner's measurements, against least squares and mbi on
the same measurements (``side_by_side.compare``).

Cases (each prints one JSON object: means over seeds, worst ratios, and every seed's numbers):
- ``census_rp``, ``cps_rp``: the built-in census-like table (7 attributes, 320,000 cells) and the CPS-schema
  table (5 attributes, 280,000 cells), 50,000 records, 5 seeds (table sample and noise). Every <= 2-way
  marginal is measured by ResidualPlanner through the kernel at zCDP rho = RHO. Error: mean L1 over N of the
  2-way marginals ("measured") and of every 3-way marginal ("unmeasured"). Least squares: ResidualPlanner's
  reconstruction for the measured ones; for the 3-way ones, the marginals of the minimum-norm least-squares
  data vector (what every least-squares plan answers outside its measurements). The model's tree is the
  whole domain, so ``fit`` takes the exact method.
- ``bn_d20``, ``bn_d100``: 100,000 records of a random Bayesian network, d attributes of size 10, every
  <= 2-way marginal measured at rho = 1, one seed. All 2-way marginals triangulate to the complete graph, so
  ``fit`` takes the approximate method; error on the 2-way marginals. mbi is run at d = 20 only.

    python benchmarks/bench_pgm.py [census_rp cps_rp bn_d20 bn_d100]
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402
from side_by_side import compare, summary  # noqa: E402

import ektelo_ng as ek  # noqa: E402
from ektelo_ng import example_tables  # noqa: E402
from ektelo_ng.operators.inference import least_squares  # noqa: E402
from ektelo_ng.operators.selection.residual_planner import residual_planner  # noqa: E402

TABLE_ROWS, TABLE_SEEDS, RHO = 50_000, range(5), 0.1
NETWORK_ROWS, SIZE = 100_000, 10


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


def _measured(columns, sizes: dict[str, int], rho: float, seed: int):
    """Every <= 2-way marginal measured by ResidualPlanner through the kernel: the strategy and measurements."""
    d = len(sizes)
    session = ek.protect(columns, sizes, ek.ZCDP(rho), seed=seed)
    strategy = residual_planner(ek.Domain.from_dict(sizes), [()] + [(i,) for i in range(d)]
                                + list(itertools.combinations(range(d), 2)))
    return strategy, strategy.measure(session.source, ek.ZCDP(rho))


def _table_seed(table, seed: int) -> dict:
    columns, sizes = table(TABLE_ROWS, seed)
    shape = list(sizes.values())
    strategy, measurements = _measured(columns, sizes, RHO, seed)
    reconstruction = strategy.reconstruct(measurements)
    vector = least_squares([m.on_data_vector(shape) for m in measurements]).reshape(shape)

    def by_least_squares(subset: tuple[int, ...]) -> np.ndarray:
        if len(subset) <= 2:
            return reconstruction.marginal(subset)
        return vector.sum(axis=tuple(i for i in range(len(shape)) if i not in subset))

    groups = {"measured": list(itertools.combinations(range(len(shape)), 2)),
              "unmeasured": list(itertools.combinations(range(len(shape)), 3))}
    return {"seed": seed, **compare(columns, sizes, measurements, groups, by_least_squares)}


def _table_case(table) -> dict:
    runs = [_table_seed(table, seed) for seed in TABLE_SEEDS]
    return {"rho": RHO, "rows": TABLE_ROWS, **summary(runs), "runs": runs}


def _network_case(d: int, with_mbi: bool) -> dict:
    columns = bayesian_network(d, NETWORK_ROWS, np.random.default_rng(0))
    sizes = dict.fromkeys(columns, SIZE)
    strategy, measurements = _measured(columns, sizes, 1.0, 0)
    groups = {"measured": list(itertools.combinations(range(d), 2))}
    run = compare(columns, sizes, measurements, groups, strategy.reconstruct(measurements).marginal,
                  with_mbi=with_mbi)
    return {"rho": 1.0, "rows": NETWORK_ROWS, **run}


if __name__ == "__main__":
    main({"census_rp": lambda: _table_case(example_tables.census), "cps_rp": lambda: _table_case(example_tables.cps),
          "bn_d20": lambda: _network_case(20, True), "bn_d100": lambda: _network_case(100, False)})
