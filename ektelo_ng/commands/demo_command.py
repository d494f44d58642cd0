"""``ektelo-ng demo``: the library's plans on a built-in synthetic table (no data files needed).

Each plan runs against its own freshly protected copy of the table with exactly its budget, on
the Prefix (CDF) workload; the report compares the error each plan actually made with the error
its strategy is expected to make (data-independent plans) and checks the budget it spent.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from ektelo_ng.session import protect
from kernel.domain import Domain
from kernel.privacy import PureDP
from operators.workload import Prefix
from plans import info


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "demo",
        help="run the library's plans on a built-in synthetic table",
        description=(
            "Generate a synthetic table (incomes: a smooth bulk with spikes at round numbers), protect it in a fresh "
            "kernel per plan, run every 1-D plan of the catalog on the Prefix (CDF) workload, and print each plan's "
            "measured RMSE per query, its expected RMSE (for data-independent plans) and the budget it spent."
        ),
    )
    parser.add_argument("--rows", type=int, default=100_000, help="records in the synthetic table (default 100000)")
    parser.add_argument("--cells", type=int, default=1024, help="domain size, a power of two (default 1024)")
    parser.add_argument("--epsilon", default="1", help="budget per plan, pure DP (default 1)")
    parser.add_argument("--seed", type=int, help="reproducible (non-secure) noise and data")
    parser.add_argument("--json", action="store_true", help="one JSON object per plan instead of a table")
    parser.set_defaults(run=run)


def synthetic_incomes(rows: int, cells: int, seed: int | None) -> np.ndarray:
    """A log-normal bulk with 10% of the records on round values: typical of income-like attributes."""
    rng = np.random.default_rng(seed)
    bulk = np.minimum(rng.lognormal(np.log(cells / 6), 0.6, rows).astype(int), cells - 1)
    round_values = np.arange(0, cells, max(1, cells // 16))
    spikes = rng.random(rows) < 0.1
    bulk[spikes] = rng.choice(round_values, spikes.sum())
    return bulk


def run(args: argparse.Namespace) -> int:
    if args.rows < 1 or args.cells < 2 or args.cells & (args.cells - 1):
        raise ValueError("--rows must be positive and --cells a power of two of at least 2")
    epsilon = PureDP(args.epsilon).epsilon
    values = synthetic_incomes(args.rows, args.cells, args.seed)
    domain = Domain.from_dict({"income": args.cells})
    W = Prefix(args.cells)
    truth = W @ np.bincount(values, minlength=args.cells)
    rows = []
    for name, entry in info.items():
        if 1 not in entry.dimensions:
            continue
        session = protect({"income": values}, domain, PureDP(epsilon), seed=args.seed)
        start = time.perf_counter()
        estimate = entry.plan(session.source, W, epsilon, **entry.defaults)
        seconds = time.perf_counter() - start
        expected = entry.strategy((args.cells,), W).rmse(W) / float(epsilon) if entry.strategy else None
        rows.append({
            "plan": name, "rmse": float(np.sqrt(np.mean((estimate.answer(W) - truth) ** 2))), "expected_rmse": expected,
            "spent": str(session.budget.spent.epsilon), "seconds": round(seconds, 3),
        })
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{args.rows} synthetic records over {args.cells} cells; Prefix workload ({args.cells} queries); "
          f"epsilon {epsilon} per plan, {'seeded' if args.seed is not None else 'secure'} noise")
    print(f"  {'plan':<18}{'RMSE':>12}{'expected':>12}{'spent':>8}{'seconds':>9}")
    for row in sorted(rows, key=lambda r: r["rmse"]):
        expected = row["expected_rmse"]
        expected = "-" if expected is None else "biased" if math.isinf(expected) else f"{expected:.2f}"
        print(f"  {row['plan']:<18}{row['rmse']:>12.2f}{expected:>12}{row['spent']:>8}{row['seconds']:>9.2f}")
    return 0
