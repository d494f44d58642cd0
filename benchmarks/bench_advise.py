"""The strategy advisor on the papers' workloads: does ``advise`` pick what the papers show best, and does the
error it predicts hold when the pick is measured through the kernel?

    python benchmarks/bench_advise.py                        # every case, each in its own process
    python benchmarks/bench_advise.py cps_rho05 qs_mixed_d10 # some cases
    python benchmarks/bench_advise.py --quick                # small sizes, 10 trials: a smoke run (~2 min)
    python benchmarks/bench_advise.py --trials 5 allrange256 # override the trials
    python benchmarks/bench_advise.py --max-rows default     # the kernel's default public bound on records

Cases (the paper's best selector and its figure; RMSE per query at the budget):

- ``allrange256``: all 32,896 ranges on n = 256, epsilon = 1. HDMM OPT_0 (J Table 4: 8.07; HB 8.90).
- ``prefix256`` / ``prefix1024``: the 256 / 1,024 prefixes, epsilon = 1. HDMM OPT_0 (7.35 / 9.58).
- ``cps_eps1``: all 32 marginals of CPS (income 100, age 50, marital 7, race 4, gender 2), epsilon = 1.
  HDMM OPT_M (J Table 6: 4.84; Identity 5.38).
- ``cps_rho05``: the same at rho = 0.5. ResidualPlanner (sum loss) reaches the Gaussian SVD bound; HDMM's
  Gaussian OPT_M / OPT_kron and QuerySmasher tie with it.
- ``rp_d100``: 100 attributes of size 10, all <= 3-way marginals with the empty one (166,751 marginals,
  162 million queries), rho = 0.5. ResidualPlanner (sum loss): 303.216 (pcost 1 = rho 0.5). HDMM and the
  classic selectors are skipped (10^100 cells); QuerySmasher may run out of time, which is reported.
- ``qs_mixed_d10``: 1-way range + 2-way affine + 3-way prefix on 10 attributes of size 10, rho = 0.5.
  QuerySmasher exact (20.41) over WFF (25.37).

One JSON object per case on stdout:

- ``seconds``: ``advise``'s wall time (``time_limit``: the limit it was given); ``pick``: the selector picked;
  ``expected``: the paper's best; ``agrees``: the pick is of the expected selector's family, or ties the
  expected selector's RMSE within 1e-6 relative (several selectors reach the SVD bound on marginals);
  ``same_selector``: the pick is the expected selector itself. (When the expected selector was stopped, the
  tie is judged against the best selector of its family that ran.)
- ``predicted_rmse``: the pick's RMSE at the budget as advised; ``expected_rmse``: the expected selector's
  row in the same advice; ``paper``: the paper's figures; ``svd_bound``: the advice's SVD lower bounds;
  ``ranked``: every selector that ran, with its RMSE; ``skipped``: the others, with the reason.
- ``measured_rmse``: end to end: the advice saved, then ``catalog["Advised"]`` measuring it in a fresh
  in-process kernel per trial (seed = trial) on one synthetic table (``rows`` records drawn from skewed
  random histograms), answering the advised workload; RMSE against the true answers computed with numpy,
  over every query and trial.
- The statistical band: ``pred_mse`` (predicted RMSE squared), ``emp_mse`` (the mean over trials of each
  trial's mean squared error), ``se`` (its standard error over the trials) and ``z = (emp_mse - pred_mse) /
  se``; |z| beyond ~3 says the prediction does not describe the measurement. ``applied_rmse``: the
  estimate's own variances (at the noise the kernel actually added), with ``z_applied`` against it.
  With few trials z is a t statistic with trials - 1 degrees of freedom, and the per-trial MSEs of Laplace
  prefix answers are skewed: the 1-D cases run 200 trials. The kernel rounds noise scales up (its exact
  samplers draw scales with 11 significant bits, budgets split on a grid, and its sensitivity bound covers
  float rounding, a bound that grows with its public bound on the number of records, ``max_rows``): the
  benchmark gives the kernel the table's size as that bound, and Gaussian plans still carry ~0.2% more
  variance than advised, which the many answers of ``rp_d100`` and ``cps_rho05`` resolve as a large ``z``
  while ``z_applied`` is small (``--max-rows default`` keeps 2^32: ~2.5% more variance at d = 100).
- ``e2e_seconds``: the whole end-to-end run (all trials: kernel start, load and rebuild of the advice,
  measurement, reconstruction, answers); ``e2e_seconds_per_trial``; ``truth_seconds``: the numpy truth.

Each case runs in its own process (``--case NAME`` runs one here); the advisor runs its selectors in one
more worker process at a time. Keep BLAS to one thread on a shared machine (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's library, not an installed copy

TIE_RTOL = 1e-6


@dataclass(frozen=True)
class Case:
    domain: dict[str, int]
    workload: Callable[[], object]  # built in the case's own process
    budget: tuple[str, float]  # ("pure", epsilon) or ("zcdp", rho)
    expected: str  # the advice row of the selector the paper shows best
    paper: str
    time_limit: float
    rows: int
    trials: int


def _attributes(d: int, n: int) -> dict[str, int]:
    return {f"a{i}": n for i in range(d)}


def _all_marginals(domain: dict[str, int]):
    from ektelo_ng.operators.workload import Marginals

    d = len(domain)
    return Marginals(domain, [s for k in range(d + 1) for s in itertools.combinations(range(d), k)])


def _up_to_3way(d: int, n: int) -> list:
    from ektelo_ng.operators.matrix import Identity, Total

    subsets = [s for k in range(4) for s in itertools.combinations(range(d), k)]
    return [(s, Identity(n ** len(s)) if s else Total(1)) for s in subsets]


def _mixed(d: int, n: int) -> list:
    from ektelo_ng.operators.selection.query_smasher import query_class_workload

    domain = [n] * d
    return (query_class_workload(domain, "range", ways=(1,)) + query_class_workload(domain, "affine", ways=(2,))
            + query_class_workload(domain, "prefix", ways=(3,)))


def _range(n: int):
    from ektelo_ng.operators.workload import AllRange

    return AllRange(n)


def _prefix(n: int):
    from ektelo_ng.operators.workload import Prefix

    return Prefix(n)


CPS = {"income": 100, "age": 50, "marital": 7, "race": 4, "gender": 2}
CPS_SMALL = {"income": 10, "age": 5, "marital": 7, "race": 4, "gender": 2}
HDMM_BEST = "HDMM OPT_0, laplace"
RP_BEST = "ResidualPlanner (sum loss), gaussian"
QS_BEST = "QuerySmasher (exact), gaussian"


def cases(quick: bool) -> dict[str, Case]:
    if quick:
        return {
            "allrange256": Case({"x": 64}, lambda: _range(64), ("pure", 1.0), HDMM_BEST,
                                "n=64 (quick): J Table 4 OPT_0 5.55, HB 6.63", 20, 10_000, 10),
            "prefix256": Case({"x": 64}, lambda: _prefix(64), ("pure", 1.0), HDMM_BEST,
                              "n=64 (quick): J Table 4 OPT_0 5.32, GreedyH 6.04", 20, 10_000, 10),
            "cps_eps1": Case(CPS_SMALL, lambda: _all_marginals(CPS_SMALL), ("pure", 1.0), "HDMM OPT_M, laplace",
                             "small CPS (quick): no paper figure", 20, 10_000, 10),
            "cps_rho05": Case(CPS_SMALL, lambda: _all_marginals(CPS_SMALL), ("zcdp", 0.5), RP_BEST,
                              "small CPS (quick): RP sum = Gaussian SVD bound", 20, 10_000, 10),
            "rp_d100": Case(_attributes(10, 10), lambda: _up_to_3way(10, 10), ("zcdp", 0.5), RP_BEST,
                            "d=10 (quick): 9.348 at pcost 1", 20, 2_000, 10),
            "qs_mixed_d10": Case(_attributes(4, 10), lambda: _mixed(4, 10), ("zcdp", 0.5), QS_BEST,
                                 "d=4 (quick): no paper figure", 20, 2_000, 10),
        }
    return {
        "allrange256": Case({"x": 256}, lambda: _range(256), ("pure", 1.0), HDMM_BEST,
                            "J Table 4: OPT_0 8.07, HB 8.90, GreedyH 9.72, Identity 13.11, SVDB 4.07", 60, 100_000,
                            200),
        "prefix256": Case({"x": 256}, lambda: _prefix(256), ("pure", 1.0), HDMM_BEST,
                          "J Table 4: OPT_0 7.35, HB 8.97, GreedyH 9.13, Identity 16.03, SVDB 3.50", 60, 100_000, 200),
        "prefix1024": Case({"x": 1024}, lambda: _prefix(1024), ("pure", 1.0), HDMM_BEST,
                           "J Table 4: OPT_0 9.58, HB 12.87, GreedyH 14.32, Identity 32.02, SVDB 4.11", 60, 100_000,
                           200),
        "cps_eps1": Case(CPS, lambda: _all_marginals(CPS), ("pure", 1.0), "HDMM OPT_M, laplace",
                         "HDMM J Table 6: OPT_M 4.84, Identity 5.38", 60, 50_000, 100),
        "cps_rho05": Case(CPS, lambda: _all_marginals(CPS), ("zcdp", 0.5), RP_BEST,
                          "RP sum = Gaussian SVD bound; HDMM OPT_M/OPT_kron (Gaussian) and QuerySmasher tie", 60,
                          50_000, 100),
        "rp_d100": Case(_attributes(100, 10), lambda: _up_to_3way(100, 10), ("zcdp", 0.5), RP_BEST,
                        "RP paper (notes): 303.216 at pcost 1 (= SVD bound); HDMM out of memory from d=20", 120,
                        2_000, 3),
        "qs_mixed_d10": Case(_attributes(10, 10), lambda: _mixed(10, 10), ("zcdp", 0.5), QS_BEST,
                             "QuerySmasher paper: exact 20.41, WFF 25.37 (pcost 1)", 60, 10_000, 5),
    }


# ---- the synthetic table and the true answers ------------------------------------------------------------
def synthetic(domain: dict[str, int], rows: int, seed: int = 0) -> np.ndarray:
    """``rows`` records, each attribute drawn independently from a skewed random histogram (Dirichlet(0.5)):
    data-independent strategies' errors do not depend on it, but a wrong answer order would show."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.choice(n, size=rows, p=rng.dirichlet(np.full(n, 0.5))) for n in domain.values()], axis=1)


def marginal(data: np.ndarray, sizes: tuple[int, ...], attributes: tuple[int, ...]) -> np.ndarray:
    if not attributes:
        return np.array([float(data.shape[0])])
    cells = np.ravel_multi_index(tuple(data[:, a] for a in attributes), [sizes[a] for a in attributes])
    return np.bincount(cells, minlength=math.prod(sizes[a] for a in attributes)).astype(np.float64)


def true_answers(workload, data: np.ndarray, linear: bool) -> np.ndarray:
    """The advised workload's exact answers in the order the Advised plan's estimate gives them: the rows of the
    workload over every cell for a linear strategy, else each item's queries on its marginal, item by item."""
    sizes = tuple(workload.domain.sizes)
    if linear:
        x = marginal(data, sizes, tuple(range(len(sizes))))
        return np.asarray(workload.answers @ x, dtype=np.float64).ravel()
    return np.concatenate([np.asarray(item.matrix @ marginal(data, sizes, item.attributes), dtype=np.float64).ravel()
                           for item in workload.items])


# ---- one case --------------------------------------------------------------------------------------------
def _budget(spec: tuple[str, float]):
    import ektelo_ng as ek

    kind, value = spec
    return ek.PureDP(value) if kind == "pure" else ek.ZCDP(value)


def _short(reason: str, limit: int = 70) -> str:
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."


def run_case(name: str, case: Case, trials: int, table_bound: bool) -> dict:
    from ektelo_ng.operators.advice import advise

    budget = _budget(case.budget)
    workload = case.workload()
    start = time.perf_counter()
    advice = advise(case.domain, workload, budget, time_limit=case.time_limit)
    seconds = time.perf_counter() - start
    pick = advice.pick
    rows = {r.name: r for r in advice.rows}
    expected = rows.get(case.expected)
    record = {
        "seconds": round(seconds, 2), "time_limit": case.time_limit, "pick": None if pick is None else pick.name,
        "expected": case.expected, "paper": case.paper, "budget": advice.to_dict()["budget"],
        "queries": advice.workload.num_queries,
    }
    if pick is None:
        return record | {"agrees": False, "skipped": {r.name: _short(r.reason) for r in advice.skipped()}}
    expected_ok = expected is not None and expected.status == "ok"
    family = expected.family if expected is not None else None
    # the expected selector's RMSE, or (stopped or skipped) the best of its family that ran
    kin = expected if expected_ok else next((r for r in advice.ranked() if r.family == family and r.rmse), None)
    ties = kin is not None and abs(pick.rmse - kin.rmse) <= TIE_RTOL * kin.rmse
    record |= {
        "agrees": bool(pick.family == family or ties), "same_selector": pick.name == case.expected,
        "predicted_rmse": round(pick.rmse, 4), "expected_rmse": round(expected.rmse, 4) if expected_ok else None,
        "svd_bound": {k: round(v, 4) for k, v in advice.svd_bounds.items()},
        "ranked": {r.name: round(r.rmse, 4) for r in advice.ranked()},
        "skipped": {r.name: _short(r.reason) for r in advice.skipped()},
    }

    try:
        return record | end_to_end(case, advice, budget, trials, table_bound)
    except Exception as error:  # reported with the advice, not lost with it
        return record | {"e2e_error": f"{type(error).__name__}: {error}"}


def end_to_end(case: Case, advice, budget, trials: int, table_bound: bool) -> dict:
    """Save the advice, then measure it with the Advised plan in a fresh in-process kernel per trial."""
    import ektelo_ng as ek
    from ektelo_ng.operators.selection.linear import LinearStrategy

    pick, record = advice.pick, {}
    data = synthetic(case.domain, case.rows)
    columns = {a: data[:, i] for i, a in enumerate(case.domain)}
    linear = isinstance(advice.strategy, LinearStrategy)
    start = time.perf_counter()
    truth = true_answers(advice.workload, data, linear)
    truth_seconds = time.perf_counter() - start
    mses, applied, per_trial = [], [], []
    bound = {"max_rows": case.rows} if table_bound else {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "advice.json"
        advice.save(path)
        e2e_start = time.perf_counter()
        for trial in range(trials):
            start = time.perf_counter()
            session = ek.protect(columns, case.domain, budget, seed=trial, **bound)
            estimate = ek.catalog["Advised"](session.source, None, budget, advice=path)
            answers = np.asarray(estimate.answer(), dtype=np.float64).ravel()
            per_trial.append(time.perf_counter() - start)
            if answers.shape != truth.shape:
                raise RuntimeError(f"the estimate gives {answers.size} answers, the advised workload has {truth.size}")
            spent = session.budget
            if spent.spent != spent.total:
                raise RuntimeError(f"the plan spent {spent.spent}, not all of the budget {spent.total}")
            answers -= truth  # in place: the d = 100 case holds 162 million answers
            mses.append(float(np.dot(answers, answers)) / answers.size)
            del answers
            try:
                applied.append(float(np.mean(estimate.variances())))
            except (ValueError, MemoryError) as error:  # a covariance without structure it can use
                record["applied_error"] = _short(f"{type(error).__name__}: {error}", 120)
            del estimate, session
        e2e_seconds = time.perf_counter() - e2e_start
    pred_mse, emp_mse = pick.rmse**2, float(np.mean(mses))
    se = float(np.std(mses, ddof=1) / math.sqrt(trials)) if trials > 1 else None
    applied_mse = float(np.mean(applied)) if applied else None
    return record | {
        "measured_rmse": round(math.sqrt(emp_mse), 4), "trials": trials, "rows": case.rows,
        "pred_mse": round(pred_mse, 4), "emp_mse": round(emp_mse, 4), "se": None if se is None else round(se, 4),
        "z": None if not se else round((emp_mse - pred_mse) / se, 2),
        "applied_rmse": None if applied_mse is None else round(math.sqrt(applied_mse), 4),
        "z_applied": None if not se or applied_mse is None else round((emp_mse - applied_mse) / se, 2),
        "max_rows": case.rows if table_bound else "default (2^32)",
        "e2e_seconds": round(e2e_seconds, 2), "e2e_seconds_per_trial": round(float(np.mean(per_trial)), 2),
        "truth_seconds": round(truth_seconds, 2),
    }


# ---- driver ----------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes and 10 trials: a smoke run")
    parser.add_argument("--trials", type=int, help="trials per case (default: the case's own)")
    parser.add_argument("--max-rows", choices=("table", "default"), default="table",
                        help="the kernel's public bound on records: the table's size (default) or the kernel's 2^32")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # run one case in this process
    args = parser.parse_args()
    table = cases(args.quick)
    if args.case:
        case = table[args.case]
        record = {"name": args.case, **({"quick": True} if args.quick else {}),
                  **run_case(args.case, case, args.trials or case.trials, args.max_rows == "table")}
        record["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
        print(json.dumps(record), flush=True)
        return
    selected = args.cases or list(table)
    unknown = sorted(set(selected) - set(table))
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; cases: {sorted(table)}")
    passed = (["--quick"] if args.quick else []) + (["--trials", str(args.trials)] if args.trials else []) + [
        "--max-rows", args.max_rows]
    for name in selected:
        out = subprocess.run([sys.executable, __file__, "--case", name, *passed], capture_output=True, text=True)
        if out.returncode != 0:
            print(json.dumps({"name": name, "error": out.stderr.strip().splitlines()[-3:]}), flush=True)
        else:
            print(out.stdout.strip(), flush=True)


if __name__ == "__main__":  # the advisor's worker processes start by importing this module (spawn)
    main()
