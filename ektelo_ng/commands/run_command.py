"""``ektelo-ng run PLAN.py``: run an analyst's plan against a fresh kernel and report what it did.

By default the plan runs in a child process (``plan_child``) that reaches the kernel only through a socket pair;
this process loads the table into the kernel (or connects to a served one), answers the child's requests, and once
the child has ended reports what the kernel spent, how it drew its noise and what was derived, from its own record:
the plan holds handles and noisy answers only, and cannot reach the kernel, its options or its ledger
(docs/service.md). ``--in-process`` runs the plan beside the kernel, trusting it with both.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import selectors
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import numpy as np

from ektelo_ng.commands import plan_results
from ektelo_ng.figures import pyplot
from ektelo_ng.grammar import BUDGET_HELP, DOMAIN_HELP, parse_budget, parse_domain
from ektelo_ng.gateway.wire import read_frame, write_frame
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.limits import Limits
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.session import BACKENDS, check_writable, connect, open_table, protect, write_columns
from ektelo_ng.operators.budget import Budget, accounted
from ektelo_ng.operators.matrices import MarginalStack
from ektelo_ng.operators.matrix import Identity
from ektelo_ng.operators.client import Session
from ektelo_ng.operators.estimate import Estimate, VectorEstimate
from ektelo_ng.workload_spec import OVER_DOMAIN_HELP, parse_workload_option


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "run",
        help="run a plan script against a fresh kernel",
        description=(
            "Load PLAN.py, which defines plan(source, workload, budget) returning an Estimate (as every plan of "
            "plans.catalog does; a bare array of the data vector is accepted, without error bars), protect the table "
            "in a fresh kernel process (or connect to a served one), run the plan, and print its answers with their "
            "confidence intervals, the budget spent and the lineage of what it derived. The plan's process never "
            "holds the data unless --in-process is given."
        ),
    )
    parser.add_argument("plan", type=Path, help="Python file defining plan(source, workload, budget), the name of a "
                        "plan of the catalog (HB, DAWA, ...: ektelo-ng dpbench --help lists them), or a strategy "
                        "saved by 'ektelo-ng advise --out ADVICE.json' (measured on its own workload by default)")
    parser.add_argument("--table", type=Path, help="CSV or Parquet table (with --domain)")
    parser.add_argument("--backend", choices=BACKENDS, default="numpy",
                        help="who reads the table: numpy (into the kernel's memory, the default), duckdb or spark")
    parser.add_argument("--domain", help=f"the table's domain: {DOMAIN_HELP}")
    parser.add_argument("--connect", help="use a kernel served at HOST:PORT or unix:PATH instead of --table")
    parser.add_argument("--credential", type=Path, help="with --connect: your credential file from the data owner")
    parser.add_argument("--in-process", action="store_true",
                        help="load the table into this process (faster start; only for plans you trust)")
    parser.add_argument("--budget", required=True, help=BUDGET_HELP)
    parser.add_argument("--workload", help=f"optional workload: {OVER_DOMAIN_HELP}; default: the plan's own "
                        "workload, or every cell")
    parser.add_argument("--level", type=float, default=0.95,
                        help="confidence level of the intervals (default 0.95)")
    parser.add_argument("--seed", type=int, help="reproducible (non-secure) noise, flagged in every answer")
    parser.add_argument("--out", type=Path,
                        help="save results: .json (everything) or .csv (one row per answer: answer, variance, std, "
                             "interval, method)")
    parser.add_argument("--synthetic", type=Path,
                        help="with a plan that fits a model (MST, AIM, ResidualPlanner+PGM, PrivBayes+PGM): write synthetic "
                             "records to this .csv or .parquet file (Parquet needs the parquet extra), as many as the "
                             "model's estimated total, with the domain's value labels where it has them (seeded by "
                             "--seed)")
    parser.add_argument("--plot", type=Path,
                        help="with a plan that fits a model (MST, AIM, ResidualPlanner+PGM, PrivBayes+PGM): save a figure of "
                             "the fit's loss against iteration (PNG; needs the plot extra)")
    parser.set_defaults(run=run)


_NO_MODEL = ("{plan} fits no model (to draw synthetic records from, or plot the fit of); use a plan that "
             "fits one (MST, AIM, ResidualPlanner+PGM, PrivBayes+PGM)")


def load_plan(path: Path, domain: str | None = None):
    """A plan script's ``plan`` function, a plan of the catalog by name (with its default parameters), or a saved
    advice (the Advised plan on that file; given the table's ``domain``, rebuilt and checked here, before the
    table is read; else by the plan, which checks the domain it measures first)."""
    if path.suffix == ".json" and path.is_file():
        from ektelo_ng.operators import advice
        from ektelo_ng.plans import catalog

        if domain:
            advice.load(path, parse_domain(domain))
        return lambda source, workload, budget: catalog["Advised"](source, workload, budget, advice=path)
    if not path.is_file():
        from ektelo_ng.plans import catalog, info

        if str(path) in catalog:
            name = str(path)
            extra = {"callback": _progress(info[name])} if info[name].model else {}
            return lambda source, workload, budget: catalog[name](source, workload, budget, **info[name].defaults,
                                                                  **extra)
        raise FileNotFoundError(f"{path} is neither a plan file nor a plan of the catalog ({', '.join(catalog)})")
    spec = importlib.util.spec_from_file_location(f"ektelo_plan_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # the analyst's own code, in the analyst's own process
    if not callable(getattr(module, "plan", None)):
        raise ValueError(f"{path} must define a function plan(source, workload, budget)")
    return module.plan


def run(args: argparse.Namespace) -> int:
    wants_model = args.synthetic or args.plot
    if wants_model and not args.plan.is_file():  # a catalog plan: refused before it spends the budget
        from ektelo_ng.plans import info

        if str(args.plan) in info and not info[str(args.plan)].model:
            raise ValueError(_NO_MODEL.format(plan=args.plan))
    if wants_model and args.plan.suffix == ".json":
        raise ValueError(_NO_MODEL.format(plan=args.plan))
    if args.plot:
        pyplot()
    if args.synthetic:
        check_writable(args.synthetic)
    budget = parse_budget(args.budget)
    if not (args.connect or args.credential or (args.table and args.domain)):
        raise ValueError("give --table and --domain, or --connect ADDRESS with --credential FILE")
    if args.workload and args.domain:  # refused before the table is read (a served table's domain: by the plan's run)
        parse_workload_option(args.workload, parse_domain(args.domain))
    if args.in_process:  # one process: the plan is trusted with the kernel and with the report
        plan = load_plan(args.plan, args.domain)  # (saved advice is checked before the table is read)
        session = (connect(args.connect, credential=args.credential) if args.connect or args.credential else
                   protect(args.table, parse_domain(args.domain), budget, seed=args.seed, backend=args.backend))
        code = run_plan(args, plan, budget, session)
        report_kernel(args, session)
        return code
    if not args.plan.is_file() and args.plan.suffix != ".json":
        load_plan(args.plan)  # a catalog name is checked here; a plan script runs only in the child
    elif args.plan.suffix == ".json" and args.domain:
        load_plan(args.plan, args.domain)  # saved advice: rebuilt and checked before the table is read
    if args.connect or args.credential:
        transport = connect(args.connect, credential=args.credential).transport
    else:
        kernel = Kernel(open_table(args.table, parse_domain(args.domain), args.backend), accounted(budget),
                        seed=args.seed)
        transport = kernel.handle_json
    code = run_child(args, transport)
    report_kernel(args, Session(transport))
    return code


def run_child(args: argparse.Namespace, transport) -> int:
    """Run the plan in a child process that reaches the kernel only through a socket pair this process serves: the
    plan cannot touch the kernel, its options or its record of the budget (docs/service.md). Its output is relayed
    until it ends, then no more: nothing it leaves behind can print after the kernel's report. Its exit code."""
    ours, theirs = socket.socketpair()
    options = {name: None if value is None else str(value) for name, value in vars(args).items()
               if name in PLAN_OPTIONS}
    command = [sys.executable, "-m", "ektelo_ng.commands.plan_child", str(theirs.fileno()), json.dumps(options)]
    child = subprocess.Popen(command, pass_fds=[theirs.fileno()], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    theirs.close()
    outputs = {child.stdout.fileno(): sys.stdout, child.stderr.fileno(): sys.stderr}
    with selectors.DefaultSelector() as selector, ours:
        selector.register(ours, selectors.EVENT_READ)
        for descriptor in outputs:
            os.set_blocking(descriptor, False)
            selector.register(descriptor, selectors.EVENT_READ)
        while child.poll() is None:
            for key, _ in selector.select(timeout=0.1):
                if key.fileobj is not ours:
                    _relay(key.fd, outputs[key.fd], selector)
                elif (frame := read_frame(ours, Limits.request_bytes)) is None:
                    selector.unregister(ours)
                else:
                    write_frame(ours, transport(frame.decode("utf-8")).encode("utf-8"))
        for descriptor, stream in outputs.items():  # what the child wrote before it ended, and nothing later
            while _relay(descriptor, stream, selector):
                pass
    child.stdout.close()
    child.stderr.close()
    return child.returncode


def _relay(descriptor: int, stream, selector: selectors.BaseSelector) -> bool:
    """Copy what the pipe holds now to ``stream``; False once it is empty or closed."""
    try:
        chunk = os.read(descriptor, 1 << 16)
    except BlockingIOError:
        return False
    if not chunk:
        if descriptor in selector.get_map():
            selector.unregister(descriptor)
        return False
    stream.buffer.write(chunk)
    stream.flush()
    return True


PLAN_OPTIONS = ("plan", "domain", "budget", "workload", "level", "seed", "out", "synthetic", "plot")
"""What the plan's process is told: its plan and outputs, never the table, the kernel's options or a ledger."""


def run_plan(args: argparse.Namespace, plan, budget: Budget, session: Session) -> int:
    """Run ``plan`` on the session and write what it estimated: its answers (printed, and to --out), synthetic
    records and the fit's plot. What the kernel spent is reported by ``report_kernel``, from the kernel's side."""
    workload = plan_workload(args, session.source.domain)
    estimate = plan(session.source, workload, budget)
    if plan_results.several(estimate):  # query Results, or one estimate per stage
        return plan_results.report(args, estimate)
    if _catalog_name(args) in QUERIES_ON_MARGINALS:  # its own queries: answered with their variances
        workload = None
    if not isinstance(estimate, Estimate):
        estimate = VectorEstimate(np.asarray(getattr(estimate, "x", estimate), dtype=float),
                                  note="the plan returned a bare array: no error bars")
    records = estimate.records(workload, args.level)
    shown = ", ".join(_shown(r) for r in records[:6]) + (" ..." if len(records) > 6 else "")
    print(f"{args.plan}: {len(records)} answers: {shown}")
    if records:
        method = records[0]["method"]
        level = "" if method.startswith("unavailable") else f" at level {args.level}"
        print(f"intervals: {method}{level}; {estimate.note}")
    if args.synthetic:
        if not hasattr(estimate, "synthetic"):  # a plan script: known only once it has run
            raise ValueError(_NO_MODEL.format(plan=args.plan))
        columns = estimate.synthetic(seed=args.seed, labels=True)
        write_columns(columns, args.synthetic)
        print(f"saved {args.synthetic}: {len(next(iter(columns.values())))} synthetic records")
    if args.plot:
        _plot_history(estimate, args.plot)
        print(f"saved {args.plot}")
    if args.out:
        if args.out.suffix == ".csv":
            estimate.to_csv(args.out, workload, args.level)
        else:
            answers = json.loads(estimate.to_json(workload, args.level))["answers"]
            args.out.write_text(json.dumps({"plan": str(args.plan), "note": estimate.note, "answers": answers}))
    sys.stdout.flush()
    return 0


QUERIES_ON_MARGINALS = ("QuerySmasher",)
"""Catalog plans whose workload is ``[(attributes, queries)]`` pairs, not a matrix or attribute sets."""


def plan_workload(args: argparse.Namespace, domain: Domain):
    """The workload the plan is given: --workload read over the table's ``domain`` (marginals as their matrix over
    the data vector, which the marginal plans read as attribute sets; as ``[(attributes, identity)]`` for the plans
    of queries on marginals); without it, every cell for a vector plan of the catalog, else None (the plan's own)."""
    if not args.workload:
        return Identity(domain.size) if _vector_plan(_catalog_name(args)) else None
    workload = parse_workload_option(args.workload, domain)
    if _catalog_name(args) in QUERIES_ON_MARGINALS and isinstance(workload, MarginalStack):
        return [(subset, Identity(math.prod(domain.sizes[a] for a in subset))) for subset in workload.subsets]
    return workload


REPORT = "-- from the kernel, not the plan --"
"""The header of what ``run`` reports from the kernel's side, printed after the plan has finished."""


def report_kernel(args: argparse.Namespace, session: Session) -> None:
    """What the kernel spent, how it drew its noise, and what was derived: read from this process's own session with
    the kernel, after the plan's process has ended; with --out JSON, added to the plan's answers."""
    status, lineage = session.budget, session.lineage()
    derivations = [{"op": d["op"], "stability": d["stability"]} for _, _, d in lineage.edges(data=True)]
    print(REPORT)
    print(f"budget: {status}")
    if status.seeded:
        given = f" with --seed {args.seed}" if args.seed is not None else " by the kernel's owner"
        print(f"noise: seeded{given}: every answer is flagged as reproducible, not private against anyone who knows "
              "the seed")
    else:
        print("noise: secure (the operating system's random source)")
    tree = lineage_tree(lineage)
    print("\n".join(["lineage: table" + ("" if tree else " (nothing derived)"), *map(_tree_line, tree)]))
    if args.out and args.out.suffix != ".csv" and args.out.is_file():
        report = json.loads(args.out.read_text())
        report.update(budget_total=str(status.total.value), budget_spent=str(status.spent.value),
                      budget_kind=status.total.kind, seeded=status.seeded,
                      lineage={"sources": lineage.number_of_nodes(), "derivations": derivations, "tree": tree})
        args.out.write_text(json.dumps(report, indent=2))
    if args.out:
        print(f"saved {args.out}")


def lineage_tree(graph: nx.DiGraph) -> list[dict]:
    """What the plan derived, as a tree in pre-order: one ``{depth, op, stability, count}`` per group of identical
    siblings (same operation and stability, and identical derivations below them), so that 42 vectorizations of
    the table read as one line, not a 42-step chain. Built without recursion: a lineage may be thousands deep."""
    shapes = _shapes(graph)
    roots = [node for node in graph if graph.in_degree(node) == 0]
    stack = [(child, count, 1) for root in reversed(roots) for child, count in reversed(_groups(graph, root, shapes))]
    tree = []
    while stack:
        node, count, depth = stack.pop()
        edge = graph.edges[next(iter(graph.predecessors(node))), node]
        tree.append({"depth": depth, "op": edge["op"], "stability": edge["stability"], "count": count})
        stack += [(child, n, depth + 1) for child, n in reversed(_groups(graph, node, shapes))]
    return tree


def _shapes(graph: nx.DiGraph) -> dict[str, int]:
    """Each source's derivation and everything below it as a number: equal numbers, identical subtrees."""
    numbers: dict[tuple, int] = {}
    shapes: dict[str, int] = {}
    for node in nx.dfs_postorder_nodes(graph):  # children first (networkx walks with a stack, not recursion)
        parents = list(graph.predecessors(node))
        edge = graph.edges[parents[0], node] if parents else {}
        below = tuple(sorted(Counter(shapes[child] for child in graph.successors(node)).items()))
        shapes[node] = numbers.setdefault((edge.get("op"), edge.get("stability"), below), len(numbers))
    return shapes


def _groups(graph: nx.DiGraph, node: str, shapes: dict[str, int]) -> list[tuple[str, int]]:
    """``node``'s children as (one of a group of identical siblings, how many), in the order they were made."""
    groups: dict[int, list] = {}
    for child in graph.successors(node):
        groups.setdefault(shapes[child], [child, 0])[1] += 1
    return [(child, count) for child, count in groups.values()]


_DEEPEST_INDENT = 12
"""Levels of indentation in the printed lineage; a deeper line shows its depth as a number instead."""


def _tree_line(group: dict) -> str:
    """One printed line of the lineage tree: ``vectorize(x1) x42``, indented by its depth."""
    depth = group["depth"]
    where = "  " * min(depth, _DEEPEST_INDENT) + (f"[depth {depth}] " if depth > _DEEPEST_INDENT else "")
    return f"{where}{group['op']}(x{group['stability']})" + (f" x{group['count']}" if group["count"] > 1 else "")


def _progress(entry) -> _FitProgress:
    """The progress bar of a model plan: over its fit's iterations, or over the budget its rounds spend."""
    if entry.progress == "budget":
        return _FitProgress(100, "%", "spending the budget in rounds", "round")
    return _FitProgress(entry.defaults.get("iterations"), "it", "fitting the model (stops when converged)", "loss")


class _FitProgress:
    """A progress bar on stderr over ``callback(step, value)``: a fit's (iteration, loss), or a plan's rounds
    (percent of the budget spent, round)."""

    def __init__(self, total: int | None, unit: str, description: str, value_name: str):
        self.total, self.unit, self.description, self.value_name, self.bar = total, unit, description, value_name, None

    def __call__(self, step: float, value: float) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit=self.unit, desc=self.description, file=sys.stderr, leave=False)
        self.bar.update(int(step) - self.bar.n)
        self.bar.set_postfix({self.value_name: f"{value:.4g}"}, refresh=False)
        if int(step) == self.total:
            self.bar.close()


def _plot_history(estimate, path: Path) -> None:
    """The fit's loss per iteration (log scale), the picture of how it converged."""
    history = getattr(estimate, "history", None)
    if not history:
        raise ValueError("--plot draws a model fit's loss per iteration: this plan fitted no model")
    plt = pyplot()

    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(range(len(history)), history)
    axes.set(yscale="log", xlabel="iteration", ylabel="loss (distance to the noisy measurements)",
             title=f"Graphical model fit ({estimate.method} method)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _catalog_name(args: argparse.Namespace) -> str:
    """The plan's name in the catalog, or "" for a plan file (a script or a saved advice)."""
    return "" if args.plan.is_file() else str(args.plan)


def _vector_plan(name: str) -> bool:
    """A catalog plan of the data vector (marginal plans take their marginals, and the Advised plan its own)."""
    from ektelo_ng.plans import info

    return bool(info[name].dimensions) if name in info else False


def _shown(record: dict) -> str:
    half = (record["upper"] - record["lower"]) / 2
    return f"{record['answer']:.4g}" + ("" if half != half else f" ± {half:.3g}")
