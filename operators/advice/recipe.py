"""A saved advice: the recipe of the picked strategy, checked when it is rebuilt.

The file holds what the pick was selected from (the workload as kernel matrix specs, the selector, its
setting and noise, HDMM's seed and restarts) and the error it was advised with. :func:`load` runs the
same selection again and refuses the result unless its unit-noise error equals the saved one (to
``RTOL``), so what is measured is what was advised: a changed library or workload cannot slip in
silently. A data-dependent pick is saved by its catalog name; its error was evidence, not a formula.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from ...kernel.privacy import Accounted, PureDP, ZCDP
from ..domains import DomainLike, as_domain
from ..budget import variance_factor
from ..selection.strategy import Strategy
from . import evidence
from .candidates import FAMILIES, MAX_RESTARTS, Candidate, select, whole_number
from .workload import QueryWorkload

FORMAT = "ektelo-ng advice"
VERSION = 2  # 2: the public record count is "records" (was "scale")
#: Relative agreement required between the rebuilt strategy's unit-noise error and the saved one. HDMM's optimizer
#: is not bit-reproducible from one process to another (its BLAS reductions), so strategies rebuilt elsewhere
#: agree to about 1e-5 (6e-6 seen); a changed library or workload moves the error by far more.
RTOL = 1e-4


@dataclass(frozen=True)
class Saved:
    """A loaded advice: the strategy to measure (or the catalog plan to run, with the public record count the
    advice was given), its workload and prediction."""

    name: str
    noise: str
    workload: QueryWorkload
    budget: PureDP | ZCDP
    rmse: float
    strategy: Strategy | None
    plan: str | None
    records: float | None = None


def _budget_of(data: dict) -> PureDP | ZCDP:
    """The advised budget as the kernel's own model reads it; a zero (nothing to advise for) is refused."""
    budget = TypeAdapter(Accounted).validate_python(data)
    if budget.value <= 0:
        raise ValueError(f"the advised budget must be positive, got {budget.value}")
    return budget


def save(advice, path: str | Path) -> None:
    """Write ``advice``'s pick to ``path`` (JSON), with the whole advice alongside for the record."""
    row = advice.pick
    if row is None:
        raise ValueError("the advice has no pick to save: no selector applied (see its skipped rows)")
    pick: dict = {"name": row.name, "noise": row.noise, "rmse": row.rmse}
    if row.status == "evidence":
        pick |= {"plan": row.evidence.algorithm, "records": advice.settings["records"]}
    else:
        c = row.candidate
        pick |= {"family": c.family, "option": c.option, "seed": advice.settings["seed"],
                 "restarts": advice.settings["restarts"],
                 "unit_error": row.rmse**2 * advice.workload.num_queries / variance_factor(row.budget, row.noise)}
    document = {"format": FORMAT, "version": VERSION, "pick": pick, "budget": advice.budget.model_dump(mode="json"),
                "workload": advice.workload.to_dict(), "advice": advice.to_dict()}
    Path(path).write_text(json.dumps(document, indent=1))


def load(path: str | Path, domain: DomainLike | None = None) -> Saved:
    """Rebuild the strategy saved at ``path`` and check that it is the one advised (once per file content: a plan
    run again on the same advice reuses the rebuilt strategy). ``domain``: the table's, checked before anything
    is rebuilt (an advice for other cells cannot measure it)."""
    sizes = None if domain is None else tuple(as_domain(domain).sizes)
    return _rebuilt(Path(path).read_text(), str(path), sizes)


@lru_cache(maxsize=8)
def _rebuilt(text: str, path: str, sizes: tuple[int, ...] | None) -> Saved:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a saved advice (not JSON: {error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{path} is not a saved advice (write one with: ektelo-ng advise ... --out {path})")
    if document.get("version") != VERSION:
        raise ValueError(f"{path} is advice format version {document.get('version')}; this library reads {VERSION}")
    try:
        advised = tuple(as_domain(document["workload"]["domain"]).sizes)
        pick, budget = document["pick"], _budget_of(document["budget"])
        problem = _problem(pick)
        if problem:
            raise ValueError(problem)
    except (KeyError, TypeError, ValueError) as error:
        raise _invalid(path, error) from None
    if sizes is not None and advised != sizes:
        raise ValueError(f"{path} advises for a domain of sizes {advised}, not this table's {sizes}: advise again "
                         "for this table's domain")
    try:
        workload = QueryWorkload.from_dict(document["workload"])
    except (KeyError, TypeError, ValueError) as error:
        raise _invalid(path, error) from None
    if "plan" in pick:
        return Saved(pick["name"], pick["noise"], workload, budget, pick["rmse"], None, pick["plan"], pick["records"])
    candidate = Candidate(pick["family"], pick["option"], pick["noise"])
    strategy = select(candidate, workload, seed=pick["seed"], restarts=pick["restarts"])
    rebuilt, saved = strategy.expected_error(), pick["unit_error"]
    if not math.isclose(rebuilt, saved, rel_tol=RTOL):
        raise ValueError(f"the strategy rebuilt from {path} ({pick['name']}) has unit-noise error {rebuilt:.10g}, "
                         f"not the advised {saved:.10g}: the library changed since the advice; advise again")
    return Saved(pick["name"], pick["noise"], workload, budget, pick["rmse"], strategy, None)


def _problem(pick: dict) -> str:
    """What makes ``pick`` one that ``save`` never writes ('' for none): run as it is, it would measure something
    else than any advice, or fail half-way."""
    if not isinstance(pick, dict):
        return "its pick is not an object"
    if not _at_least(pick.get("rmse"), 0):
        return f"rmse {pick.get('rmse')!r} is not a number >= 0"
    if "plan" in pick:
        if not evidence.is_data_dependent(pick["plan"]):
            return f"plan {pick['plan']!r} is not a data-dependent plan of the DPBench evidence"
        if pick.get("noise") != "laplace" or not (_at_least(pick.get("records"), 0) and pick["records"] > 0):
            return "a data-dependent pick has Laplace noise and a positive public record count (records)"
        return ""
    options, noises = FAMILIES.get(pick.get("family"), ((), ()))
    if pick.get("option") not in options or pick.get("noise") not in noises:
        return (f"no selector family {pick.get('family')!r} with option {pick.get('option')!r} and noise "
                f"{pick.get('noise')!r}")
    if not (whole_number(pick.get("seed"), 0) and whole_number(pick.get("restarts"), 1)
            and _at_least(pick.get("unit_error"), 0)):
        return "seed, restarts and unit_error must be whole numbers >= 0 and >= 1, and a number >= 0"
    if pick["restarts"] > MAX_RESTARTS:  # it is rebuilt without a time limit
        return f"restarts must be at most {MAX_RESTARTS}, got {pick['restarts']}"
    return ""


def _at_least(value, least: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= least


def _invalid(path: str, error: Exception) -> ValueError:
    """The refusal of a file ``save`` did not write as it is, in one line: a missing field by name, pydantic's
    first complaint, or the message."""
    if isinstance(error, KeyError):
        reason = f"no {error.args[0]!r}"
    elif isinstance(error, ValidationError):
        first = error.errors()[0]
        reason = ": ".join(filter(None, [".".join(map(str, first["loc"])), first["msg"]]))
    else:
        reason = str(error)
    return ValueError(f"{path} is not a valid saved advice ({reason}); advise again: ektelo-ng advise ... --out {path}")
