"""How often each catalog plan's intervals hold the truth: fresh kernels on a table of a given shape, Prefix
queries, the share of the answers an interval was claimed for that it covers, per run; and what was withheld.

Used by ``benchmarks/bench_coverage.py`` (the table of docs/error-bars.md) and ``tests/test_coverage_catalog.py``; a
plan of your own can be checked the same way before it is trusted with real data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import ektelo_ng as ek
from ektelo_ng.operators import workload as wl
from ektelo_ng.plans import catalog

LEVELS = (0.9, 0.95)


def table(shape: str, cells: int, records: int = 20_000, seed: int = 0) -> np.ndarray:
    """``records`` values over ``cells``: ``flat`` (uniform), ``skewed`` (a few heavy cells among many near-empty
    ones) or ``steps`` (piecewise constant with jumps)."""
    rng = np.random.default_rng(seed)
    if shape == "flat":
        p = np.ones(cells)
    elif shape == "skewed":
        p = rng.pareto(1.0, cells) * (rng.random(cells) < 0.3) + 1e-3
    elif shape == "steps":
        p = np.repeat(rng.random(8) ** 2 + 0.01, -(-cells // 8))[:cells]
    else:
        raise ValueError(f"unknown shape {shape!r}: flat, skewed or steps")
    return rng.choice(cells, size=records, p=p / p.sum())


@dataclass
class Coverage:
    """Per level: the share of claimed intervals covering the truth in each run (runs where none was claimed are
    left out), intervals withheld, and why."""

    covered: dict[float, list[float]] = field(default_factory=lambda: {level: [] for level in LEVELS})
    narrowed: dict[float, list[float]] = field(default_factory=lambda: {level: [] for level in LEVELS})
    withheld: int = 0
    answers: int = 0
    reasons: set[str] = field(default_factory=set)

    def mean(self, level: float, narrowed: bool = False) -> float:
        runs = (self.narrowed if narrowed else self.covered)[level]
        return float(np.mean(runs)) if runs else float("nan")

    def standard_error(self, level: float, narrowed: bool = False) -> float:
        runs = (self.narrowed if narrowed else self.covered)[level]
        return float(np.std(runs, ddof=1) / np.sqrt(len(runs))) if len(runs) > 1 else float("nan")


def coverage(name: str, shape: str, cells: int, runs: int, epsilon: float = 0.1, narrow: float = 0.7) -> Coverage:
    """``runs`` fresh kernels of plan ``name`` on ``table(shape, cells)``; ``narrowed`` holds the coverage of the
    same intervals scaled by ``narrow`` (a check of the check's power)."""
    values = table(shape, cells)
    W = wl.Prefix(cells)
    truth = W @ np.bincount(values, minlength=cells)
    found = Coverage()
    for run in range(runs):
        session = ek.protect({"a": values}, {"a": cells}, ek.PureDP(epsilon), seed=1000 + run)
        estimate = catalog[name](session.source, W, ek.PureDP(epsilon))
        for level in LEVELS:
            intervals = estimate.intervals(W, level)
            claimed = np.isfinite(intervals.lower)
            if level == LEVELS[0]:
                found.answers += claimed.size
                found.withheld += int((~claimed).sum())
                if not claimed.all():
                    found.reasons.add(intervals.method)
            if claimed.any():
                half = intervals.halfwidths[claimed]
                error = np.abs(truth[claimed] - intervals.answers[claimed])
                found.covered[level].append(float(np.mean(error <= half)))
                found.narrowed[level].append(float(np.mean(error <= narrow * half)))
    return found
