"""Tune MWEM*'s rounds T and AHP*'s (rho, eta) as functions of the signal strength eps * N.

The plans use DPBench's own tuned tables by default (``plans.mwem.MWEM_STAR_ROUNDS``,
``plans.ahp.AHP_STAR_PARAMETERS``), so that MWEM* and AHP* replay DPBench; this script tunes a table
of one's own, to pass as ``table=``. The plans read any table as DPBench reads its own, by linear
interpolation between the rows' signals.

Training data: the built-in synthetic 1-D shapes (``ektelo_ng.dpbench.synthetic``), never the
DPBench files the plans are later compared on. For every shape, signal eps * N, and seed, the
script samples N = signal / eps records (``dpbench.data.sample``), coarsens them to the domain
(``dpbench.data.coarsen``), protects the table, and runs

- MWEM (``plans.mwem.mwem`` with the public scale N) for every T in ROUNDS,
- AHP (``plans.ahp.ahp``) for every (rho, eta) in RHOS x ETAS,

on the Prefix workload, scoring each run by DPBench's scaled L2 error
(``dpbench.metrics.scaled_errors``). Per signal, the chosen parameter minimises the geometric
mean of the error over shapes and seeds (so no single shape's error scale dominates), except
that the previous signal's choice is kept while it is within KEEP (2%) of the best: smaller
differences are within the seeds' noise and would only make the table zig-zag. Tables list
(signal, value) rows from signal 0.

Prints one JSON object per case (plan, shape, signal, seed, parameter, L2), then one JSON object
per plan with the per-signal scores and the chosen table.

    python benchmarks/tune_star.py [--domain 256] [--epsilon 0.1] [--seeds 8] [--plans MWEM* AHP*]
    python benchmarks/tune_star.py --cases OUTPUT.jsonl   # choose again from a run's printed cases
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

import numpy as np

import ektelo_ng as ek
from ektelo_ng.dpbench import data, metrics, synthetic
from ektelo_ng.kernel.table import load_table
from ektelo_ng.operators import workload as wl
from ektelo_ng.plans import ahp, mwem

SIGNALS = (1e1, 1e2, 1e3, 1e4, 1e5)
ROUNDS = (1, 2, 4, 8, 16, 32, 64)
RHOS = (0.25, 0.5, 0.75, 0.85, 0.95)
ETAS = (0.1, 0.35, 0.7, 1.0, 2.0)
KEEP = 1.02


def candidates(plan: str) -> list:
    return list(ROUNDS) if plan == "MWEM*" else [(rho, eta) for rho in RHOS for eta in ETAS]


def estimate(plan: str, source, workload, epsilon: float, parameter, records: int) -> np.ndarray:
    if plan == "MWEM*":
        return mwem.mwem(source, workload, epsilon, rounds=parameter, scale=records).x
    rho, eta = parameter
    return ahp.ahp(source, workload, epsilon, selection_share=rho, eta=eta).x


def sweep(plans: list[str], domain: int, epsilon: float, seeds: int) -> dict:
    """Every case's error; returns {plan: {signal: {parameter: [errors]}}} and prints each case."""
    errors = {plan: defaultdict(lambda: defaultdict(list)) for plan in plans}
    workload = wl.Prefix(domain)
    names = [name for name, (dims, _, _) in synthetic.SHAPES.items() if dims == 1]
    for name in names:
        distribution = synthetic.shape(name)
        for signal in SIGNALS:
            records = round(signal / epsilon)
            for seed in range(seeds):
                x = data.coarsen(data.sample(distribution, records, seed), domain)
                attributes = ek.Domain.from_dict({"a0": domain})
                table = load_table(data.records(x), attributes)
                for plan in plans:
                    for parameter in candidates(plan):
                        session = ek.protect(table, attributes, ek.PureDP(epsilon), seed=seed)
                        x_hat = estimate(plan, session.source, workload, epsilon, parameter, records)
                        error = metrics.scaled_errors(workload, x, x_hat)["L2"]
                        errors[plan][signal][parameter].append(error)
                        case = {"plan": plan, "shape": name, "signal": signal, "seed": seed,
                                "parameter": parameter, "L2": error}
                        print(json.dumps(case), flush=True)
    return errors


def choose(errors: dict) -> tuple[dict, list]:
    """Per signal: the geometric-mean error of every parameter, and the table of the best ones."""
    scores, rows = {}, []
    for signal in SIGNALS:
        means = {p: math.exp(np.mean(np.log(e))) for p, e in errors[signal].items()}
        scores[signal] = means
        best = min(means, key=means.get)
        if rows and means[rows[-1][1]] <= KEEP * means[best]:
            continue
        if not rows or rows[-1][1] != best:
            rows.append((0.0 if not rows else round(signal / math.sqrt(10), 1), best))
    return scores, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", type=int, default=256, help="cells of the coarsened 1-D domain")
    parser.add_argument("--epsilon", type=float, default=0.1, help="budget of each run; N = signal / epsilon")
    parser.add_argument("--seeds", type=int, default=8, help="data and noise seeds per shape and signal")
    parser.add_argument("--plans", nargs="+", default=["MWEM*", "AHP*"], choices=["MWEM*", "AHP*"])
    parser.add_argument("--cases", help="read the cases from this earlier output instead of running them")
    args = parser.parse_args()
    if args.cases:
        errors = {plan: defaultdict(lambda: defaultdict(list)) for plan in args.plans}
        with open(args.cases) as lines:
            for case in map(json.loads, lines):
                if case.get("plan") in errors and "L2" in case:
                    parameter = case["parameter"]
                    parameter = tuple(parameter) if isinstance(parameter, list) else parameter
                    errors[case["plan"]][case["signal"]][parameter].append(case["L2"])
    else:
        errors = sweep(args.plans, args.domain, args.epsilon, args.seeds)
    for plan in args.plans:
        scores, rows = choose(errors[plan])
        print(json.dumps({
            "plan": plan,
            "scores": {str(s): {str(p): round(v, 8) for p, v in by.items()} for s, by in scores.items()},
            "table": rows,
        }), flush=True)


if __name__ == "__main__":
    main()
