"""``advise``: run every applicable selector on a workload within a time limit, rank them, and pick.

Errors are compared at the caller's budget, each selector spending all of it with the noise it adds
(:func:`operators.budget.for_noise`): under pure DP only Laplace strategies apply; under zCDP the Gaussian ones
spend rho and the Laplace ones epsilon = sqrt(2 rho) (an epsilon-DP mechanism is epsilon^2/2-zCDP), so every row is
rho-zCDP. An ``ApproxDP(epsilon, delta)`` budget is first read as the largest rho whose zCDP implies it, by the one
rule the kernel and every plan use (``operators.budget``). For data-dependent plans the advice quotes the DPBench
replay's measured errors (:mod:`.evidence`), and picks one only when it beats the best data-independent strategy on
every replayed dataset.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from ...kernel.privacy import PureDP, ZCDP
from ..domains import DomainLike
from ..budget import ApproxDP, Budget, as_budget, for_noise, variance_factor
from ..selection.strategy import Noise, Strategy
from . import evidence
from .candidates import (
    MAX_RESTARTS, Candidate, Cost, Evaluation, candidates, evaluate, hold, max_variance, held_svd_bound, whole_number,
)
from .deadline import Worker, default_memory_limit
from .workload import QueryWorkload, WorkloadLike

Objective = Literal["rmse", "max_variance"]

#: Rows whose objective agrees to this relative tolerance are ties, ranked by cost.
TIE_RTOL = 1e-6
#: Data-dependent plans shown from the evidence (the best by their typical error).
EVIDENCE_ROWS = 3
#: Default largest data vector a strategy may measure (8 bytes a cell: 800 MB).
DEFAULT_MAX_CELLS = 10**8


@dataclass(eq=False)
class Row:
    """One selector in the advice: its error at the budget, its cost, or why it was skipped."""

    name: str
    family: str
    noise: str
    status: Literal["ok", "skipped", "evidence"]
    reason: str = ""
    budget: PureDP | ZCDP | None = None
    rmse: float | None = None
    max_variance: float | None = None
    seconds: float = 0.0
    cost: Cost | None = None
    evidence: evidence.Evidence | None = None
    candidate: Candidate | None = None
    strategy: Strategy | None = field(default=None, repr=False)
    upper_bound: bool = False  # the RMSE is the optimizer's bound (OPT_+): least squares delivers less

    def to_dict(self) -> dict:
        out = {"name": self.name, "family": self.family, "noise": self.noise, "status": self.status,
               "reason": self.reason, "budget": _shown(self.budget), "rmse": self.rmse,
               "rmse_upper_bound": self.upper_bound,
               "max_variance": self.max_variance, "seconds": round(self.seconds, 3)}
        if self.cost is not None:
            out["cost"] = vars(self.cost)
        if self.evidence is not None:
            out["evidence"] = asdict(self.evidence)
        return out


@dataclass
class Advice:
    """The ranked rows (applicable ones first, best first), the pick, and how the budget was read."""

    workload: QueryWorkload
    budget: PureDP | ZCDP
    objective: Objective
    rows: list[Row]
    pick: Row | None
    svd_bounds: dict[str, float]
    conversions: list[str]
    notes: list[str]
    seconds: float
    time_limit: float
    settings: dict

    @property
    def strategy(self) -> Strategy | None:
        """The picked strategy (None when the pick is a data-dependent plan, run by name)."""
        return None if self.pick is None else self.pick.strategy

    def ranked(self) -> list[Row]:
        """The rows with an error (computed, or evidence), best first."""
        return [r for r in self.rows if r.status != "skipped"]

    def skipped(self) -> list[Row]:
        """The selectors that did not apply or did not finish, each with its reason."""
        return [r for r in self.rows if r.status == "skipped"]

    def to_dict(self) -> dict:
        return {"workload": self.workload.describe(), "budget": _shown(self.budget), "objective": self.objective,
                "pick": None if self.pick is None else self.pick.name, "svd_bound_rmse": self.svd_bounds,
                "conversions": self.conversions, "notes": self.notes, "seconds": round(self.seconds, 3),
                "time_limit": self.time_limit, "rows": [r.to_dict() for r in self.rows]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def table(self) -> str:
        """The advice as people read it: ranked rows, skipped ones with reasons, the budget conversions."""
        lines = [f"workload: {self.workload.describe()}", f"budget: {_shown(self.budget)}; ranked by {self.objective}"]
        lines.append(f"  {'':2}{'selector':<42}{'RMSE':>11}{'max var':>12}{'seconds':>9}{'cells':>11}{'requests':>9}  vector")
        for rank, row in enumerate(self.ranked(), 1):
            mark = "*" if row is self.pick else " "
            cost = row.cost
            cells, requests, vector = ("", "", "") if cost is None else (
                f"{cost.cells:.3g}", str(cost.requests), "full" if cost.full_vector else "marginals")
            maxvar = "" if row.max_variance is None else f"{row.max_variance:.4g}"
            rmse = f"~{row.rmse:.3g}" if row.status != "ok" else f"{'<=' * row.upper_bound}{row.rmse:.4g}"
            lines.append(f"{mark}{rank:>2} {row.name:<42}{rmse:>11}{maxvar:>12}{row.seconds:>9.2f}{cells:>11}"
                         f"{requests:>9}  {vector}")
        for noise, bound in self.svd_bounds.items():
            lines.append(f"    SVD lower bound ({noise}): RMSE {bound:.4g}")
        if self.skipped():
            lines.append("skipped:")
            lines += [f"    {r.name}: {r.reason}" for r in self.skipped()]
        lines += [f"note: {text}" for text in self.conversions + self.notes]
        pick = "nothing applies" if self.pick is None else self.pick.name
        lines.append(f"pick: {pick}  ({self.seconds:.1f} s of a {self.time_limit:g} s limit)")
        return "\n".join(lines)

    def rmse_at(self, row: Row, budget: PureDP | ZCDP) -> float:
        """The row's RMSE at another budget of the same kind (error curves): exact for data-independent rows,
        the nearest replayed N x epsilon for evidence rows."""
        spent = for_noise(budget, row.noise)
        if row.status == "evidence":
            identity = self._identity_rmse(spent)
            n_eps = self.settings["records"] * float(spent.epsilon)
            found = evidence.evidence(row.evidence.dims, self.workload.cells, n_eps, self.settings["shape"])
            return identity * next(e.typical for e in found if e.algorithm == row.evidence.algorithm)
        return row.rmse * math.sqrt(variance_factor(spent, row.noise) / variance_factor(row.budget, row.noise))

    def _identity_rmse(self, spent: PureDP) -> float:
        identity = next(r for r in self.rows if r.name == "Identity, laplace")
        ratio = variance_factor(spent, "laplace") / variance_factor(identity.budget, "laplace")
        return identity.rmse * math.sqrt(ratio)

    def save(self, path: str | Path) -> None:
        """Write the pick as a strategy file that ``ektelo-ng run`` and the Advised plan rebuild (:mod:`.recipe`)."""
        from .recipe import save

        save(self, path)


def _accounted(budget: Budget) -> tuple[PureDP | ZCDP, list[str]]:
    """The budget as the kernel accounts it, and what was converted to get there."""
    given = as_budget(budget)
    if not isinstance(given, ApproxDP):
        return given, []
    rho = given.zcdp()
    return rho, [f"{given} is read as rho = {float(rho.rho):.6g}: the largest rho whose zCDP implies it "
                 "(operators.budget), as the kernel and every plan account it"]


def advise(
    domain: DomainLike,
    workload: WorkloadLike,
    budget: Budget,
    *,
    noise: Noise | None = None,
    time_limit: float = 60.0,
    objective: Objective = "rmse",
    weights: Sequence[float] | None = None,
    records: float | None = None,
    shape: str | None = None,
    max_cells: int = DEFAULT_MAX_CELLS,
    seed: int = 0,
    restarts: int = 3,
    progress: Callable[[str, int, int], None] | None = None,
) -> Advice:
    """Compare every applicable selector on ``workload`` at ``budget`` and pick the best by ``objective``.

    ``workload``: a matrix (or array) over every cell of ``domain`` or ``[(attributes, matrix)]`` queries on
    marginals, each matrix a kernel Matrix, an array or lists of rows (``weights``: one per item). ``budget``:
    ek.PureDP, ek.ZCDP or ek.ApproxDP (a bare number is refused). ``noise``: only Laplace or only Gaussian strategies
    (default: all the budget allows). ``time_limit``: seconds for the whole advice; a selector still running at
    its slot's end is stopped and listed as skipped. ``records``: the table's public number of records, which
    brings in the DPBench evidence on data-dependent plans for 1-D and 2-D workloads (``shape``: restrict it to
    replayed datasets of one shape label). ``max_cells``: the largest data vector a strategy may measure.
    ``seed``, ``restarts``: HDMM's random starts. ``progress``: called as ``progress(name, k, total)`` before the
    k-th selector (from 0) runs.
    """
    start = time.perf_counter()
    _check_settings(time_limit, objective, records, shape, max_cells, seed, restarts)
    budget, conversions = _accounted(budget)
    workload = QueryWorkload.of(domain, workload, weights)
    noises = _noises(noise, budget)
    conversions += _conversion_notes(budget, noises)
    deadline = start + time_limit
    plan = candidates(workload, noises, max_cells)
    runnable = [c for c, reason in plan if not reason]
    rows = [Row(c.name, c.family, c.noise, "skipped", reason) for c, reason in plan if reason]
    found, svd_bounds = _run(runnable, workload, budget, noises, deadline, (seed, restarts, max_cells), progress)
    rows += list(found.values())
    settings = {"records": records, "shape": shape, "max_cells": max_cells, "seed": seed, "restarts": restarts,
                "noise": noise}
    notes = []
    if records is not None:
        notes += _evidence_rows(rows, workload, budget, records, shape)
    elif len(workload.domain) <= 2:
        notes.append("give the table's public number of records (records) to compare data-dependent plans "
                     "(DAWA, AHP, MWEM, ...) from the DPBench replay's measured errors")
    rows = _ranked(rows, objective)
    pick = _pick(rows, objective)
    return Advice(workload, budget, objective, rows, pick, svd_bounds, conversions, notes,
                  time.perf_counter() - start, time_limit, settings)


def _check_settings(time_limit, objective, records, shape, max_cells, seed, restarts) -> None:
    """Refuse bad settings by name, before anything runs."""
    if not (math.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit}")
    if objective not in ("rmse", "max_variance"):
        raise ValueError(f"objective must be 'rmse' or 'max_variance', got {objective!r}")
    if records is not None and not (math.isfinite(records) and records > 0):
        raise ValueError(f"records (the public number of records) must be positive, got {records}")
    if shape is not None and records is None:
        raise ValueError(f"shape {shape!r} restricts the DPBench evidence, which comes with records (the public "
                         "number of records): give both")
    if shape is not None and shape not in evidence.shape_labels():
        raise ValueError(f"unknown shape label {shape!r}; the labels are {', '.join(evidence.shape_labels())}")
    for name, value, least in (("max_cells", max_cells, 0), ("seed", seed, 0), ("restarts", restarts, 1)):
        if not whole_number(value, least):
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    if restarts > MAX_RESTARTS:
        raise ValueError(f"restarts must be at most {MAX_RESTARTS} (each is a full HDMM optimization), got {restarts}")


def _run(runnable: list[Candidate], workload: QueryWorkload, budget: PureDP | ZCDP, noises: tuple[Noise, ...],
         deadline: float, settings: tuple[int, int, int], progress) -> tuple[dict[Candidate, Row], dict[str, float]]:
    """Every selector, then the SVD bounds, then the max variances, in one worker within the deadline: the rows
    of the selectors that ran (or why not), and the bounds as RMSE at the budget."""
    seed, restarts, max_cells = settings
    jobs = [(c, evaluate, (c, seed, restarts)) for c in runnable]
    if workload.cells <= max_cells and workload.matrix is not None:  # a bound, not a choice (never embed a
        # workload too large to measure: 166,751 marginals on 100 attributes take 28 s and 420 MB pickled)
        jobs += [(kind, held_svd_bound, (kind,)) for kind in noises]
    found: dict[Candidate, Row] = {}
    svd_bounds: dict[str, float] = {}
    with Worker(default_memory_limit(), preload=(__name__,), setup=(hold, (workload,))) as worker:
        k = 0
        while k < len(jobs):
            job, function, args = jobs[k]
            if progress is not None:
                progress(_job_name(job, function), k, len(jobs))
            outcome = worker.run(function, args, _slot(deadline, len(jobs) - k))
            if function is evaluate:
                found[job] = _row(job, outcome, budget)
                if outcome.status == "ok":  # last of all: the max variances, once every selector had its turn
                    jobs.append((job, max_variance, (job,)))
            elif function is held_svd_bound and outcome.status == "ok":
                svd_bounds[job] = math.sqrt(outcome.value * variance_factor(budget, job) / workload.num_queries)
            elif function is max_variance and outcome.status == "ok" and outcome.value is not None:
                found[job].max_variance = outcome.value * variance_factor(budget, job.noise)
            k += 1
    return found, svd_bounds


def _noises(noise: Noise | None, budget: PureDP | ZCDP) -> tuple[Noise, ...]:
    if noise is None:
        return ("laplace",) if isinstance(budget, PureDP) else ("laplace", "gaussian")
    if noise not in ("laplace", "gaussian"):
        raise ValueError(f"noise must be 'laplace', 'gaussian' or None (both), got {noise!r}")
    for_noise(budget, noise)  # Gaussian under pure DP: refused here, with the reason
    return (noise,)


def _conversion_notes(budget: PureDP | ZCDP, noises: tuple[Noise, ...]) -> list[str]:
    if isinstance(budget, PureDP):
        return [f"Laplace strategies spend epsilon = {float(budget.epsilon):.6g}; Gaussian ones cannot give pure "
                "epsilon-DP (give rho=... to compare them: an epsilon-DP mechanism is epsilon^2/2-zCDP)"]
    if "laplace" not in noises:
        return [f"Gaussian strategies spend rho = {float(budget.rho):.6g}"]
    epsilon = float(for_noise(budget, "laplace").epsilon)
    return [f"Gaussian strategies spend rho = {float(budget.rho):.6g}; Laplace ones epsilon = sqrt(2 rho) = "
            f"{epsilon:.6g} (an epsilon-DP mechanism is epsilon^2/2-zCDP), so every row is rho-zCDP"]


def _slot(deadline: float, jobs_left: int) -> float:
    """This job's time: half of what is left while other jobs wait, all of it for the last (so a selector that
    runs long cannot starve the rest, and cheap ones, run first, finish well within their share)."""
    remaining = deadline - time.perf_counter()
    return remaining if jobs_left <= 1 else remaining / 2


def _job_name(job, function) -> str:
    if function is evaluate:
        return job.name
    return f"max variance of {job.name}" if function is max_variance else f"SVD bound, {job}"


def _row(candidate: Candidate, outcome, budget: PureDP | ZCDP) -> Row:
    if outcome.status != "ok":
        return Row(candidate.name, candidate.family, candidate.noise, "skipped", outcome.reason,
                   seconds=outcome.seconds, candidate=candidate)
    found: Evaluation = outcome.value
    spent = for_noise(budget, candidate.noise)
    rmse = math.sqrt(found.expected_error * variance_factor(spent, candidate.noise) / found.num_queries)
    return Row(candidate.name, candidate.family, candidate.noise, "ok", "", spent, rmse, None, found.seconds,
               found.cost, candidate=candidate, strategy=found.strategy, upper_bound=found.upper_bound)


def _ranked(rows: list[Row], objective: Objective) -> list[Row]:
    """Best first by the objective; rows equal in it (to ``TIE_RTOL``) go cheapest first: no full data vector,
    then less memory, then the one run first (the cheaper family; not the measured seconds, which would make
    the same call pick differently on a busy machine). Skipped rows last."""
    run_order = {id(row): k for k, row in enumerate(rows)}

    def cheapness(row: Row) -> tuple:
        cost = row.cost
        return (True, 0, run_order[id(row)]) if cost is None else (cost.full_vector, cost.memory_bytes,
                                                                    run_order[id(row)])

    ordered = sorted(rows, key=lambda r: (r.status == "skipped", _objective(r, objective)))
    out, i = [], 0
    while i < len(ordered):
        first, j = _objective(ordered[i], objective), i + 1
        while (j < len(ordered) and ordered[j].status == ordered[i].status
               and _objective(ordered[j], objective) <= first * (1 + TIE_RTOL)):
            j += 1
        out += sorted(ordered[i:j], key=cheapness)
        i = j
    return out


def _objective(row: Row, objective: Objective) -> float:
    value = row.max_variance if objective == "max_variance" else row.rmse
    return math.inf if value is None else value


def _evidence_rows(rows: list[Row], workload: QueryWorkload, budget, records: float, shape: str | None) -> list[str]:
    """Rows for the data-dependent plans from the DPBench replay (1-D and 2-D), priced against Identity."""
    identity = next((r for r in rows if r.name == "Identity, laplace" and r.status == "ok"), None)
    if len(workload.domain) > 2 or identity is None:
        return ["the DPBench evidence on data-dependent plans covers 1-D and 2-D workloads measured with Laplace "
                "noise; it does not apply here"]
    spent = for_noise(budget, "laplace")
    found = evidence.evidence(len(workload.domain), workload.cells, records * float(spent.epsilon), shape)
    if not found:
        return [f"the DPBench replay has no {len(workload.domain)}-D dataset of shape {shape!r}: no evidence on "
                "data-dependent plans"]
    for e in [e for e in found if e.data_dependent][:EVIDENCE_ROWS]:
        rows.append(Row(e.algorithm, "data-dependent", "laplace", "evidence",
                        f"measured in the DPBench replay: {e.typical:.3g}x Identity's error "
                        f"({e.low:.3g}-{e.high:.3g}x over {len(e.datasets)} datasets)",
                        spent, identity.rmse * e.typical, evidence=e))
    return [evidence.sentence(found)]


def _pick(rows: list[Row], objective: Objective) -> Row | None:
    """The best data-independent row, unless a data-dependent plan beats it on every replayed dataset."""
    best = next((r for r in rows if r.status == "ok"), None)
    if best is None or objective != "rmse":
        return best
    for row in rows:
        if row.status == "evidence" and row.rmse / row.evidence.typical * row.evidence.high < best.rmse:
            return row
    return best


def _shown(budget: PureDP | ZCDP | None) -> str | None:
    if budget is None:
        return None
    return f"epsilon={float(budget.epsilon):.6g}" if isinstance(budget, PureDP) else f"rho={float(budget.rho):.6g}"
