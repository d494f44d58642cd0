"""Summaries of a DPBench replay, as the DPBench paper reports them.

For every setting (dataset, scale, domain, epsilon, workload) each algorithm gets the mean and
standard deviation of its error over the trials, and a rank (1 = lowest mean error). Across the
datasets of a (scale, domain, epsilon) the overview gives each algorithm its mean rank, the number
of datasets it wins, and its error relative to Identity (geometric mean over datasets of the ratio
of mean errors), the quantity DPBench's plots compare algorithms by.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ektelo_ng.dpbench.runner import Row

SETTING = ("dataset", "scale", "domain", "epsilon", "workload")
BASELINE = "Identity"


@dataclass(frozen=True)
class Cell:
    """One algorithm in one setting: its error over the trials (mean, standard deviation, range)."""

    algorithm: str
    dataset: str
    scale: int
    domain: str
    epsilon: str
    workload: str
    trials: int
    mean: float
    std: float
    low: float
    high: float
    rank: int
    seconds: float


@dataclass(frozen=True)
class Standing:
    """One algorithm across the datasets of a (scale, domain, epsilon): how it fares overall."""

    algorithm: str
    scale: int
    domain: str
    epsilon: str
    datasets: int
    mean_rank: float
    wins: int
    relative_to_identity: float | None
    seconds: float


def cells(rows: Iterable[Row], metric: str = "L2") -> list[Cell]:
    """Mean and spread per (setting, algorithm) over successful trials, ranked within each setting."""
    errors: dict[tuple, list[float]] = defaultdict(list)
    seconds: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("error") or row.get(metric, "") == "":
            continue
        key = (*(row[c] for c in SETTING), row["algorithm"])
        errors[key].append(float(row[metric]))
        seconds[key].append(float(row["seconds"]))
    by_setting: dict[tuple, list[tuple[str, list[float], list[float]]]] = defaultdict(list)
    for key, values in errors.items():
        by_setting[key[:-1]].append((key[-1], values, seconds[key]))
    out = []
    for setting, entries in by_setting.items():
        entries.sort(key=lambda e: np.mean(e[1]))
        for rank, (algorithm, values, times) in enumerate(entries, start=1):
            dataset, scale, domain, epsilon, workload = setting
            out.append(Cell(
                algorithm, dataset, int(scale), domain, epsilon, workload, len(values), float(np.mean(values)),
                float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, min(values), max(values), rank,
                float(np.mean(times)),
            ))
    return sorted(out, key=lambda c: (c.dataset, c.domain, c.epsilon, c.scale, c.rank))


def standings(table: Sequence[Cell]) -> list[Standing]:
    """Mean rank, wins and error relative to Identity per algorithm and (scale, domain, epsilon)."""
    groups: dict[tuple, list[Cell]] = defaultdict(list)
    for cell in table:
        groups[(cell.scale, cell.domain, cell.epsilon)].append(cell)
    out = []
    for (scale, domain, epsilon), members in groups.items():
        baseline = {c.dataset: c.mean for c in members if c.algorithm == BASELINE}
        by_algorithm: dict[str, list[Cell]] = defaultdict(list)
        for cell in members:
            by_algorithm[cell.algorithm].append(cell)
        for algorithm, own in by_algorithm.items():
            ratios = [c.mean / baseline[c.dataset] for c in own if baseline.get(c.dataset, 0) > 0 and c.mean > 0]
            out.append(Standing(
                algorithm, scale, domain, epsilon, len(own), float(np.mean([c.rank for c in own])),
                sum(c.rank == 1 for c in own),
                float(math.exp(np.mean(np.log(ratios)))) if ratios else None,
                float(np.mean([c.seconds for c in own])),
            ))
    return sorted(out, key=lambda s: (s.domain, s.epsilon, s.scale, s.mean_rank))


def failures(rows: Iterable[Row]) -> list[Row]:
    """Runs that raised, with their error messages."""
    return [row for row in rows if row.get("error")]


LEGEND = ("ratio: mean error over Identity's (geometric mean over datasets); rank: mean rank among the algorithms "
          "(1 = best); wins: datasets where it was best / datasets. MWEM* and AHP*: DPBench's tuned variants; a "
          "name ending in + (SF+, PHP+, DPCube+, AGrid+): this project's variant of the DPBench algorithm.")


def text(table: Sequence[Cell], overview: Sequence[Standing], rows: Sequence[Row], metric: str = "L2") -> str:
    """The report printed at the end of a replay: the overview per scale, then failures, if any."""
    lines = []
    groups: dict[tuple, list[Standing]] = defaultdict(list)
    for s in overview:
        groups[(s.domain, s.epsilon)].append(s)
    for (domain, epsilon), members in groups.items():
        scales = sorted({s.scale for s in members})
        datasets = max(s.datasets for s in members)
        lines.append(f"domain {domain}, epsilon {epsilon}, {datasets} dataset(s): {metric} error relative to "
                     f"{BASELINE} (geometric mean over datasets; < 1 is better), mean rank, wins")
        algorithms = sorted({s.algorithm for s in members},
                            key=lambda a: np.mean([s.mean_rank for s in members if s.algorithm == a]))
        lines.append("  " + f"{'':<16}" + "".join(f"{f'scale {_scale(n)}':>24}" for n in scales))
        lines.append("  " + f"{'algorithm':<16}" + f"{'ratio':>9} {'rank':>6} {'wins':<7}" * len(scales))
        index = {(s.algorithm, s.scale): s for s in members}
        for algorithm in algorithms:
            line = f"  {algorithm:<16}"
            for n in scales:
                s = index.get((algorithm, n))
                if s is None:
                    line += f"{'-':>24}"
                    continue
                ratio = "-" if s.relative_to_identity is None else f"{s.relative_to_identity:.3g}"
                line += f"{ratio:>9} {s.mean_rank:>6.1f} {s.wins:>3}/{s.datasets:<3}"
            lines.append(line)
        lines.append("")
    if groups:
        lines.append(LEGEND)
    failed = failures(rows)
    if failed:
        lines.append(f"{len(failed)} run(s) failed (see the error column of results.csv), e.g.:")
        for row in failed[:5]:
            lines.append(f"  {row['algorithm']} on {row['dataset']} scale {row['scale']}: {row['error'][:150]}")
    return "\n".join(lines)


def _scale(n: int) -> str:
    exponent = math.log10(n)
    return f"1e{int(exponent)}" if exponent.is_integer() else str(n)


def as_dicts(items: Iterable) -> list[dict]:
    return [asdict(item) for item in items]
