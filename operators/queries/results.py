"""Labelled results: one pandas DataFrame per query, read from the batch's one estimate.

Each frame has the query's group-by columns holding the schema's labels (``sex="F"``; a bin of a numeric column
as its range), then ``answer``, ``std``, ``lower``, ``upper``, ``level`` and ``accounts_for``: what the interval
accounts for and what else the answer rests on (clamping, binning, post-processing). A quantile's frame has a
``probability`` column too, one row per group and probability.

- count, sum: linear in the estimate; std and interval from its noise (exact for Gaussian noise; exact or a sound
  bound for Laplace).
- mean = sum / count: the interval holds at ``level`` by a union bound, from the sum's and the count's
  intervals at level ``1 - (1 - level) / 2`` each (the ratio's range over both boxes, within the column's
  bounds); std by the delta method, approximate (it leaves out the covariance of sum and count).
- quantile at p: the first bin whose CDF reaches p (``P_k - p n >= 0``, read from the estimate). Its interval
  inverts the CDF's intervals at ``level``: from the first bin whose upper bound reaches 0 to the first bin from
  which every lower bound does. It misses only if the interval of ``P_k - p n`` at the true quantile's bin (or
  the bin before it) misses on one side, so it holds at ``level`` (each side at most ``(1 - level) / 2``, the noise
  being symmetric). No std.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .compile import Compiled, Part
from .model import Count, Mean, Quantile, Sum


class Results:
    """The batch's answers by query name: ``results["count by sex"]`` is a DataFrame; ``note`` says how they
    were made (strategy, budget, estimate)."""

    def __init__(self, frames: dict, note: str, strategy: str):
        self.frames, self.note, self.strategy = frames, note, strategy

    def __getitem__(self, name: str):
        try:
            return self.frames[name]
        except KeyError:
            raise KeyError(f"no query named {name!r}; the results hold {list(self.frames)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.frames)

    def __len__(self) -> int:
        return len(self.frames)

    def names(self) -> list[str]:
        return list(self.frames)

    def __repr__(self) -> str:
        return f"Results({list(self.frames)}; {self.note})"

    def to_dir(self, path: str | Path, format: str = "csv") -> list[Path]:
        """Write one file per query into ``path`` (made if missing), named after the query, as CSV or Parquet
        (needs pyarrow); returns the files written. A README.txt beside them holds the note."""
        if format not in ("csv", "parquet"):
            raise ValueError(f"format must be 'csv' or 'parquet', got {format!r}")
        if format == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ImportError("writing Parquet needs pyarrow: pip install -e '.[parquet]', or format='csv'") from None
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, frame in self.frames.items():
            file = folder / f"{file_name(name)}.{format}"
            frame.to_csv(file, index=False) if format == "csv" else frame.to_parquet(file, index=False)
            written.append(file)
        (folder / "README.txt").write_text(self.note + "\n")
        return written


def file_name(name: str) -> str:
    """A query's name as a file name: letters, digits, - _ . kept, anything else _."""
    kept = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("_")
    return kept or "query"


def results_of(compiled: Compiled, reader, level: float, nonnegative: bool, integer: bool, choice, budget) -> Results:
    """Every part's frame from the reader's estimate."""
    try:
        import pandas
    except ImportError:
        raise ImportError("query results are pandas DataFrames: pip install -e '.[queries]'") from None
    frames = {}
    for part in compiled.parts:
        aggregate = part.query.aggregate
        if isinstance(aggregate, (Count, Sum)):
            rows = _linear(part, reader, level, "count" if isinstance(aggregate, Count) else "sum", compiled)
        elif isinstance(aggregate, Mean):
            rows = _mean(part, reader, level, compiled)
        else:
            rows = _quantiles(part, reader, level, aggregate)
        rows = _post_processed(rows, part, compiled, nonnegative, integer)
        frames[part.name] = pandas.DataFrame(rows, columns=[*part.query.groupby, *(("probability",) if isinstance(
            aggregate, Quantile) else ()), "answer", "std", "lower", "upper", "level", "accounts_for"])
    shown = f"epsilon = {float(budget.epsilon):g}" if hasattr(budget, "epsilon") else f"rho = {float(budget.rho):g}"
    note = (f"{len(compiled.parts)} queries answered jointly from one measurement ({choice.name}; {choice.reason}) "
            f"spending {shown}; {reader.note}")
    return Results(frames, note, choice.name)


def _keys(part: Part) -> list[dict]:
    return [dict(zip(part.query.groupby, key)) for key in part.keys]


def _noise_note(method: str, level: float) -> str:
    return f"noise ({method}) at level {level:g}"


def _linear(part: Part, reader, level: float, key: str, compiled: Compiled) -> list[dict]:
    read = part.read(key)
    answers, variances = reader.answers(part, read), reader.variances(part, read)
    lower, upper, method = reader.intervals(part, read, level)
    notes = "; ".join([_noise_note(method, level), *part.notes])
    return [key_row | {"answer": a, "std": math.sqrt(v) if v >= 0 else math.nan, "lower": lo, "upper": hi,
                       "level": level, "accounts_for": notes}
            for key_row, a, v, lo, hi in zip(_keys(part), answers, variances, lower, upper)]


def _mean(part: Part, reader, level: float, compiled: Compiled) -> list[dict]:
    column = compiled.schema[part.query.aggregate.column]
    midpoints = column.midpoints()
    least, most = float(midpoints.min()), float(midpoints.max())
    each = 1 - (1 - level) / 2
    total, count = part.read("sum"), part.read("count")
    sums, counts = reader.answers(part, total), reader.answers(part, count)
    sum_var, count_var = reader.variances(part, total), reader.variances(part, count)
    sum_lo, sum_hi, method = reader.intervals(part, total, each)
    count_lo, count_hi, _ = reader.intervals(part, count, each)
    how = (f"union bound of the sum's and the count's intervals at level {each:g} each ({method}); std by the delta "
           "method (approximate)")
    notes = "; ".join([how, *part.notes])
    rows = []
    for key_row, s, c, vs, vc, slo, shi, clo, chi in zip(_keys(part), sums, counts, sum_var, count_var, sum_lo,
                                                           sum_hi, count_lo, count_hi):
        mean = min(max(s / c, least), most) if c > 0 else math.nan
        std = math.sqrt(vs + mean**2 * vc) / c if c > 0 and vs >= 0 and vc >= 0 else math.nan
        if clo > 0 and math.isfinite(slo + shi + chi):
            lower = max(least, min(slo / clo, slo / chi))
            upper = min(most, max(shi / clo, shi / chi))
        else:
            lower, upper = least, most  # the count may be 0: the mean could be anything within the bounds
        rows.append(key_row | {"answer": mean, "std": std, "lower": lower, "upper": upper, "level": level,
                               "accounts_for": notes})
    return rows


def _quantiles(part: Part, reader, level: float, aggregate: Quantile) -> list[dict]:
    edges, integer = part.edges, part.integer
    bins = edges.size - 1
    values = (edges[:-1] if integer and edges[1] - edges[0] == 1 else (edges[:-1] + edges[1:] - integer) / 2)
    top = edges[1:] - 1 if integer else edges[1:]
    rows = []
    for p in aggregate.probabilities:
        read = part.read(f"cdf {p!r}")
        cdf = reader.answers(part, read).reshape(-1, bins)
        lower, upper, method = reader.intervals(part, read, level)
        lower, upper = lower.reshape(-1, bins), upper.reshape(-1, bins)
        notes = "; ".join([f"inverts the CDF's intervals ({method}) at level {level:g}", *part.notes])
        for key_row, d, lo, hi in zip(_keys(part), cdf, lower, upper):
            estimate = _first(d >= 0, bins)
            first = _first(hi >= 0, bins)
            held = np.flip(np.logical_and.accumulate(np.flip(lo >= 0)))  # every lower bound from here on reaches 0
            last = _first(held, bins)
            rows.append(key_row | {"probability": p, "answer": float(values[estimate]), "std": math.nan,
                                   "lower": float(edges[first]), "upper": float(top[last]), "level": level,
                                   "accounts_for": notes})
    return rows


def _first(flags: np.ndarray, bins: int) -> int:
    """The first bin where ``flags`` holds; the last bin if none does (the CDF always reaches p there)."""
    found = np.flatnonzero(flags)
    return int(found[0]) if found.size else bins - 1


def _post_processed(rows: list[dict], part: Part, compiled: Compiled, nonnegative: bool, integer: bool) -> list[dict]:
    """Counts (and sums of non-negative columns) clipped at 0, counts rounded: stated in the row."""
    aggregate = part.query.aggregate
    if not (nonnegative or integer) or not isinstance(aggregate, (Count, Sum)):
        return rows
    column = None if isinstance(aggregate, Count) else compiled.schema[aggregate.column]
    clip = nonnegative and (column is None or column.low >= 0)
    rounded = integer and (column is None or column.integer)
    steps = [s for s, on in (("clipped at 0", clip), ("rounded to an integer", rounded)) if on]
    if not steps:
        return rows
    rounding = {"answer": np.round, "lower": np.floor, "upper": np.ceil}  # an interval keeps the integers it held
    for row in rows:
        for field, round_ in rounding.items():
            value = max(row[field], 0.0) if clip else row[field]
            row[field] = float(round_(value)) if rounded else value
        row["accounts_for"] += f"; post-processed: {' and '.join(steps)} (answer and interval)"
    return rows
