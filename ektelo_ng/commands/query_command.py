"""``ektelo-ng query``: answer SQL group-by counts, sums, means and quantiles of a labelled table jointly, from one
measurement, and write one labelled file per query with its error bars.

Everything that can be checked is checked before the table is loaded and anything is spent: the schema, the SQL
(against the schema's columns and labels), the budget, the output folder (new or empty, and writable) and the
libraries the output format needs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

from ektelo_ng.grammar import BUDGET_HELP, parse_budget

STAGES = ("reading the schema and SQL", "checking the output folder", "answering the batch", "writing the results")
STRATEGIES = ("auto", "identity", "hdmm", "residual-planner", "query-smasher")
EXAMPLE = """example:
  ektelo-ng query --table people.csv --schema people.yaml --budget epsilon=1 --out release/ \\
      --sql "SELECT sex, region, COUNT(*) AS n, AVG(income) AS mean_income FROM people GROUP BY sex, region;
             SELECT QUANTILE(age, [0.25, 0.5, 0.75]) AS age_quartiles FROM people WHERE income > 0"

people.yaml declares the columns (never read from the data):
  sex: [F, M]
  region: {categorical: [north, south, east, west], other: elsewhere}
  age: {integer: [0, 120]}
  income: {numeric: [0, 250000], bins: 50}

The SQL subset: SELECT <group columns>, COUNT(*), SUM(col), AVG(col), MEDIAN(col), QUANTILE(col, p | [p, ...])
[AS name] FROM table [WHERE ...] [GROUP BY ...]; WHERE compares columns with literals (=, !=, <, <=, >, >=,
BETWEEN, IN, AND, OR, NOT). Each aggregate is one query; statements separated by ';' are one batch. Each query's
file holds its groups' labels, the answer, std, lower, upper, level and what the interval accounts for; README.txt
says how the batch was answered. See docs/queries.md."""


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "query",
        help="answer SQL counts, sums, means and quantiles of a labelled table, jointly, with error bars",
        description=(
            "Answer a batch of SQL queries (group-by counts, sums, means, medians and quantiles) about a table\n"
            "whose columns a schema file declares, jointly from one measurement that spends the whole budget:\n"
            "the advisor picks the strategy (HDMM, ResidualPlanner, QuerySmasher, ...) for the batch, so every\n"
            "answer is consistent with the others. Writes one CSV or Parquet file per query into --out. The\n"
            "schema, the SQL, the budget and the folder are checked before the table is read or anything spent."
        ),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--table", required=True,
                        help="the table: a CSV or Parquet file (with --backend duckdb: files or a glob DuckDB reads)")
    parser.add_argument("--schema", required=True, help="the table's schema, a YAML or JSON file (see below)")
    parser.add_argument("--sql", required=True, help="the queries, or @FILE to read them from a file")
    parser.add_argument("--budget", default="epsilon=1", help=f"{BUDGET_HELP} (default epsilon=1)")
    parser.add_argument("--out", required=True, help="a new or empty folder for the results")
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv", help="one file per query (default csv)")
    parser.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="auto",
                        help="how to measure the batch (default auto: the advisor's pick at the budget)")
    parser.add_argument("--time-limit", type=float, default=20.0,
                        help="seconds the advisor may spend choosing the strategy (default 20)")
    parser.add_argument("--nonnegative", action="store_true", help="clip counts and non-negative sums at 0")
    parser.add_argument("--integer", action="store_true", help="round counts to whole numbers")
    parser.add_argument("--backend", choices=("numpy", "duckdb"), default="numpy",
                        help="who reads the rows: the kernel in this process (default) or DuckDB")
    parser.add_argument("--seed", type=int,
                        help="reproducible noise for testing: every answer is flagged as seeded (never for a release)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    with tqdm(total=len(STAGES), desc=STAGES[0], unit=" stage", file=sys.stderr, leave=False) as bar:

        def next_stage() -> None:
            bar.update()
            bar.set_description(STAGES[min(bar.n, len(STAGES) - 1)])

        schema, queries, budget = _read(args)
        next_stage()
        out = _output_folder(args.out, args.format)
        next_stage()
        import ektelo_ng as ek

        options = {"seed": args.seed} if args.seed is not None else {}
        results = ek.answer(args.table, queries, budget, schema=schema, level=args.level, strategy=args.strategy,
                            nonnegative=args.nonnegative, integer=args.integer, time_limit=args.time_limit,
                            backend=args.backend, **options)
        next_stage()
        written = results.to_dir(out, format=args.format)
        next_stage()
    print(results.note)
    for name, file in zip(results.names(), written):
        print(f"  {name}: {len(results[name])} rows -> {file}")
    return 0


def _read(args: argparse.Namespace):
    """The schema, the queries and the budget, each refused with its reason before anything is read or spent."""
    from ektelo_ng.operators.queries.schema import Schema
    from ektelo_ng.operators.queries.sql import sql

    budget = parse_budget(args.budget)
    if not 0 < args.level < 1:
        raise ValueError(f"--level must lie strictly between 0 and 1, got {args.level}")
    if args.backend == "numpy" and not Path(args.table).is_file():
        raise ValueError(f"--table {args.table}: no such file; give a CSV or Parquet file")
    schema = Schema.from_file(args.schema)
    text = args.sql
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise ValueError(f"--sql {text}: no such file")
        text = path.read_text()
    return schema, sql(text, schema), budget


def _output_folder(out: str, file_format: str) -> Path:
    """``out`` made if missing, checked empty and writable, and the format's library present."""
    if file_format == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ImportError("--format parquet needs pyarrow: pip install -e '.[parquet]', or use --format csv")
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        raise ValueError(f"--out {out}: the folder is not empty; give a new or empty one (nothing was spent)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(f"--out {out}: cannot write there ({error.strerror or error}); nothing was spent") from None
    return folder
