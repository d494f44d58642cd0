"""``ektelo-ng run PLAN.py``: run an analyst's plan against a fresh kernel and report what it did.

By default the plan runs in a child process (``plan_child``) inside a sandbox (``ektelo_ng.sandbox``: no table,
no kernel process, no network, another user as root) and reaches the kernel only through a socket pair; this
process loads the table into the kernel (or connects to a served one), answers the child's requests, and receives
the plan's answers as one JSON message on a second socket. Once the child and every process it started have
ended, this process alone prints the answers, writes --out, --synthetic and --plot (paths the plan never had) and
reports what the kernel spent, how it drew its noise and what was derived, from its own record (docs/service.md).
``--unsandboxed`` runs the child without the sandbox, where none can be made; ``--in-process`` runs the plan beside
the kernel, trusting it with both.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import selectors
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
from pydantic import ValidationError

from ektelo_ng import sandbox
from ektelo_ng.commands import plan_answers
from ektelo_ng.commands.plan_answers import PlanAnswers, ReturnedEstimate
from ektelo_ng.figures import pyplot
from ektelo_ng.grammar import BUDGET_HELP, DOMAIN_HELP, did_you_mean, parse_budget, parse_domain
from ektelo_ng.gateway.wire import FrameTooLarge, read_frame, write_frame
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.limits import Limits
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.session import (
    BACKENDS, check_writable, connect, in_order, open_table, protect, table_columns, write_columns,
)
from ektelo_ng.operators.budget import Budget, accounted, delta_of
from ektelo_ng.operators.matrices import MarginalStack
from ektelo_ng.operators.matrix import Identity
from ektelo_ng.operators.client import Session
from ektelo_ng.workload_spec import OVER_DOMAIN_HELP, parse_workload_option


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "run",
        help="run a plan script against a fresh kernel",
        description=(
            "Load PLAN.py, which defines plan(source, workload, budget) returning an Estimate (as every plan of "
            "plans.catalog does; a bare array of the data vector is accepted, without error bars), protect the table "
            "in a fresh kernel process (or connect to a served one), run the plan, and print its answers with their "
            "confidence intervals, the budget spent and the lineage of what it derived. The plan runs in a sandbox "
            "(bubblewrap) that cannot read the table or reach the kernel's process, and every process it starts ends "
            "with it; this process alone writes the report and the output files (docs/service.md)."
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
    parser.add_argument("--unsandboxed", action="store_true",
                        help="where no sandbox can be made (no bubblewrap, no namespaces): run the plan in a plain "
                             "child process, as you: it can then read every file you can, the table included")
    parser.add_argument("--network", action="store_true",
                        help="let the sandboxed plan reach the network (it has none by default)")
    parser.add_argument("--budget", required=True, help=BUDGET_HELP)
    parser.add_argument("--workload", help=f"optional workload: {OVER_DOMAIN_HELP}; default: the plan's own "
                        "workload, or every cell")
    parser.add_argument("--level", type=float, default=0.95,
                        help="confidence level of the intervals (default 0.95)")
    parser.add_argument("--seed", type=int, help="reproducible (non-secure) noise, flagged in every answer")
    parser.add_argument("--out", type=Path,
                        help="save results: .json (everything: answers, budget, lineage), .csv (one row per "
                             "answer: answer, variance, std, interval, method) or a new folder (one CSV per query "
                             "table or estimate, for a plan returning ek.answer's Results or several estimates, and "
                             "report.json)")
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
        raise FileNotFoundError(f"{path} is neither a plan file nor a plan of the catalog{did_you_mean(str(path), catalog)}"
                                f" ({', '.join(catalog)})")
    spec = importlib.util.spec_from_file_location(f"ektelo_plan_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # the analyst's own code, in the analyst's own process
    if not callable(getattr(module, "plan", None)):
        raise ValueError(f"{path} must define a function plan(source, workload, budget)")
    return module.plan


def run(args: argparse.Namespace) -> int:
    sandbox.make_undumpable()  # before it holds a table, a credential or a kernel
    wants_model = args.synthetic or args.plot
    if wants_model and not args.plan.is_file():  # a catalog plan: refused before it spends the budget
        from ektelo_ng.plans import info

        if str(args.plan) in info and not info[str(args.plan)].model:
            raise ValueError(_NO_MODEL.format(plan=args.plan))
    if wants_model and args.plan.suffix == ".json":
        raise ValueError(_NO_MODEL.format(plan=args.plan))
    check_outputs(args)
    budget = parse_budget(args.budget)
    args.columns = ",".join(table_columns(args.table)) if args.table else None  # the order synthetic records keep
    if not (args.connect or args.credential or (args.table and args.domain)):
        raise ValueError("give --table and --domain, or --connect ADDRESS with --credential FILE")
    if args.workload and args.domain:  # refused before the table is read (a served table's domain: by the plan's run)
        parse_workload_option(args.workload, parse_domain(args.domain))
    if args.in_process:  # one process: the plan is trusted with the kernel
        plan = load_plan(args.plan, args.domain)  # (saved advice is checked before the table is read)
        session = (connect(args.connect, credential=args.credential) if args.connect or args.credential else
                   protect(args.table, parse_domain(args.domain), budget, seed=args.seed, backend=args.backend))
        return answer_and_report(args, session, lambda: (0, answer_plan(args, plan, budget, session)))
    if not args.plan.is_file() and args.plan.suffix != ".json":
        load_plan(args.plan)  # a catalog name is checked here; a plan script runs only in the child
    elif args.plan.suffix == ".json" and args.domain:
        load_plan(args.plan, args.domain)  # saved advice: rebuilt and checked before the table is read
    if not args.unsandboxed:  # refused before the table is read or the kernel reached
        sandbox.check(args.network)
        sandbox.check_hidden(_private_paths(args))
    if args.connect or args.credential:
        transport = connect(args.connect, credential=args.credential).transport
    else:
        kernel = Kernel(open_table(args.table, parse_domain(args.domain), args.backend), accounted(budget),
                        seed=args.seed)
        transport = kernel.handle_json
    return answer_and_report(args, Session(transport, delta=delta_of(budget)), lambda: run_child(args, transport))


OUTPUT_SUFFIXES = {"out": (".json", ".csv", ""), "plot": (".png",)}
"""The formats --out and --plot write (--out without a suffix: a folder; --synthetic: ``session.TABLE_FORMATS``)."""
OUTPUT_KINDS = {"out": "a .csv or .json file (the answers as CSV rows, or everything as JSON) or a new folder (no "
                        "suffix: a CSV per table)", "plot": "a .png file"}
"""What each of them takes, for a refusal."""


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before anything is read or spent, an output path that could not be written: an unknown format, a
    folder that does not exist or that this user cannot write, a folder in the file's place; --plot without
    matplotlib."""
    for option in ("out", "synthetic", "plot"):
        path = getattr(args, option)
        if path is None:
            continue
        if option == "synthetic":
            check_writable(path)
        elif path.suffix.lower() not in OUTPUT_SUFFIXES[option]:
            raise ValueError(f"--{option} {path}: give {OUTPUT_KINDS[option]}, not "
                             f"{path.suffix or 'a name without a suffix'}")
        folder = path.parent
        if not folder.is_dir():
            raise FileNotFoundError(f"--{option} {path}: folder {folder} does not exist; create it first")
        if option == "out" and path.suffix == "" and path.is_dir() and any(path.iterdir()):
            raise FileExistsError(f"--out {path}: the folder holds files already; name a new or empty folder (one "
                                  "CSV per table and report.json are written there), or a .json or .csv file")
        if (path.is_dir() == bool(path.suffix) and path.exists() or not os.access(folder, os.W_OK)
                or (path.exists() and not os.access(path, os.W_OK))):
            raise PermissionError(f"--{option} {path}: cannot write there; choose another path")
    if args.plot:
        pyplot()


def _private_paths(args: argparse.Namespace) -> dict[str, Path]:
    """What the sandbox must hide: the table, the credential and a served kernel's unix socket."""
    paths = {"the table": args.table, "the credential": args.credential}
    if args.connect and args.connect.startswith("unix:"):
        paths["the kernel's socket"] = Path(args.connect[len("unix:"):])
    return {what: path for what, path in paths.items() if path is not None}


def answer_and_report(args: argparse.Namespace, session: Session, answered) -> int:
    """Run the plan (``answered()``: its exit code and answers, None if it sent none), print and write what it
    answered, and report the kernel's side, even if the plan or its outputs failed. The plan's exit code."""
    answers = None
    try:
        code, answers = answered()
        if answers is not None:
            write_answers(args, answers, session.source.domain if args.synthetic else None)
    finally:
        report_kernel(args, session, answers)
    return code


def run_child(args: argparse.Namespace, transport) -> tuple[int, PlanAnswers | None]:
    """Run the plan in a child process that reaches the kernel only through a socket pair this process serves: the
    plan cannot touch the kernel, its options or its record of the budget (docs/service.md). Sandboxed unless
    --unsandboxed. Its output is relayed until it ends, then no more; every process it started is killed then (the
    sandbox's PID namespace; without it, the child's session). Its exit code and its answers."""
    ours, theirs = socket.socketpair()
    results, their_results = socket.socketpair()
    options = {"plan": str(args.plan.absolute()) if args.plan.is_file() else str(args.plan),
               **{name: None if getattr(args, name) is None else str(getattr(args, name)) for name in PLAN_OPTIONS},
               "synthetic": bool(args.synthetic), "plot": bool(args.plot)}
    argv = [sys.executable, "-m", "ektelo_ng.commands.plan_child", str(theirs.fileno()),
            str(their_results.fileno()), json.dumps(options)]
    shown = [args.plan] if args.plan.is_file() else []
    with (contextlib.nullcontext((argv, [])) if args.unsandboxed else
          sandbox.confined(argv, shown, network=args.network)) as (command, copies):
        child = subprocess.Popen(command, pass_fds=[theirs.fileno(), their_results.fileno(), *copies],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
    theirs.close()
    their_results.close()
    outputs = {child.stdout.fileno(): sys.stdout, child.stderr.fileno(): sys.stderr}
    received = bytearray()
    with selectors.DefaultSelector() as selector, ours, results:
        selector.register(ours, selectors.EVENT_READ)
        results.setblocking(False)
        selector.register(results, selectors.EVENT_READ)
        for descriptor in outputs:
            os.set_blocking(descriptor, False)
            selector.register(descriptor, selectors.EVENT_READ)
        try:
            while not _ended(child):
                for key, _ in selector.select(timeout=0.1):
                    if key.fileobj is results:
                        _receive(results, received, selector)
                    elif key.fileobj is not ours:
                        _relay(key.fd, outputs[key.fd], selector)
                    elif (frame := _request(ours)) is None:
                        selector.unregister(ours)
                    else:
                        write_frame(ours, transport(frame.decode("utf-8")).encode("utf-8"))
        finally:  # ended, or run interrupted: the child is not yet reaped, so its group id is still its own
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        for _ in range(_DRAIN_READS):  # what the child wrote before it ended, and nothing later
            if not any([*(_relay(fd, stream, selector) for fd, stream in outputs.items()),
                        _receive(results, received, selector)]):
                break
    child.stdout.close()
    child.stderr.close()
    return child.returncode, _answers(received, child.returncode)


_DRAIN_READS = 256
"""Reads of each pipe and socket once the child has ended: what it left there fits in far fewer (a pipe holds 64
KiB, a socket a few hundred KiB), and a process it left behind (--unsandboxed) cannot keep ``run`` reading."""


def _ended(child: subprocess.Popen) -> bool:
    """Whether the child has ended, leaving it unreaped (so that its process group cannot be another's yet)."""
    return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _request(sock: socket.socket) -> bytes | None:
    """The child's next request, or None at its end or once it sends a frame over the kernel's limit."""
    try:
        return read_frame(sock, Limits.request_bytes)
    except FrameTooLarge as error:
        print(f"ektelo-ng run: the plan's process sent a request run would not read ({error}); it was cut off",
              file=sys.stderr)
        return None


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


def _receive(results: socket.socket, received: bytearray, selector: selectors.BaseSelector) -> bool:
    """Add what the answers' socket holds now to ``received``, keeping one byte past the limit at most (the rest
    is read, so that the child is not stuck writing it, and dropped); False once it is empty or closed."""
    try:
        chunk = results.recv(1 << 20)
    except BlockingIOError:
        return False
    if not chunk:
        if results in selector.get_map():
            selector.unregister(results)
        return False
    received += chunk[: max(0, ANSWERS_BYTES + 1 - len(received))]
    return True


ANSWERS_BYTES = 1 << 28
"""The most ``run`` reads of a plan's answers (256 MiB of JSON: a million answers with their intervals, or about
ten million synthetic records of a few attributes; beyond, run a plan you trust with --in-process)."""

PLAN_OPTIONS = ("budget", "workload", "level", "seed")
"""What the plan's process is told besides its plan and which outputs are wanted: never the table, the domain's
file, the output paths, the kernel's options or a ledger."""


def _answers(received: bytearray, code: int) -> PlanAnswers | None:
    """The plan's answers as the child sent them, validated; None if it ended without (its error is on stderr)."""
    if len(received) > ANSWERS_BYTES:
        raise ValueError(f"the plan's answers are over {ANSWERS_BYTES:,} bytes, more than run reads from a plan's "
                         "process: ask for fewer answers or synthetic records, or run a plan you trust with "
                         "--in-process")
    if not received:
        if code == 0:
            raise ValueError("the plan's process ended without sending its answers")
        return None
    try:
        return PlanAnswers.model_validate_json(bytes(received))
    except ValidationError as error:
        first = error.errors()[0]
        raise ValueError(f"the plan's process sent answers run cannot read: {first['msg']} at "
                         f"{'.'.join(map(str, first['loc'])) or 'the top'}") from None


def answer_plan(args: argparse.Namespace, plan, budget: Budget, session: Session) -> PlanAnswers:
    """Run ``plan`` on the session: what it estimated (one estimate, several, or query Results), with its synthetic
    records (if --synthetic) and its fit's history (if --plot). Printed and written by ``write_answers`` and
    ``report_kernel``, in the process that holds the kernel."""
    workload = plan_workload(args, session.source.domain)
    returned = plan(session.source, workload, budget)
    if _catalog_name(args) in QUERIES_ON_MARGINALS:  # its own queries: answered with their variances
        workload = None
    return PlanAnswers.of_returned(returned, workload, args.level, synthetic=bool(args.synthetic), seed=args.seed,
                                   history=bool(args.plot))


def write_answers(args: argparse.Namespace, answers: PlanAnswers, domain: Domain | None) -> None:
    """Print the plan's answers and write its synthetic records (over the table's ``domain``) and the plot of its
    fit (--out: ``report_kernel``, with the kernel's report)."""
    if answers.tables:  # query Results: one labelled table per query
        results = answers.results()
        for name in results:
            print(f"{name}:\n{results[name].drop(columns='accounts_for').to_string(index=False)}")
        print(results.note)
    for name, part in (answers.estimates or {str(args.plan): answers} if not answers.tables else {}).items():
        records = ReturnedEstimate(part).records()
        shown = ", ".join(_shown(r) for r in records[:6]) + (" ..." if len(records) > 6 else "")
        print(f"{name}: {len(records)} answers: {shown}")
        if records:
            level = "" if part.method.startswith("unavailable") else f" at level {args.level}"
            print(f"intervals: {part.method}{level}; {part.note}")
    if args.synthetic:
        if answers.synthetic is None:  # a plan script: known only once it has run
            raise ValueError(_NO_MODEL.format(plan=args.plan))
        columns = in_order(answers.synthetic_columns(domain), (args.columns or "").split(","))
        write_columns(columns, args.synthetic)
        print(f"saved {args.synthetic}: {len(next(iter(columns.values()), []))} synthetic records")
    if args.plot:
        _plot_history(answers, args.plot)
        print(f"saved {args.plot}")
    sys.stdout.flush()


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


def report_kernel(args: argparse.Namespace, session: Session, answers: PlanAnswers | None) -> None:
    """What the kernel spent, how it drew its noise, and what was derived: read from this process's own session with
    the kernel, after the plan's process has ended; then --out, the plan's ``answers`` (with --out JSON, and this
    report), if it sent any."""
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
    if not (args.out and answers):
        return
    report = {"budget_total": str(status.total.value), "budget_spent": str(status.spent.value),
              "budget_kind": status.total.kind, "seeded": status.seeded,
              "lineage": {"sources": lineage.number_of_nodes(), "derivations": derivations, "tree": tree}}
    print(f"saved {plan_answers.save(args.out, answers, str(args.plan), report)}")


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


def _plot_history(answers: PlanAnswers, path: Path) -> None:
    """The fit's loss per iteration (log scale), the picture of how it converged."""
    if not answers.history:
        raise ValueError("--plot draws a model fit's loss per iteration: this plan fitted no model")
    plt = pyplot()

    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(range(len(answers.history)), answers.history)
    axes.set(yscale="log", xlabel="iteration", ylabel="loss (distance to the noisy measurements)",
             title=f"Graphical model fit ({answers.fit_method} method)")
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
