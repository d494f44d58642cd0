"""``ektelo-ng select``: run a strategy selector on a workload and print what it chose (no data, no budget)."""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import defaultdict

from ektelo_ng.workload_spec import HELP, parse_workload
from ektelo_ng.kernel.domain import Domain
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
            "marginals; prints the chosen optimizer, the expected RMSE at epsilon = 1 (Laplace) or sigma = 1 "
            "(Gaussian), and the SVD lower bound."
        ),
    )
    hd.add_argument("--workload", default="allrange:256", help=f"{HELP} (default allrange:256)")
    hd.add_argument("--noise", choices=["laplace", "gaussian"], default="laplace")
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
    rp.add_argument("--domain", default="10x10x10x10x10", help="attribute sizes, e.g. 10x10x2 (default 10^5)")
    rp.add_argument(
        "--marginals", default="kway:3",
        help="kway:K (all marginals of up to K attributes) or subsets as 0,1;1,2 (default kway:3)",
    )
    rp.add_argument("--loss", choices=["sum", "max"], default="sum", help="sum of variances or max variance")
    rp.add_argument(
        "--budget", default="pcost=1",
        help="pcost=P, rho=R (zCDP) or eps=E,delta=D (default pcost=1: sigma 1 per unit L2 sensitivity)",
    )
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
    qs.add_argument("--domain", default="10x10x10x10x10", help="attribute sizes, e.g. 10x10x2 (default 10^5)")
    qs.add_argument(
        "--queries", default="prefix", choices=["marginal", "prefix", "range", "circular", "affine", "abs", "random"],
        help="query class on every marginal (default prefix)",
    )
    qs.add_argument("--ways", default="1,2", help="marginal sizes, e.g. 1,2 (default 1,2)")
    qs.add_argument("--solver", choices=["exact", "wff", "residual"], default="exact")
    qs.add_argument("--budget", default="pcost=1", help="pcost=P, rho=R (zCDP) or eps=E,delta=D (default pcost=1)")
    qs.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    qs.set_defaults(run=run_query_smasher)


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.lower().split("x")]
    except ValueError:
        raise ValueError(f"domain must be attribute sizes like 10x10x2, got {text!r}") from None
    Domain.from_sizes(sizes)  # validates
    return sizes


def parse_marginals(text: str, d: int) -> list[tuple[int, ...]]:
    if text.startswith("kway:"):
        k = int(text[len("kway:") :])
        if not 0 <= k <= d:
            raise ValueError(f"kway:K needs 0 <= K <= {d}, got {k}")
        return [s for j in range(k + 1) for s in itertools.combinations(range(d), j)]
    try:
        return [tuple(int(i) for i in group.split(",") if i.strip()) for group in text.split(";")]
    except ValueError:
        raise ValueError(f"marginals must be kway:K or subsets like 0,1;1,2, got {text!r}") from None


def parse_budget(text: str):
    fields = dict(part.split("=", 1) for part in text.replace(" ", "").split(",") if "=" in part)
    if set(fields) == {"pcost"}:
        return float(fields["pcost"])
    if set(fields) == {"rho"}:
        from ektelo_ng.kernel.privacy import ZCDP

        return ZCDP(fields["rho"])
    if set(fields) == {"eps", "delta"}:
        return (float(fields["eps"]), float(fields["delta"]))
    raise ValueError(f"budget must be pcost=P, rho=R or eps=E,delta=D, got {text!r}")


def run_residual_planner(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.domain)
    marginals = parse_marginals(args.marginals, len(sizes))
    start = time.perf_counter()
    strategy = residual_planner(sizes, marginals, loss=args.loss, budget=parse_budget(args.budget))
    seconds = time.perf_counter() - start
    by_size: dict[int, list[float]] = defaultdict(list)
    for subset, scale in strategy.noise_scales().items():
        by_size[len(subset)].append(scale)
    summary = {
        "selector": "residual-planner", "domain": sizes, "workload_marginals": len(strategy.workload),
        "residual_sets": len(strategy.residual_sets), "loss": args.loss, "pcost": strategy.pcost(),
        "rmse": strategy.rmse(), "max_variance": strategy.max_variance(), "seconds": round(seconds, 3),
        "noise_scales_by_set_size": {k: {"count": len(v), "min": min(v), "max": max(v)} for k, v in sorted(by_size.items())},
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"ResidualPlanner ({args.loss} loss) on domain {args.domain}: {summary['workload_marginals']} marginals, "
          f"{summary['residual_sets']} residual sets, pcost {summary['pcost']:.6g}, selected in {seconds:.2f} s")
    print(f"  RMSE {summary['rmse']:.6g}   max variance {summary['max_variance']:.6g}")
    print("  noise scale s_A (variance multiplier of each residual measurement), by |A|:")
    for k, row in summary["noise_scales_by_set_size"].items():
        print(f"    |A| = {k:<3} {row['count']:>8} sets   s_A in [{row['min']:.6g}, {row['max']:.6g}]")
    return 0


def run_hdmm(args: argparse.Namespace) -> int:
    if args.restarts < 1:
        raise ValueError(f"--restarts must be at least 1, got {args.restarts}")
    W = parse_workload(args.workload)
    start = time.perf_counter()
    strategy = hdmm(W, noise=args.noise, restarts=args.restarts, seed=args.seed)
    seconds = time.perf_counter() - start
    summary = {
        "selector": "hdmm", "workload": args.workload, "queries": W.shape[0], "cells": W.shape[1],
        "noise": args.noise, "optimizer": strategy.optimizer, "strategy_shape": list(strategy.matrix.shape),
        "expected_error": strategy.expected_error(), "rmse": strategy.rmse(),
        "svd_bound_rmse": (strategy.svd_bound() / W.shape[0]) ** 0.5, "seconds": round(seconds, 3),
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"HDMM on {args.workload} ({W.shape[0]} queries over {W.shape[1]} cells), {args.noise} noise: "
          f"{strategy.optimizer} chosen in {seconds:.2f} s, strategy {strategy.matrix.shape[0]} x {strategy.matrix.shape[1]}")
    print(f"  RMSE {summary['rmse']:.6g} per query at unit noise   (SVD bound {summary['svd_bound_rmse']:.6g})")
    return 0


def run_query_smasher(args: argparse.Namespace) -> int:
    sizes = parse_sizes(args.domain)
    ways = tuple(int(w) for w in args.ways.split(","))
    queries = query_class_workload(sizes, args.queries, ways=ways)
    start = time.perf_counter()
    strategy = query_smasher(sizes, queries, solver=args.solver, budget=parse_budget(args.budget))
    seconds = time.perf_counter() - start
    losses, shares = strategy.subworkload_losses(), strategy.allocation()
    by_size: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for subset, loss in losses.items():
        by_size[len(subset)].append((loss, shares[subset]))
    summary = {
        "selector": "query-smasher", "domain": sizes, "queries": args.queries, "ways": list(ways),
        "solver": args.solver, "residual_sets": len(losses), "rmse": strategy.rmse(), "seconds": round(seconds, 3),
        "by_set_size": {k: {"count": len(v), "total_loss": sum(l for l, _ in v), "pcost_share": sum(s for _, s in v)}
                        for k, v in sorted(by_size.items())},
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"QuerySmasher ({args.solver}) on domain {args.domain}, {args.queries} queries on {args.ways}-way marginals: "
          f"{len(losses)} residual subworkloads, solved in {seconds:.2f} s")
    print(f"  RMSE {summary['rmse']:.6g}")
    print("  subworkload loss (at pcost 1) and share of the budget, by residual set size:")
    for k, row in summary["by_set_size"].items():
        print(f"    |A'| = {k:<3} {row['count']:>7} sets   loss {row['total_loss']:.6g}   pcost share {row['pcost_share']:.4f}")
    return 0
