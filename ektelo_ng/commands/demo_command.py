"""``ektelo-ng demo``: the library's plans on a built-in synthetic table (no data files needed).

Each plan runs against its own freshly protected copy of the table with exactly its budget, on
the Prefix (CDF) workload; the report compares the error each plan actually made with the error
its strategy is expected to make (data-independent plans), says how many of a sample of its 95%
intervals contain the true answer, and checks the budget it spent. ``--plot FILE`` draws the sampled
answers with their intervals against the truth for two plans (docs/error-bars.md).
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
import time
from pathlib import Path

import numpy as np

from ektelo_ng.session import protect
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.privacy import PureDP
from ektelo_ng.operators.workload import Prefix
from ektelo_ng.dpbench.plots import pyplot
from ektelo_ng.operators.matrix import Dense
from ektelo_ng.operators import algebra
from ektelo_ng.plans import info

#: CDF queries sampled for the coverage column and the figure.
SAMPLED = 32
#: The plans drawn by --plot: one data-independent, one data-dependent.
DRAWN = ("HB", "DAWA")


def register(subcommands) -> None:
    parser = subcommands.add_parser(
        "demo",
        help="run the library's plans on a built-in synthetic table",
        description=(
            "Generate a synthetic table (incomes: a smooth bulk with spikes at round numbers), protect it in a fresh "
            "kernel per plan, run every 1-D plan of the catalog on the Prefix (CDF) workload, and print each plan's "
            "measured RMSE per query, its expected RMSE (for data-independent plans), the share of a sample of its "
            "95% intervals that contain the true answer, and the budget it spent."
        ),
    )
    parser.add_argument("--rows", type=int, default=100_000, help="records in the synthetic table (default 100000)")
    parser.add_argument("--cells", type=int, default=1024, help="domain size, a power of two (default 1024)")
    parser.add_argument("--epsilon", default="1", help="budget per plan, pure DP (default 1)")
    parser.add_argument("--seed", type=int, help="reproducible (non-secure) noise and data")
    parser.add_argument("--json", action="store_true", help="one JSON object per plan instead of a table")
    parser.add_argument("--plot", type=Path, metavar="FILE",
                        help="also draw sampled answers with their 95%% intervals against the truth (PNG; needs "
                             "matplotlib: the [plot] extra)")
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
    sample = np.arange(args.cells // SAMPLED - 1, args.cells, args.cells // SAMPLED)  # every k-th CDF query
    sampled = Dense(algebra.rows(W, sample))
    rows, drawn = [], {}
    for name, entry in info.items():
        if 1 not in entry.dimensions:
            continue
        session = protect({"income": values}, domain, PureDP(epsilon), seed=args.seed)
        start = time.perf_counter()
        estimate = entry.plan(session.source, W, PureDP(epsilon), **entry.defaults)
        seconds = time.perf_counter() - start
        expected = entry.strategy((args.cells,), W).rmse(W) / float(epsilon) if entry.strategy else None
        found = estimate.intervals(sampled, 0.95)
        claimed = np.isfinite(found.lower)  # withheld intervals claim nothing
        covered = found.covers(truth[sample])[claimed]
        rows.append({
            "plan": name, "rmse": float(np.sqrt(np.mean((estimate.answer(W) - truth) ** 2))), "expected_rmse": expected,
            "covered_95": float(covered.mean()) if covered.size else None, "withheld": int((~claimed).sum()),
            "spent": str(session.budget.spent.epsilon), "seconds": round(seconds, 3),
        })
        if name in DRAWN:
            drawn[name] = (found, estimate.note)
    if args.plot:
        draw(args.plot, sample, truth[sample], drawn, epsilon)
        print(f"saved {args.plot}")
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{args.rows} synthetic records over {args.cells} cells; Prefix workload ({args.cells} queries); "
          f"epsilon {epsilon} per plan, {'seeded' if args.seed is not None else 'secure'} noise")
    print(f"  {'plan':<18}{'RMSE':>12}{'expected':>12}{'covered':>9}{'spent':>8}{'seconds':>9}")
    for row in sorted(rows, key=lambda r: r["rmse"]):
        expected = row["expected_rmse"]
        expected = "-" if expected is None else "biased" if math.isinf(expected) else f"{expected:.2f}"
        covered = "-" if row["covered_95"] is None else f"{row['covered_95']:.0%}"
        print(f"  {row['plan']:<18}{row['rmse']:>12.2f}{expected:>12}{covered:>9}{row['spent']:>8}"
              f"{row['seconds']:>9.2f}")
    print(f"covered: how many of the {SAMPLED} sampled answers with a 95% interval lie in it ('-': the plan gives "
          "none); an interval is withheld where none holds, and a data-dependent plan's include a bound on the bias "
          "of its choices")
    return 0


def draw(path: Path, sample: np.ndarray, truth: np.ndarray, drawn: dict, epsilon) -> None:
    """Each plan's error on the sampled CDF queries with its 95% interval (an interval covers the truth
    where its bar crosses zero), one panel per plan."""
    plt = pyplot()
    figure, axes = plt.subplots(1, len(drawn), figsize=(5.5 * len(drawn), 4.2), sharey=True, squeeze=False)
    for axis, (name, (found, note)) in zip(axes[0], drawn.items()):
        covered, claimed = found.covers(truth), np.isfinite(found.lower)
        axis.axhline(0.0, color="black", linewidth=1)
        for inside, colour, label in ((True, "tab:blue", "covers"), (False, "tab:red", "misses")):
            picked = (covered == inside) & claimed
            axis.errorbar(sample[picked], (found.answers - truth)[picked], yerr=found.halfwidths[picked], fmt="o",
                          markersize=3, capsize=2, color=colour, label=f"{label} the truth ({picked.sum()})")
        if not claimed.all():
            axis.plot(sample[~claimed], (found.answers - truth)[~claimed], "x", color="grey", markersize=3,
                      label=f"interval withheld ({(~claimed).sum()})")
        axis.set_title(f"{name}, epsilon {epsilon}: error and 95% interval", fontsize=10)
        axis.set_xlabel("CDF query (income cell)")
        axis.legend(fontsize=8, loc="lower right")
        axis.text(0.02, 0.98, textwrap.fill(note, 80), transform=axis.transAxes, fontsize=6.5, va="top")
    axes[0][0].set_ylabel("estimate - true answer (records)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
