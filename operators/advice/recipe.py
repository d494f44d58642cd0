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

from ...kernel.privacy import PureDP, ZCDP
from ..privacy import noise_budget
from ..selection.linear import unit_scale
from ..selection.strategy import Strategy
from .candidates import Candidate, select
from .workload import QueryWorkload

FORMAT = "ektelo-ng advice"
VERSION = 1
#: Relative agreement required between the rebuilt strategy's unit-noise error and the saved one.
RTOL = 1e-6


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
    scale: float | None = None

    def rmse_at(self, budget: PureDP | ZCDP) -> float:
        """The predicted RMSE when measuring with ``budget`` (already spent with this pick's noise)."""
        return self.rmse * math.sqrt(unit_scale(noise_budget(self.noise, budget))
                                     / unit_scale(noise_budget(self.noise, self.budget)))


def _budget_dict(budget: PureDP | ZCDP) -> dict:
    return {"kind": "pure" if isinstance(budget, PureDP) else "zcdp", "value": str(budget.value)}


def _budget_of(data: dict) -> PureDP | ZCDP:
    return (PureDP if data["kind"] == "pure" else ZCDP)(data["value"])


def save(advice, path: str | Path) -> None:
    """Write ``advice``'s pick to ``path`` (JSON), with the whole advice alongside for the record."""
    row = advice.pick
    if row is None:
        raise ValueError("the advice has no pick to save: no selector applied (see its skipped rows)")
    pick: dict = {"name": row.name, "noise": row.noise, "rmse": row.rmse}
    if row.status == "evidence":
        pick |= {"plan": row.evidence.algorithm, "scale": advice.settings["scale"]}
    else:
        c = row.candidate
        pick |= {"family": c.family, "option": c.option, "seed": advice.settings["seed"],
                 "restarts": advice.settings["restarts"],
                 "unit_error": row.rmse**2 * advice.workload.num_queries / unit_scale(row.budget)}
    document = {"format": FORMAT, "version": VERSION, "pick": pick, "budget": _budget_dict(advice.budget),
                "workload": advice.workload.to_dict(), "advice": advice.to_dict()}
    Path(path).write_text(json.dumps(document, indent=1))


def load(path: str | Path) -> Saved:
    """Rebuild the strategy saved at ``path`` and check that it is the one advised (once per file content: a plan
    run again on the same advice reuses the rebuilt strategy)."""
    return _rebuilt(Path(path).read_text(), str(path))


@lru_cache(maxsize=8)
def _rebuilt(text: str, path: str) -> Saved:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not a saved advice (not JSON: {error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{path} is not a saved advice (write one with: ektelo-ng advise ... --out {path})")
    if document.get("version") != VERSION:
        raise ValueError(f"{path} is advice format version {document.get('version')}; this library reads {VERSION}")
    pick, workload = document["pick"], QueryWorkload.from_dict(document["workload"])
    budget = _budget_of(document["budget"])
    if "plan" in pick:
        return Saved(pick["name"], pick["noise"], workload, budget, pick["rmse"], None, pick["plan"], pick["scale"])
    candidate = Candidate(pick["family"], pick["option"], pick["noise"])
    strategy = select(candidate, workload, seed=pick["seed"], restarts=pick["restarts"])
    rebuilt, saved = strategy.expected_error(), pick["unit_error"]
    if not math.isclose(rebuilt, saved, rel_tol=RTOL):
        raise ValueError(f"the strategy rebuilt from {path} ({pick['name']}) has unit-noise error {rebuilt:.10g}, "
                         f"not the advised {saved:.10g}: the library changed since the advice; advise again")
    return Saved(pick["name"], pick["noise"], workload, budget, pick["rmse"], strategy, None)
