"""``ektelo-ng census``: write a synthetic Person table, or release SF1 / SF1+ from one with error bars."""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

from ektelo_ng.census_release import RELEASE_LIMITS
from ektelo_ng.commands.limit_options import add_limit_options, limits_from
from ektelo_ng.grammar import BUDGET_HELP, parse_budget, show_budget

DEFAULT_ROWS = 100_000


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "census",
        help="release the SF1 person tables (HDMM's SF1 / SF1+) from a Person table, with error bars",
        description=(
            "Release the 2010 Census SF1 person tables that HDMM's paper releases: SF1 (4,151 national counts) or "
            "SF1+ (the same for the nation and each of 51 states: 215,852 counts over 25.5 million cells), from a "
            "Person table of integer codes (state, race, hispanic, sex, age, relationship: see docs/census.md) left "
            "in DuckDB or Spark. 'generate' writes a synthetic Person table of any size to try it on."
        ),
    )
    jobs = parser.add_subparsers(dest="job", metavar="JOB")
    generate = jobs.add_parser("generate", help="write a synthetic Person table as Parquet files",
                               description="Write ROWS synthetic Person records (2010 margins) as Parquet files.")
    generate.add_argument("--rows", type=_count, default=DEFAULT_ROWS, help=f"records to write (default {DEFAULT_ROWS})")
    generate.add_argument("--out", required=True, help="an empty or new directory for the Parquet files")
    generate.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    generate.add_argument("--national", action="store_true", help="leave out the state column (for SF1)")
    generate.set_defaults(run=run_generate)

    release = jobs.add_parser(
        "release", help="release SF1 or SF1+ from a Person table",
        description=(
            "Spend the budget once on HDMM's strategy for the workload and write every answer with its standard "
            "deviation and confidence interval, labelled by geography, table and line, as CSV or Parquet. Without "
            f"--table, a synthetic table of {DEFAULT_ROWS} records is generated in a temporary directory."
        ),
    )
    release.add_argument("--table", help="Parquet/CSV files, a glob or a directory of them (default: synthetic)")
    release.add_argument("--workload", choices=("sf1+", "sf1"), default="sf1+",
                         help="sf1+: nation and states (the table needs a state column); sf1: national only")
    release.add_argument("--backend", choices=("duckdb", "spark"), default="duckdb",
                         help="who counts the rows: DuckDB in this process (default) or Spark")
    release.add_argument("--spark-master", help="with --backend spark: the master URL (e.g. local[2], spark://host:7077)")
    release.add_argument("--budget", default="epsilon=1",
                         help=f"{BUDGET_HELP} (default epsilon=1: Laplace noise; rho= or delta= give Gaussian)")
    release.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    release.add_argument("--out", default="sf1-release.csv", help="the release: .csv or .parquet (default %(default)s)")
    add_limit_options(release, RELEASE_LIMITS)
    release.set_defaults(run=run_release)
    parser.set_defaults(run=lambda args: parser.print_help() or 0)


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"give a positive number of records, not {value}")
    return value


def run_generate(args: argparse.Namespace) -> int:
    from ektelo_ng.census_persons import write_persons

    out = write_persons(args.out, args.rows, seed=args.seed, national=args.national)
    print(f"wrote {args.rows} Person records to {out}/")
    return 0


def run_release(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ektelo_ng.census_persons import write_persons
    from ektelo_ng.census_release import STAGES, Stage, release_sf1

    budget, plus = parse_budget(args.budget), args.workload == "sf1+"
    if args.spark_master and args.backend != "spark":
        raise ValueError("--spark-master needs --backend spark")
    needed = {"duckdb": "duckdb", "spark": "pyspark"}[args.backend], *(() if args.table else ("pyarrow",))
    missing = [module for module in needed if importlib.util.find_spec(module) is None]
    if missing:  # before a table is generated or anything read
        extras = {"duckdb": "duckdb", "pyspark": "spark", "pyarrow": "parquet"}
        raise ImportError(f"this release needs {', '.join(missing)}: pip install -e "
                          f"'.[{','.join(extras[m] for m in missing)}]' in the ektelo-ng folder")
    engine = {"master": args.spark_master} if args.spark_master else {}
    with tempfile.TemporaryDirectory(prefix="ektelo-census-") as scratch:
        table = args.table
        if table is not None and not any(c in table for c in "*?[") and not Path(table).exists():
            raise ValueError(f"--table {table}: no such file or directory; give Parquet/CSV files, a glob or a "
                             "directory of them ('ektelo-ng census generate --out DIR' writes one)")
        if table is None:
            table = str(write_persons(Path(scratch) / "persons", DEFAULT_ROWS, national=not plus))
            print(f"no --table: generated {DEFAULT_ROWS} synthetic Person records in {table}/")
        print(f"releasing {args.workload.upper()} from {table} ({args.backend}) at {show_budget(budget)}")
        with tqdm(total=len(STAGES), desc=STAGES[0], unit=" stage", leave=False) as bar:

            def done_stage(stage: Stage) -> None:
                bar.write(f"  {stage.name:<12} {stage.seconds:8.2f} s   peak memory {stage.peak_bytes / 2**30:.2f} GiB")
                bar.update()
                bar.set_description(STAGES[min(bar.n, len(STAGES) - 1)])  # the stage now running

            done = release_sf1(table, budget, plus=plus, backend=args.backend, out=args.out, level=args.level,
                               on_stage=done_stage, limits=limits_from(args), **engine)
    rows, cells = done.workload.matrix.shape
    print(f"{rows} answers over {cells} cells -> {done.path}; expected RMSE per answer {done.expected_rmse:.2f}; "
          f"intervals: {done.columns['method'][0]}")
    return 0
