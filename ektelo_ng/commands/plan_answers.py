"""What a plan answered under ``ektelo-ng run``, as its process sends it back to the process that holds the kernel:
one estimate's answers, several estimates by name (a plan in stages, e.g. with ``budget.split``), or query Results
(one labelled table per query, ``ek.answer``). The parent validates the message and alone writes every output, to
paths the plan never had (``run_command``).

>>> answers = PlanAnswers(note="n", level=0.95, method="exact", queries=["q0"], answers=[1.0], variances=[0.5],
...                       lower=[0.0], upper=[2.0])
>>> ReturnedEstimate(answers).records()[0]["answer"]
1.0
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Union

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.operators.confidence import ConfidenceIntervals
from ektelo_ng.operators.estimate import Estimate, VectorEstimate
from ektelo_ng.operators.queries.results import Results, file_name

Cell = Union[str, float, int, None]


class Table(BaseModel):
    """One query's labelled table of Results: its column names and rows."""

    model_config = ConfigDict(extra="forbid")
    columns: list[str]
    rows: list[list[Cell]]

    @model_validator(mode="after")
    def _rows_fit(self) -> Table:
        if any(len(row) != len(self.columns) for row in self.rows):
            raise ValueError("a table's rows must have one value per column")
        return self


class PlanAnswers(BaseModel):
    """What a plan answered: the records of ``Estimate.records`` as columns, the synthetic records as integer
    codes per attribute, the fit's loss per iteration; or, for a plan returning more than one estimate, the
    estimates by name (``estimates``) or the query tables of its Results (``tables``), its own lists then empty."""

    model_config = ConfigDict(extra="forbid")
    note: str
    level: float
    method: str
    queries: list[str]
    answers: list[float]
    variances: list[float]
    lower: list[float]
    upper: list[float]
    synthetic: dict[str, list[int]] | None = None
    history: list[float] | None = None
    fit_method: str | None = None
    estimates: dict[str, PlanAnswers] | None = None
    tables: dict[str, Table] | None = None

    @model_validator(mode="after")
    def _one_length(self) -> PlanAnswers:
        columns = (self.queries, self.answers, self.variances, self.lower, self.upper)
        if len({len(column) for column in columns}) > 1:
            raise ValueError("queries, answers, variances and intervals of different lengths")
        if self.synthetic and len({len(column) for column in self.synthetic.values()}) > 1:
            raise ValueError("synthetic columns of different lengths")
        if (self.estimates or self.tables) and (self.queries or self.estimates and self.tables):
            raise ValueError("one estimate's answers, several estimates or query tables, not more than one")
        return self

    @classmethod
    def of(cls, estimate: Estimate, workload, level: float, *, synthetic: bool, seed: int | None,
           history: bool) -> PlanAnswers:
        """``estimate``'s answers to ``workload`` at ``level``, with its synthetic records and fit if asked."""
        records = estimate.records(workload, level)
        model = synthetic and hasattr(estimate, "synthetic")
        return cls(note=estimate.note, level=records[0]["level"] if records else level,
                   method=records[0]["method"] if records else "",
                   **{name: [r[key] for r in records] for name, key in
                      (("queries", "query"), ("answers", "answer"), ("variances", "variance"), ("lower", "lower"),
                       ("upper", "upper"))},
                   synthetic={name: np.asarray(column).tolist() for name, column in
                              estimate.synthetic(seed=seed).items()} if model else None,
                   history=list(map(float, getattr(estimate, "history", None) or [])) if history else None,
                   fit_method=getattr(estimate, "method", None) if history else None)

    @classmethod
    def of_returned(cls, returned, workload, level: float, *, synthetic: bool, seed: int | None,
                    history: bool) -> PlanAnswers:
        """What a plan returned, whatever its form: query Results, several estimates (a list, or a dict by name),
        one Estimate, or a bare array of the data vector (no error bars)."""
        if isinstance(returned, Results):
            tables = {name: Table(columns=[str(c) for c in frame.columns],
                                  rows=json.loads(frame.to_json(orient="values"))) for name, frame in
                      returned.frames.items()}
            return cls(note=returned.note, level=level, method="", queries=[], answers=[], variances=[], lower=[],
                       upper=[], tables=tables)
        if _several(returned):
            named = (dict(returned) if isinstance(returned, Mapping) else
                     {f"estimate {k}": estimate for k, estimate in enumerate(returned)})
            estimates = {str(name): cls.of(estimate, None, level, synthetic=False, seed=seed, history=False)
                         for name, estimate in named.items()}
            return cls(note=f"{len(estimates)} estimates", level=level, method="", queries=[], answers=[],
                       variances=[], lower=[], upper=[], estimates=estimates)
        if not isinstance(returned, Estimate):
            returned = VectorEstimate(np.asarray(getattr(returned, "x", returned), dtype=float),
                                      note="the plan returned a bare array: no error bars")
        return cls.of(returned, workload, level, synthetic=synthetic, seed=seed, history=history)

    def synthetic_columns(self, domain: Domain) -> dict[str, np.ndarray]:
        """The synthetic records over ``domain``, with its value labels where it has them; refused if a column
        names no attribute or holds a code outside it."""
        columns = {}
        for name, codes in (self.synthetic or {}).items():
            if name not in domain.names:
                raise ValueError(f"the plan's synthetic records have a column {name!r} the table does not")
            attribute, codes = domain[name], np.asarray(codes, dtype=np.int64)
            if codes.size and not (0 <= codes.min() and codes.max() < attribute.size):
                raise ValueError(f"the plan's synthetic records hold codes of {name!r} outside 0..{attribute.size - 1}")
            columns[name] = np.asarray(attribute.labels)[codes] if attribute.labels else codes
        return columns

    def results(self):
        """The query tables as Results (pandas frames), to print and write as ``ek.answer``'s own."""
        import pandas as pd

        frames = {name: pd.DataFrame(table.rows, columns=table.columns) for name, table in self.tables.items()}
        return Results(frames, self.note, strategy="")


def _several(returned) -> bool:
    """Whether a plan returned several estimates: a non-empty list or dict of Estimates."""
    values = list(returned.values()) if isinstance(returned, Mapping) else returned
    return (isinstance(values, Sequence) and not isinstance(values, str) and bool(values)
            and all(isinstance(v, Estimate) for v in values))


class ReturnedEstimate(Estimate):
    """The answers a plan's process sent back, as an Estimate: what ``run`` prints and exports (to_csv, to_json)."""

    def __init__(self, answers: PlanAnswers):
        self.note, self._queries = answers.note, answers.queries
        self._variances = np.asarray(answers.variances, dtype=float)
        self._intervals = ConfidenceIntervals(np.asarray(answers.answers, dtype=float),
                                              np.asarray(answers.lower, dtype=float),
                                              np.asarray(answers.upper, dtype=float), answers.level, answers.method)

    def answer(self, W=None) -> np.ndarray:
        return self._intervals.answers

    def variances(self, W=None) -> np.ndarray:
        return self._variances

    def intervals(self, W=None, level: float = 0.95, method="auto") -> ConfidenceIntervals:
        return self._intervals

    def labels(self, W=None) -> list[str]:
        return self._queries


def save(path: Path, answers: PlanAnswers, plan: str, report: dict) -> str:
    """Write ``answers`` to ``path`` with the kernel's ``report`` (budget, noise, lineage): ``.json`` holds
    everything; ``.csv`` every answer (of several tables or estimates, with a first column naming each row's); a
    folder (no suffix) one CSV per query table or estimate (``answers.csv`` for one) and ``report.json``. Says
    what was saved."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        document = {"plan": plan, "note": answers.note}
        if answers.tables:
            results = answers.results()
            document["tables"] = {name: json.loads(results[name].to_json(orient="records")) for name in results}
        elif answers.estimates:
            document["estimates"] = {name: _records(part) for name, part in answers.estimates.items()}
        else:
            document["answers"] = _records(answers)
        path.write_text(json.dumps({**document, **report}, indent=2))
        return str(path)
    if suffix == ".csv" and answers.tables:
        import pandas as pd

        results = answers.results()
        pd.concat([results[name].assign(query=name)[["query", *results[name].columns]] for name in results],
                  ignore_index=True).to_csv(path, index=False)
    elif suffix == ".csv" and answers.estimates:
        rows = [{"estimate": name, **record} for name, part in answers.estimates.items()
                for record in ReturnedEstimate(part).records()]
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]) if rows else ["estimate"], lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    elif suffix == ".csv":
        ReturnedEstimate(answers).to_csv(path)
    else:
        path.mkdir(exist_ok=True)
        if answers.tables:
            written = answers.results().to_dir(path, "csv")
        else:
            written = [path / f"{file_name(name)}.csv" for name in answers.estimates or {"answers": None}]
            for file, part in zip(written, (answers.estimates or {"answers": answers}).values()):
                ReturnedEstimate(part).to_csv(file)
        (path / "report.json").write_text(json.dumps({"plan": plan, "note": answers.note, **report}, indent=2))
        return f"{path}: {len(written)} tables and report.json"
    return str(path)


def _records(answers: PlanAnswers) -> list[dict]:
    return json.loads(ReturnedEstimate(answers).to_json())["answers"]
