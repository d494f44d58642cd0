"""The coverage table of docs/error-bars.md: each 1-D catalog plan's 90% and 95% intervals on Prefix queries, 40
fresh kernels per (plan, data shape, cells), epsilon 0.1 on 20,000 records.

    python benchmarks/bench_coverage.py [--cells 256 4096] [--runs 40] [PLAN ...]

One JSON object per case: name, seconds, coverage and its standard error per level (over the runs, of the claimed
intervals), and the share withheld and why.
"""

from __future__ import annotations

import argparse
import json
import time

from ektelo_ng.coverage import LEVELS, coverage
from ektelo_ng.plans import info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plans", nargs="*", help="default: every 1-D plan of the catalog")
    parser.add_argument("--cells", type=int, nargs="+", default=[256])
    parser.add_argument("--shapes", nargs="+", default=["flat", "skewed", "steps"])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    names = args.plans or sorted(name for name, entry in info.items() if 1 in entry.dimensions)
    for cells in args.cells:
        for shape in args.shapes:
            for name in names:
                start = time.perf_counter()
                found = coverage(name, shape, cells, args.runs)
                print(json.dumps({
                    "name": f"{name} {shape} {cells}", "seconds": round(time.perf_counter() - start, 2),
                    **{f"coverage_{level}": round(found.mean(level), 4) for level in LEVELS},
                    **{f"se_{level}": round(found.standard_error(level), 4) for level in LEVELS},
                    "withheld": round(found.withheld / max(found.answers, 1), 4),
                    "reasons": sorted(found.reasons)[:2],
                }), flush=True)


if __name__ == "__main__":
    main()
