"""``ektelo-ng kernel serve``: run a protected kernel as its own process."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ektelo_ng.session import BACKENDS, open_table
from kernel.domain import Domain
from kernel.limits import Limits
from kernel.privacy import PureDP, ZCDP
from kernel.server import make_server
from kernel.service import MAX_ROWS, Kernel


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "kernel",
        help="run a protected kernel in its own process",
        description="Hold a private table in this process and answer analysts' requests over a socket.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    serve = actions.add_parser(
        "serve",
        help="load a table and serve requests",
        description=(
            "Load a CSV table (or leave a Parquet/CSV file or table to DuckDB or Spark: --backend), validate it "
            "against a domain, and answer protocol requests on an address. "
            "Analysts connect with ektelo_ng.connect(ADDRESS); their process never holds the data."
        ),
    )
    serve.add_argument(
        "--table", required=True,
        help="CSV file with a header row of attribute names; with --backend duckdb or spark also Parquet files "
        "(a file, glob or directory); with spark also a URI or a catalog table name",
    )
    serve.add_argument(
        "--backend", choices=BACKENDS, default="numpy",
        help="numpy: validate the rows into this process (default); duckdb: DuckDB reads the file in-process; "
        "spark: Spark reads it (see --spark-master)",
    )
    serve.add_argument(
        "--spark-master", help="Spark master URL, e.g. spark://host:7077, yarn, local[4] (default: Spark's configuration)"
    )
    serve.add_argument(
        "--domain", required=True, type=Path,
        help='JSON file: {"attribute": size or [labels...], ...} in attribute order',
    )
    serve.add_argument("--budget", required=True, help="total budget: epsilon=VALUE (pure DP) or rho=VALUE (zCDP)")
    serve.add_argument("--ledger", type=Path, help="SQLite file keeping the spent budget across restarts")
    serve.add_argument("--listen", default="127.0.0.1:7373", help="HOST:PORT or unix:PATH (default 127.0.0.1:7373)")
    serve.add_argument("--seed", type=int, help="reproducible (non-secure) noise; every answer is flagged")
    serve.add_argument(
        "--max-rows", type=int, default=MAX_ROWS,
        help="public bound on the table's records (default 2^32; checked at start): the kernel's rounding-error "
        "bounds scale with it, so a tighter bound gives slightly less noise",
    )
    serve.add_argument("--max-cells", type=int, default=Limits.max_cells,
                       help=f"largest vector or matrix side one request may build (default {Limits.max_cells})")
    serve.add_argument("--memory", type=int, default=Limits.memory,
                       help=f"bytes of vector data the kernel may hold at once (default {Limits.memory})")
    serve.add_argument("--work", type=int, default=Limits.work,
                       help=f"steps one quadratic-time selection may take (PHP, StructureFirst; default {Limits.work})")
    serve.set_defaults(run=run_serve)


def parse_budget(text: str) -> PureDP | ZCDP:
    name, sep, value = text.partition("=")
    if not sep or name.strip() not in ("epsilon", "rho"):
        raise ValueError(f"budget must be epsilon=VALUE or rho=VALUE, got {text!r}")
    return PureDP(value.strip()) if name.strip() == "epsilon" else ZCDP(value.strip())


def read_domain(path: Path) -> Domain:
    spec = json.loads(path.read_text())
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: the domain must be a JSON object of attribute sizes or label lists")
    return Domain.model_validate(spec) if "attributes" in spec else Domain.from_dict(spec)


def run_serve(args: argparse.Namespace) -> int:
    options = {"master": args.spark_master} if args.backend == "spark" and args.spark_master else {}
    try:
        table = open_table(args.table, read_domain(args.domain), args.backend, **options)
    except ImportError as error:
        print(f"ektelo-ng kernel: error: {error}", file=sys.stderr)
        return 2
    kernel = Kernel(table, parse_budget(args.budget), seed=args.seed, ledger=args.ledger, max_rows=args.max_rows,
                    limits=Limits(max_cells=args.max_cells, memory=args.memory,
                                                       work=args.work))
    server = make_server(kernel, args.listen)
    address = server.server_address
    shown = f"unix:{address}" if isinstance(address, str) else f"{address[0]}:{address[1]}"
    print(f"ektelo-ng kernel listening on {shown}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
