"""``ektelo-ng dpbench``: replay the DPBench study with the catalog's plans.

With no grid options (or with ``--quick``) it runs a small grid on the built-in synthetic shapes,
so it needs no data files. Results go to ``--out``: ``results.csv`` (one row per run, appended as
runs finish; a rerun skips what is recorded), ``results.json``, ``summary.json`` and, with
``--plots``, PNG figures.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ektelo_ng.dpbench import data, plots, report
from ektelo_ng.dpbench.grid import QUICK, Grid, parse_domain
from ektelo_ng.dpbench.metrics import METRICS
from ektelo_ng.dpbench.runner import run_grid
from ektelo_ng.dpbench.workloads import WORKLOADS
from ektelo_ng.plans import info

DEFAULT_SCALES = ("1e3", "1e4", "1e5", "1e6", "1e7")
GROUPS = {"all-1d": lambda: data.datasets(1, builtin=False), "all-2d": lambda: data.datasets(2, builtin=False),
          "builtin": lambda: data.datasets(builtin=True), "builtin-1d": lambda: data.datasets(1, builtin=True),
          "builtin-2d": lambda: data.datasets(2, builtin=True)}


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "dpbench",
        help="replay the DPBench study: algorithms x datasets x scales x domains x epsilons x trials",
        description=(
            "Run DPBench algorithms (plans of the catalog) on DPBench data sampled to chosen scales and coarsened "
            "to chosen domains, each run in a fresh kernel with exactly its budget, scored with DPBench's scaled "
            "per-query error against the sample. Runs go in parallel, with a progress bar; results are appended "
            "to OUT/results.csv as they finish, and a rerun with the same --out skips finished runs. With no grid "
            "option it runs --quick: a small grid on the built-in synthetic shapes (no data files needed)."
        ),
        epilog=(
            "Lists are comma- or space-separated. Datasets: DPBench names or aliases (need --data-dir, the folder "
            "holding 1D/ and 2D/), built-in SYN-* shapes, or the groups all-1d, all-2d, builtin, builtin-1d, "
            "builtin-2d. Example, DPBench's 1-D grid: ektelo-ng dpbench --datasets all-1d --data-dir "
            "shared/dpbench --epsilons 0.1 --trials 5 --out dpbench-1d --plots"
        ),
    )
    grid = parser.add_argument_group("the grid (with --quick, options left out take the quick grid's values)")
    grid.add_argument("--algorithms", nargs="+", metavar="NAME",
                      help=f"plans of the catalog, or 'all' (default: every plan that fits the data): {', '.join(info)}")
    grid.add_argument("--datasets", nargs="+", metavar="NAME", help="datasets or groups, see below (default: builtin-1d)")
    grid.add_argument("--scales", nargs="+", metavar="N", help=f"record counts (default: {' '.join(DEFAULT_SCALES)})")
    grid.add_argument("--domains", nargs="+", metavar="D",
                      help="domain sizes: one side (256: 256 in 1-D, 256x256 in 2-D) or every side (32x64); each "
                           "must divide 4096 (1-D) or 256 (2-D) (default: the data's own 4096 / 256x256)")
    grid.add_argument("--epsilons", nargs="+", metavar="EPS", help="pure-DP budgets per run (default: 0.1)")
    grid.add_argument("--trials", type=int, help="runs per setting, each on a fresh sample (default: 5)")
    grid.add_argument("--workload", choices=list(WORKLOADS),
                      help="default: Prefix in 1-D, RandomRange (2000 queries) in 2-D, as DPBench")
    grid.add_argument("--quick", action="store_true",
                      help="the small built-in grid: " + ", ".join(f"{k} {_show(v)}" for k, v in QUICK.items()))
    parser.add_argument("--data-dir", metavar="DIR", help="the DPBench data folder (with 1D/ and 2D/)")
    parser.add_argument("--out", default="dpbench-results", metavar="DIR", help="where results and figures go (default: dpbench-results)")
    parser.add_argument("--plots", action="store_true", help="write PNG figures (needs matplotlib: the [plot] extra)")
    parser.add_argument("--jobs", type=int, help="worker processes (default: one per core)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of data samples, workloads and noise (default: 0)")
    parser.add_argument("--public-scale", action="store_true",
                        help="give plans that treat the record count as public the true count (as their papers "
                             "do) instead of letting them spend part of the budget on a noisy total")
    parser.add_argument("--secure-noise", action="store_true",
                        help="cryptographically secure noise instead of seeded, reproducible noise")
    parser.add_argument("--metric", choices=METRICS, default="L2", help="the error the summary ranks by (default: L2)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def _show(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _items(values) -> list[str]:
    return [v for value in values or () for v in re.split(r"[,\s]+", str(value)) if v]


def _datasets(names: list[str]) -> list[str]:
    out = []
    for name in names:
        out.extend(GROUPS[name.lower()]() if name.lower() in GROUPS else [data.dataset(name).name])
    return list(dict.fromkeys(out))


def grid_from(args: argparse.Namespace) -> Grid:
    """The grid the options describe (``--quick``, or no grid option, fills the rest from :data:`QUICK`)."""
    given = {k: getattr(args, k) for k in ("algorithms", "datasets", "scales", "domains", "epsilons", "trials")}
    quick = args.quick or all(v is None for v in given.values()) and args.workload is None
    defaults = dict(QUICK) if quick else dict(
        algorithms=None, datasets=("builtin-1d",), scales=DEFAULT_SCALES, domains=(), epsilons=("0.1",), trials=5,
    )
    pick = {k: (v if v is not None else defaults[k]) for k, v in given.items()}
    datasets = _datasets(_items(pick["datasets"]))
    algorithms = _items(pick["algorithms"])
    if not algorithms or algorithms == ["all"]:
        dims = {data.dataset(d).dimensions for d in datasets}
        algorithms = [a for a in info if any(d in info[a].dimensions for d in dims)]
    try:
        scales = tuple(int(float(s)) for s in _items(pick["scales"]))
    except ValueError:
        raise ValueError(f"scales are record counts such as 1000 or 1e6, got {pick['scales']}") from None
    return Grid(
        algorithms=tuple(algorithms), datasets=tuple(datasets), scales=scales,
        domains=tuple(parse_domain(d) for d in _items(pick["domains"])), epsilons=tuple(_items(pick["epsilons"])),
        trials=int(pick["trials"]), workload=args.workload, seed=args.seed, public_scale=args.public_scale,
    )


def run(args: argparse.Namespace) -> int:
    grid = grid_from(args)
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if args.plots:
        plots.pyplot()  # no matplotlib: say so now, not after the replay
    out = Path(args.out)
    print(f"DPBench replay: {grid.size()} runs ({len(grid.algorithms)} algorithms, {len(grid.datasets)} datasets, "
          f"scales {' '.join(map(str, grid.scales))}, epsilon {' '.join(grid.epsilons)}, {grid.trials} trials) -> {out}/")
    rows = run_grid(grid, out, args.data_dir, jobs=args.jobs, secure=args.secure_noise, progress=not args.no_progress)
    table = report.cells(rows, args.metric)
    overview = report.standings(table)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    (out / "summary.json").write_text(json.dumps(
        {"metric": args.metric, "settings": report.as_dicts(table), "overview": report.as_dicts(overview)}, indent=1))
    print(report.text(table, overview, rows, args.metric))
    if args.plots:
        for path in plots.overview(overview, out, args.metric) + plots.error_vs_scale(table, out, args.metric):
            print(f"figure: {path}")
    print(f"results: {out / 'results.csv'} ({len(rows)} runs), {out / 'results.json'}, {out / 'summary.json'}")
    return 0
