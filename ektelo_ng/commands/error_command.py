"""``ektelo-ng error``: expected error of classic strategies on a workload, with the SVD lower bound."""

from __future__ import annotations

import argparse
import json
import math

from ektelo_ng.grammar import BUDGET_HELP, parse_budget, show_budget
from ektelo_ng.operators.budget import noise_of, variance_factor
from ektelo_ng.workload_spec import HELP, parse_workload
from ektelo_ng.operators.matrix import Identity, Matrix
from ektelo_ng.operators.matrices import Haar, Hierarchical
from ektelo_ng.operators.error import rmse
from ektelo_ng.operators.selection.hdmm.bound import svd_bound


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "error",
        help="expected RMSE of classic strategies on a workload (no data, no budget)",
        description=(
            "Print the expected root mean squared error per query of answering a workload by least squares "
            "from classic strategies at the given budget (Laplace noise under pure DP, Gaussian under zCDP), and "
            "the SVD lower bound that no strategy can beat."
        ),
    )
    parser.add_argument("--workload", default="prefix:1024", help=f"{HELP} (default: prefix:1024)")
    parser.add_argument("--budget", default="epsilon=1", help=f"{BUDGET_HELP} (default epsilon=1: unit Laplace noise)")
    parser.add_argument("--json", action="store_true", help="one JSON object per strategy instead of a table")
    parser.set_defaults(run=run)


def candidate_strategies(W: Matrix) -> dict[str, Matrix]:
    n = W.shape[1]
    strategies: dict[str, Matrix] = {"Identity": Identity(n)}
    if n >= 2:
        strategies["H2"] = Hierarchical(n, 2)
    if n & (n - 1) == 0:
        strategies["Privelet"] = Haar(n)
    return strategies


def run(args: argparse.Namespace) -> int:
    W, budget = parse_workload(args.workload), parse_budget(args.budget)
    noise = noise_of(budget)
    factor = math.sqrt(variance_factor(budget, noise))
    rows = [(name, factor * rmse(W, A, noise)) for name, A in candidate_strategies(W).items()]
    rows.append(("SVD bound", factor * math.sqrt(svd_bound(W, noise) / W.shape[0])))
    if args.json:
        for name, value in rows:
            print(json.dumps({"workload": args.workload, "strategy": name, "noise": noise, "budget": args.budget,
                              "rmse": value}))
        return 0
    print(f"workload {args.workload}: {W.shape[0]} queries over {W.shape[1]} cells, {noise} noise at "
          f"{show_budget(budget)}")
    for name, value in rows:
        print(f"  {name:<10} RMSE {value:12.4f}")
    return 0
