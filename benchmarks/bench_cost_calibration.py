"""How long the kernel's counted steps take: requests of each kind at or near the default limits, one JSON object each
with the seconds, the steps ``Work`` counted, and the nanoseconds a step.

    python benchmarks/bench_cost_calibration.py [CASE ...]

The limits promise that a request's time is bounded before it runs: 2^32 steps (``Limits.work``) are about 5 s if a
step is about 1.3 ns or less in every kind of request. A case far above that is a request whose Python work the
cost model does not count (docs/privacy/arithmetic.md#cost). ``lineage`` and ``budget`` count no steps; they are
bounded by the sources an analyst may hold (``Limits.sources``), and their seconds are printed at that limit.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.matrix import ArrayData
from ektelo_ng.kernel.privacy import PureDP, ZCDP
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.kernel.table import load_table


def _array(values) -> dict:
    return ArrayData.of(np.asarray(values)).model_dump()


class _Session:
    """One kernel over a table of ``columns``, its journal kept to read each request's counted work."""

    def __init__(self, columns: dict[str, np.ndarray], sizes: list[int], budget=PureDP(10**6)):
        self.entries: list[dict] = []
        table = load_table(columns, Domain.from_sizes(sizes, list(columns)))
        self.kernel = Kernel(table, budget, seed=1, journal=self.entries.append)

    def send(self, request: dict) -> dict:
        return json.loads(self.kernel.handle_json(json.dumps(request)))

    def vector(self) -> str:
        return self.send({"op": "vectorize", "source": self.send({"op": "root"})["source"]})["source"]

    def timed(self, name: str, request: dict) -> dict:
        start = time.perf_counter()
        reply = self.send(request)
        seconds = time.perf_counter() - start
        steps = self.entries[-1]["work"]
        if reply["kind"] == "error":
            raise RuntimeError(f"{name} was refused, so it measures nothing: {reply['message']}")
        return {"name": name, "seconds": round(seconds, 3), "steps": steps,
                "ns_per_step": round(seconds * 1e9 / steps, 3) if steps else None}


def _cells(n: int, budget=PureDP(10**6)) -> _Session:
    return _Session({"a": np.arange(n)}, [n], budget)


def ranges_16d() -> list[dict]:
    """A stack of 16-dimensional ranges leaves on one cell: 2^16 corners a block, their Python work counted."""
    s = _cells(1)
    leaf = {"kind": "ranges", "shape": [1] * 16, "lo": _array([[0] * 16]), "hi": _array([[0] * 16])}
    matrix = {"kind": "stack", "blocks": [{"factors": [leaf]}] * 4}
    return [s.timed("ranges_16d_x4", {"op": "laplace", "source": s.vector(), "epsilon": "1", "matrix": matrix})]


def kronecker() -> list[dict]:
    """A 2^22-cell Kronecker product of a dense and a ranges leaf: the array work of the sealed language."""
    s = _cells(1 << 22)
    rng = np.random.default_rng(0)
    lo = rng.integers(0, 1024, 2048)
    dense = {"kind": "dense", "data": _array(rng.normal(size=(64, 4096)))}
    ranges = {"kind": "ranges", "shape": [1024], "lo": _array(lo[:, None]),
              "hi": _array(rng.integers(lo, 1024)[:, None])}
    matrix = {"kind": "stack", "blocks": [{"factors": [ranges, dense]}]}
    return [s.timed("kronecker_2^22", {"op": "laplace", "source": s.vector(), "epsilon": "1", "matrix": matrix})]


def split_points() -> list[dict]:
    """PHP on 65,000 intervals of two cells (2^16 would pass the work limit): its Python work an interval."""
    s = _cells(1 << 17)
    intervals = [[2 * i, 2 * i + 2] for i in range(65_000)]
    return [s.timed("split_points_65000", {"op": "split_points", "source": s.vector(), "epsilon": "1",
                                          "intervals": intervals})]


def fourier_select() -> list[dict]:
    """EFPA on 16,384 cells: its basis built twice (column norms, then the scores)."""
    n = 16384
    s = _cells(n)
    return [s.timed("fourier_select_16384", {"op": "fourier_select", "source": s.vector(), "epsilon": "1",
                                             "offsets": _array(np.zeros(n))})]


def gaussian_batch() -> list[dict]:
    """10,000 items of tiny matrices: each object's Python work."""
    s = _cells(4, ZCDP(10**6))
    x = s.vector()
    matrices = [{"kind": "stack", "blocks": [{"factors": [{"kind": "identity", "n": 4}], "weight": 1.0 + i}]}
                for i in range(10_000)]
    items = [{"source": x, "matrix": i, "rho": "1/1000"} for i in range(10_000)]
    return [s.timed("gaussian_batch_10000", {"op": "gaussian_batch", "matrices": matrices, "items": items})]


def vectorize_many() -> list[dict]:
    """682 histograms of 6 of 12 attributes on 10^6 rows: 4,092 column scans, the default limit being 4,096; its
    time is the scans' (``ns_per_scanned_value``), which the steps do not count (the rows are private)."""
    names, rows = [f"a{i}" for i in range(12)], 10**6
    rng = np.random.default_rng(0)
    s = _Session({n: rng.integers(0, 2, rows) for n in names}, [2] * 12)
    subsets = [list(c) for c in itertools.islice(itertools.combinations(names, 6), 682)]
    root = s.send({"op": "root"})["source"]
    row = s.timed("vectorize_many_4092_scans_1e6_rows", {"op": "vectorize_many", "source": root,
                                                         "attributes": subsets})
    return [{**row, "ns_per_scanned_value": round(row["seconds"] * 1e9 / (4092 * rows), 3)}]


def sources() -> list[dict]:
    """A split into as many parts as an analyst may hold, then ``lineage`` and ``budget`` over them."""
    n = (1 << 16) - 4
    s = _cells(n)
    split = s.timed("split_into_65532_parts", {"op": "split_by_partition", "source": s.vector(),
                                               "partition": {"labels": _array(np.arange(n)), "groups": n}})
    return [split, s.timed("lineage_of_65536_sources", {"op": "lineage"}),
            s.timed("budget_of_65536_sources", {"op": "budget"})]


CASES = {f.__name__: f for f in (ranges_16d, kronecker, split_points, fourier_select, gaussian_batch,
                                 vectorize_many, sources)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help=f"cases to run, of {', '.join(CASES)} (default: all)")
    chosen = parser.parse_args().cases or list(CASES)
    if unknown := sorted(set(chosen) - set(CASES)):
        parser.error(f"unknown cases {unknown}: choose from {', '.join(CASES)}")
    for name in chosen:
        for row in CASES[name]():
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
