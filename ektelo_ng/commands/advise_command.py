"""``ektelo-ng advise``: which strategy for a workload? Every applicable selector, ranked at the budget."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from ektelo_ng.figures import pyplot
from ektelo_ng.grammar import BUDGET_HELP, DOMAIN_HELP, MARGINALS_HELP, parse_budget, parse_domain
from ektelo_ng.kernel.privacy import PureDP, ZCDP
from ektelo_ng.operators.advice import Advice, advise
from ektelo_ng.operators.advice.advise import DEFAULT_MAX_CELLS
from ektelo_ng.operators.advice.evidence import shape_labels
from ektelo_ng.workload_spec import FILE_HELP, HELP, domain_of, parse_workload_option, read_workload_file

#: Curves drawn in the --plot figure (the best of each selector family and noise).
PLOTTED = 7


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "advise",
        help="rank every applicable strategy selector on a workload at a budget, and pick one (no data)",
        description=(
            "Run every selector that applies to the workload (the classic strategies, HDMM's templates, "
            "ResidualPlanner under sum and max loss, QuerySmasher with WFF and its exact solver), each within the "
            "time limit, and rank them by their expected error at the budget: RMSE per query and max variance, the "
            "selection time, what measuring costs (cells the kernel counts, requests, noisy answers) and whether "
            "the full data vector is needed; the SVD lower bound where computable. Under zCDP, Laplace strategies "
            "spend epsilon = sqrt(2 rho). With --records (the public record count), 1-D and 2-D workloads also get "
            "the DPBench replay's measured errors of the data-dependent plans (DAWA, AHP, MWEM, ...). --out saves "
            "the pick for 'ektelo-ng run ADVICE.json' and the Advised plan."
        ),
        epilog="example: ektelo-ng advise --workload prefix:1024 --budget rho=0.5 --records 100000 --out strategy.json",
    )
    parser.add_argument("--workload", default="allrange:256",
                        help=f"{HELP}; with --domain, also its marginals: {MARGINALS_HELP}; or {FILE_HELP} "
                             "(default allrange:256)")
    parser.add_argument("--domain", help=f"the attributes a workload is over (kway:K, upto:K, attribute sets), or "
                        f"names for a shorthand workload's: {DOMAIN_HELP}")
    parser.add_argument("--budget", default="epsilon=1", help=f"{BUDGET_HELP} (default epsilon=1)")
    parser.add_argument("--noise", choices=["laplace", "gaussian"],
                        help="only Laplace or only Gaussian strategies (default: all the budget allows)")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="seconds for the whole advice; a selector still running is stopped (default 60)")
    parser.add_argument("--objective", choices=["rmse", "max-variance"], default="rmse",
                        help="rank by RMSE per query (default) or by the largest variance of any query")
    parser.add_argument("--records", type=float,
                        help="the table's public number of records: adds the data-dependent plans' measured errors")
    parser.add_argument("--shape", choices=shape_labels(),
                        help="with --records: only evidence from replayed datasets of this shape")
    parser.add_argument("--max-cells", type=float, default=DEFAULT_MAX_CELLS,
                        help=f"largest data vector a strategy may measure (default {DEFAULT_MAX_CELLS:.0e})")
    parser.add_argument("--seed", type=int, default=0, help="seed of HDMM's random starts (no data involved)")
    parser.add_argument("--restarts", type=int, default=3, help="HDMM's random starts per template (default 3)")
    parser.add_argument("--json", action="store_true", help="print the advice as one JSON object")
    parser.add_argument("--plot", type=Path, help="save a figure of RMSE against budget for the top selectors (PNG)")
    parser.add_argument("--out", type=Path, help="save the pick for 'ektelo-ng run ADVICE.json' and the Advised plan")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def _workload(args: argparse.Namespace):
    """(domain, workload, weights) from a workload file, or from a shorthand or marginals over --domain if given."""
    path = Path(args.workload)
    if path.suffix in (".json", ".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"workload file {path} does not exist; a workload file is {FILE_HELP}")
        if args.domain:
            raise ValueError("--domain names a shorthand workload's attributes; a workload file has its own domain")
        return read_workload_file(path)
    named = parse_domain(args.domain) if args.domain else None
    W = parse_workload_option(args.workload, named)
    if named is not None and (sizes := domain_of(W).sizes) != named.sizes:  # advice is for the named cells
        raise ValueError(f"--domain has sizes {named.sizes} but the workload {args.workload} is over {sizes}")
    return named or domain_of(W), W, None


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.max_cells) and args.max_cells >= 0):
        raise ValueError(f"max_cells must be a number of cells >= 0, got {args.max_cells}")
    if args.plot is not None:
        pyplot()
    for path in (args.out, args.plot):
        if path is not None and not path.parent.is_dir():
            raise FileNotFoundError(f"cannot write {path}: the folder {path.parent} does not exist")
    domain, workload, weights = _workload(args)
    budget = parse_budget(args.budget)
    progress = _Progress(enabled=not args.no_progress and not args.json)
    try:
        advice = advise(domain, workload, budget, noise=args.noise, time_limit=args.time_limit,
                        objective=args.objective.replace("-", "_"), weights=weights, records=args.records,
                        shape=args.shape, max_cells=int(args.max_cells), seed=args.seed, restarts=args.restarts,
                        progress=progress)
    finally:
        progress.close()
    print(advice.to_json() if args.json else advice.table())
    if args.out is not None:
        advice.save(args.out)
        print(f"saved {args.out}: run it with ektelo-ng run {args.out} --table T.csv --domain D --budget "
              f"{args.budget}", file=sys.stderr if args.json else sys.stdout)
    if args.plot is not None:
        plot(advice, args.plot)
        print(f"saved {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


class _Progress:
    """A progress bar over the selectors, on stderr, drawn from the first selector on (not for bad input)."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def __call__(self, name: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="selector", file=sys.stderr, dynamic_ncols=True, leave=False)
        self.bar.update(done - self.bar.n)
        self.bar.set_description(name)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _plotted(advice: Advice) -> list:
    """The best row of each family and noise (data-dependent plans count one by one), best first."""
    seen, rows = set(), []
    for row in advice.ranked():
        key = row.name if row.status == "evidence" else (row.family, row.noise)
        if key not in seen:
            seen.add(key)
            rows.append(row)
    return rows[:PLOTTED]


def plot(advice: Advice, path: Path) -> None:
    """RMSE against budget (a tenth to ten times the one advised) for the top selectors, the budget marked."""
    plt = pyplot()

    kind = PureDP if isinstance(advice.budget, PureDP) else ZCDP
    given = float(advice.budget.value)
    amounts = given * np.logspace(-1, 1, 41)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for row in _plotted(advice):
        curve = [advice.rmse_at(row, kind(float(a))) for a in amounts]
        evidence = row.status == "evidence"
        axes.plot(amounts, curve, "--" if evidence else "-", label=row.name + (" (DPBench evidence)" * evidence))
    for noise, bound in advice.svd_bounds.items():
        axes.plot(amounts, bound * (given / amounts) ** (1.0 if kind is PureDP else 0.5), ":", color="black",
                  label=f"SVD lower bound, {noise}")
    axes.axvline(given, color="grey", lw=0.8)
    axes.set(xscale="log", yscale="log", xlabel="epsilon" if kind is PureDP else "rho",
             ylabel="RMSE per query", title=advice.workload.describe()[:80])
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
