"""``ektelo-ng run PLAN.py``: run an analyst's plan script against a fresh kernel and report what it did.

By default the kernel is a separate process (``ektelo-ng kernel serve`` on a private unix socket) that alone
loads the table; the script's process holds only handles and noisy answers (docs/service.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from ektelo_ng.figures import pyplot
from ektelo_ng.grammar import BUDGET_HELP, DOMAIN_HELP, parse_budget, parse_domain
from ektelo_ng.session import BACKENDS, check_writable, connect, kernel_process, protect, write_columns
from ektelo_ng.kernel.privacy import PureDP, ZCDP
from ektelo_ng.kernel.matrix import Identity
from ektelo_ng.operators.client import Session
from ektelo_ng.operators.estimate import Estimate, VectorEstimate
from ektelo_ng.workload_spec import HELP, parse_workload


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
    parser.add_argument("--workload", help=f"optional {HELP}; default: the plan's own workload, or every cell")
    parser.add_argument("--level", type=float, default=0.95,
                        help="confidence level of the intervals (default 0.95)")
    parser.add_argument("--seed", type=int, help="reproducible (non-secure) noise, flagged in every answer")
    parser.add_argument("--out", type=Path,
                        help="save results: .json (everything) or .csv (one row per answer: answer, variance, std, "
                             "interval, method)")
    parser.add_argument("--synthetic", type=Path,
                        help="with a plan that fits a model (ResidualPlanner+PGM, PrivBayes+PGM): write synthetic "
                             "records to this .csv or .parquet file (Parquet needs the parquet extra), as many as the "
                             "model's estimated total, with the domain's value labels where it has them (seeded by "
                             "--seed)")
    parser.add_argument("--plot", type=Path,
                        help="with a plan that fits a model (ResidualPlanner+PGM, PrivBayes+PGM): save a figure of "
                             "the fit's loss against iteration (PNG; needs the plot extra)")
    parser.set_defaults(run=run)


_NO_MODEL = ("{plan} fits no model (to draw synthetic records from, or plot the fit of); use a plan that "
             "fits one (ResidualPlanner+PGM, PrivBayes+PGM)")


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
            extra = {"callback": _FitProgress(info[name].defaults.get("iterations"))} if info[name].model else {}
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
    plan = load_plan(args.plan, args.domain)
    budget = parse_budget(args.budget)
    if args.connect or args.credential:
        return _report(args, plan, budget, connect(args.connect, credential=args.credential))
    if not (args.table and args.domain):
        raise ValueError("give --table and --domain, or --connect ADDRESS with --credential FILE")
    if args.in_process:
        session = protect(args.table, parse_domain(args.domain), budget, seed=args.seed, backend=args.backend)
        return _report(args, plan, budget, session)
    seed = ["--seed", str(args.seed)] if args.seed is not None else []
    with kernel_process(args.table, args.domain, budget, *seed, "--backend", args.backend) as session:
        return _report(args, plan, budget, session)


def _report(args: argparse.Namespace, plan, budget: PureDP | ZCDP, session: Session) -> int:
    workload = parse_workload(args.workload) if args.workload else None
    if workload is None and not args.plan.is_file() and _vector_plan(str(args.plan)):  # every cell by default
        workload = Identity(int(np.prod(session.source.domain.sizes)))
    estimate = plan(session.source, workload, budget)
    if not isinstance(estimate, Estimate):
        estimate = VectorEstimate(np.asarray(getattr(estimate, "x", estimate), dtype=float),
                                  note="the plan returned a bare array: no error bars")
    records = estimate.records(workload, args.level)
    status = session.budget
    lineage = session.lineage()
    report = {
        "plan": str(args.plan), "note": estimate.note, "answers": json.loads(estimate.to_json(workload, args.level))["answers"],
        "budget_total": str(status.total.value), "budget_spent": str(status.spent.value),
        "budget_kind": status.total.kind,
        "lineage": {"sources": lineage.number_of_nodes(),
                    "derivations": [{"op": d["op"], "stability": d["stability"]} for _, _, d in lineage.edges(data=True)]},
    }
    shown = ", ".join(_shown(r) for r in records[:6]) + (" ..." if len(records) > 6 else "")
    print(f"{args.plan}: {len(records)} answers: {shown}")
    if records:
        method = records[0]["method"]
        level = "" if method.startswith("unavailable") else f" at level {args.level}"
        print(f"intervals: {method}{level}; {estimate.note}")
    print(f"budget: {status}")
    if args.seed is not None:
        print(f"noise: seeded with --seed {args.seed}: every answer is flagged as reproducible, not private against "
              "anyone who knows the seed")
    print("lineage: " + " -> ".join(f"{d['op']}(x{d['stability']})" for d in report["lineage"]["derivations"]))
    if args.synthetic:
        if not hasattr(estimate, "synthetic"):  # a plan script: known only once it has run
            raise ValueError(_NO_MODEL.format(plan=args.plan))
        records = estimate.synthetic(seed=args.seed, labels=True)
        write_columns(records, args.synthetic)
        print(f"saved {args.synthetic}: {len(next(iter(records.values())))} synthetic records")
    if args.plot:
        _plot_history(estimate, args.plot)
        print(f"saved {args.plot}")
    if args.out:
        if args.out.suffix == ".csv":
            estimate.to_csv(args.out, workload, args.level)
        else:
            args.out.write_text(json.dumps(report, indent=2))
        print(f"saved {args.out}")
    return 0


class _FitProgress:
    """A progress bar over a model fit's iterations, on stderr (``callback(iteration, loss)`` of operators.pgm)."""

    def __init__(self, iterations: int | None):
        self.iterations, self.bar = iterations, None

    def __call__(self, iteration: int, loss: float) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.iterations, unit="it", desc="fitting the model", file=sys.stderr, leave=False)
        self.bar.update(iteration - self.bar.n)
        self.bar.set_postfix(loss=f"{loss:.4g}", refresh=False)
        if iteration == self.iterations:
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


def _vector_plan(name: str) -> bool:
    """A catalog plan of the data vector (marginal plans take their marginals, and the Advised plan its own)."""
    from ektelo_ng.plans import info

    return bool(info[name].dimensions) if name in info else False


def _shown(record: dict) -> str:
    half = (record["upper"] - record["lower"]) / 2
    return f"{record['answer']:.4g}" + ("" if half != half else f" ± {half:.3g}")
