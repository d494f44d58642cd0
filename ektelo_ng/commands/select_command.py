"""``ektelo-ng select``: run a strategy selector on a workload and print what it chose (no data, no budget)."""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

from ektelo_ng.grammar import BUDGET_HELP, DOMAIN_HELP, MARGINALS_HELP, parse_budget, parse_domain, parse_marginals, show_budget
from ektelo_ng.workload_spec import HELP, parse_workload
from ektelo_ng.operators.budget import noise_of
from ektelo_ng.operators.selection.hdmm.bound import svd_bound
from ektelo_ng.operators.selection.hdmm import hdmm
from ektelo_ng.operators.selection.query_smasher import query_class_workload, query_smasher
from ektelo_ng.operators.selection.residual_planner import residual_planner


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "select",
        help="choose a measurement strategy for a workload (no data, no budget)",
        description="Run a strategy selector and print its noise plan and expected error at the given budget.",
    )
    selectors = parser.add_subparsers(dest="selector", metavar="SELECTOR", required=True)
    hd = selectors.add_parser(
        "hdmm",
        help="optimized strategy for any linear workload (HDMM)",
        description=(
            "HDMM: optimize a measurement strategy for a workload of Kronecker products, unions of them, or "
            "marginals; prints the chosen optimizer, the expected RMSE per query at the budget, and the SVD lower "
            "bound."
        ),
    )
    hd.add_argument("--workload", default="allrange:256", help=f"{HELP} (default allrange:256)")
    hd.add_argument("--budget", default="epsilon=1", help=f"{BUDGET_HELP}; pure DP measures with Laplace noise, "
                    "zCDP with Gaussian (default epsilon=1)")
    hd.add_argument("--restarts", type=int, default=3, help="random restarts per optimizer (default 3)")
    hd.add_argument("--seed", type=int, default=0, help="seed of the optimizer's random starts (no data involved)")
    hd.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    hd.set_defaults(run=run_hdmm)
    rp = selectors.add_parser(
        "residual-planner",
        help="optimal Gaussian noise for marginal workloads (ResidualPlanner)",
        description=(
            "ResidualPlanner: the optimal Gaussian mechanism for a workload of marginals under a convex loss. "
            "Prints the noise scale of every residual set (grouped by size), the RMSE and the max variance."
        ),
    )
    rp.add_argument("--domain", default="10x10x10x10x10", help=f"{DOMAIN_HELP} (default 10x10x10x10x10)")
    rp.add_argument("--marginals", default="upto:3", help=f"{MARGINALS_HELP} (default upto:3)")
    rp.add_argument("--loss", choices=["sum", "max"], default="sum", help="sum of variances or max variance")
    rp.add_argument("--budget", default="rho=0.5", help=f"{BUDGET_HELP} (default rho=0.5, that is pcost 1)")
    rp.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    rp.set_defaults(run=run_residual_planner)
    qs = selectors.add_parser(
        "query-smasher",
        help="optimal Gaussian noise for any linear queries on marginals (QuerySmasher)",
        description=(
            "QuerySmasher: decompose linear queries on marginals into residual subworkloads, solve each optimally "
            "(or with WFF), and allocate the budget; prints per-subworkload losses, the allocation and the RMSE."
        ),
    )
    qs.add_argument("--domain", default="10x10x10x10x10", help=f"{DOMAIN_HELP} (default 10x10x10x10x10)")
    qs.add_argument(
        "--queries", default="prefix", choices=["marginal", "prefix", "range", "circular", "affine", "abs", "random"],
        help="query class on every marginal (default prefix)",
    )
    qs.add_argument("--ways", default="1,2", help="marginal sizes, e.g. 1,2 (default 1,2)")
    qs.add_argument("--solver", choices=["exact", "wff", "residual"], default="exact")
    qs.add_argument("--budget", default="rho=0.5", help=f"{BUDGET_HELP} (default rho=0.5, that is pcost 1)")
    qs.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    qs.set_defaults(run=run_query_smasher)


def run_residual_planner(args: argparse.Namespace) -> int:
    domain, budget = parse_domain(args.domain), parse_budget(args.budget)
    marginals = parse_marginals(args.marginals, domain)
    start = time.perf_counter()
    strategy = residual_planner(domain, marginals, loss=args.loss)
    seconds = time.perf_counter() - start
    at = strategy.at(budget)
    by_size: dict[int, list[float]] = defaultdict(list)
    for subset, scale in strategy.noise_scales().items():
        by_size[len(subset)].append(scale * at.factor)
    summary = {
        "selector": "residual-planner", "domain": dict(zip(domain.names, domain.sizes)), "budget": args.budget, "workload_marginals": len(strategy.workload),
        "residual_sets": len(strategy.residual_sets), "loss": args.loss, "pcost": 1 / at.factor,
        "rmse": at.rmse(), "max_variance": at.max_variance(), "seconds": round(seconds, 3),
        "noise_scales_by_set_size": {k: {"count": len(v), "min": min(v), "max": max(v)} for k, v in sorted(by_size.items())},
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"ResidualPlanner ({args.loss} loss) on domain {args.domain}: {summary['workload_marginals']} marginals, "
          f"{summary['residual_sets']} residual sets, pcost {summary['pcost']:.6g}, selected in {seconds:.2f} s")
    print(f"  RMSE {summary['rmse']:.6g} per query at {show_budget(budget)}   max variance {summary['max_variance']:.6g}")
    print("  noise scale s_A (variance multiplier of each residual measurement), by |A|:")
    for k, row in summary["noise_scales_by_set_size"].items():
        print(f"    |A| = {k:<3} {row['count']:>8} sets   s_A in [{row['min']:.6g}, {row['max']:.6g}]")
    return 0


def run_hdmm(args: argparse.Namespace) -> int:
    if args.restarts < 1:
        raise ValueError(f"--restarts must be at least 1, got {args.restarts}")
    W, budget = parse_workload(args.workload), parse_budget(args.budget)
    noise = noise_of(budget)
    start = time.perf_counter()
    strategy = hdmm(W, noise=noise, restarts=args.restarts, seed=args.seed)
    seconds = time.perf_counter() - start
    at = strategy.at(budget)
    summary = {
        "selector": "hdmm", "workload": args.workload, "queries": W.shape[0], "cells": W.shape[1],
        "noise": noise, "budget": args.budget, "optimizer": strategy.optimizer, "strategy_shape": list(strategy.matrix.shape),
        "expected_error": at.expected_error(), "rmse": at.rmse(),
        "svd_bound_rmse": (svd_bound(W, noise) * at.factor / W.shape[0]) ** 0.5, "seconds": round(seconds, 3),
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"HDMM on {args.workload} ({W.shape[0]} queries over {W.shape[1]} cells), {noise} noise: "
          f"{strategy.optimizer} chosen in {seconds:.2f} s, strategy {strategy.matrix.shape[0]} x {strategy.matrix.shape[1]}")
    print(f"  RMSE {summary['rmse']:.6g} per query at {show_budget(budget)}   (SVD bound {summary['svd_bound_rmse']:.6g})")
    return 0


def run_query_smasher(args: argparse.Namespace) -> int:
    domain, budget = parse_domain(args.domain), parse_budget(args.budget)
    ways = tuple(int(w) for w in args.ways.split(","))
    queries = query_class_workload(list(domain.sizes), args.queries, ways=ways)
    start = time.perf_counter()
    strategy = query_smasher(list(domain.sizes), queries, solver=args.solver)
    seconds = time.perf_counter() - start
    at = strategy.at(budget)
    losses, shares = strategy.subworkload_losses(), strategy.allocation()
    by_size: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for subset, loss in losses.items():
        by_size[len(subset)].append((loss, shares[subset]))
    summary = {
        "selector": "query-smasher", "domain": dict(zip(domain.names, domain.sizes)), "budget": args.budget, "queries": args.queries, "ways": list(ways),
        "solver": args.solver, "residual_sets": len(losses), "rmse": at.rmse(), "seconds": round(seconds, 3),
        "by_set_size": {k: {"count": len(v), "total_loss": sum(l for l, _ in v), "pcost_share": sum(s for _, s in v)}
                        for k, v in sorted(by_size.items())},
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"QuerySmasher ({args.solver}) on domain {args.domain}, {args.queries} queries on {args.ways}-way marginals: "
          f"{len(losses)} residual subworkloads, solved in {seconds:.2f} s")
    print(f"  RMSE {summary['rmse']:.6g} per query at {show_budget(budget)}")
    print("  subworkload loss (at rho = 0.5) and share of the budget, by residual set size:")
    for k, row in summary["by_set_size"].items():
        print(f"    |A'| = {k:<3} {row['count']:>7} sets   loss {row['total_loss']:.6g}   pcost share {row['pcost_share']:.4f}")
    return 0
