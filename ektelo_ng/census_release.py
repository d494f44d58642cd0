"""Releasing SF1 tables end to end: a Person table left in an engine, HDMM, the kernel, a labelled release.

Stages, each timed with the process's peak memory after it (``Stage``): ``open`` (the engine validates the table),
``select`` (HDMM on the workload: no data, no budget), ``vectorize`` (one histogram over every attribute, counted by
the engine: 25.5 million cells for SF1+), ``measure`` (the kernel adds noise to the strategy's answers and charges
the budget), ``reconstruct`` (least squares), ``error bars`` (every answer's interval) and ``write`` (CSV or Parquet).
docs/census.md walks through it.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ektelo_ng.kernel.limits import Limits

if TYPE_CHECKING:  # the rest is imported by release_sf1: the command line reads this module's constants at start
    import numpy as np

    from ektelo_ng.operators.budget import Budget
    from ektelo_ng.operators.census import CensusWorkload
    from ektelo_ng.operators.client import BudgetView

RELEASE_LIMITS = Limits(work=1 << 33)
"""The limits of a release's kernel: the default ones (``kernel.limits.Limits()``, which bound what one analyst's
request may take from a served kernel), but twice the work. A release runs in its data owner's own process and
makes one request whose cost the kernel computes from the fixed workload alone: SF1+'s Laplace strategy (4.7
million answers over 25.5 million cells) at about 4.80e9 steps, over the default 2^32 (measured at 2.6 s on
2 cores), its Gaussian one at 2.29e9; SF1's at 5.0e7 (``tests/test_census.py``)."""

STAGES = ("open", "select", "vectorize", "measure", "reconstruct", "error bars", "write")
"""A release's stages in order (``write`` only when it is given a path)."""


@dataclass(frozen=True)
class Stage:
    """One stage of a release: its name, its seconds, and the process's peak resident memory after it."""

    name: str
    seconds: float
    peak_bytes: int


def peak_bytes() -> int:
    """This process's peak resident memory so far (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@dataclass
class Release:
    """A finished release: the workload, the columns written (``CensusWorkload.release``), the stages, the
    strategy's expected RMSE at this budget, the kernel's account of the budget afterwards, and the file."""

    workload: CensusWorkload
    columns: dict[str, np.ndarray]
    stages: list[Stage]
    expected_rmse: float
    budget: BudgetView
    path: Path | None


def release_sf1(table, budget: Budget, *, plus: bool = True, backend: str = "duckdb", out: str | Path | None = None,
                level: float = 0.95, restarts: int = 3, seed: int = 0, noise_seed: int | None = None,
                limits: Limits | None = None, on_stage: Callable[[Stage], None] | None = None,
                **engine: object) -> Release:
    """Release SF1 (``plus=False``) or SF1+ from a Person table (``operators.census``'s domain: Parquet or CSV
    files, a table name, or a Spark DataFrame) left to ``backend``, spending ``budget`` once. ``engine`` options go
    to the backend (``master=`` or ``spark=`` for Spark, ``connection=`` for DuckDB). ``seed`` is HDMM's;
    ``noise_seed`` makes the kernel's noise reproducible (for tests: every answer then says it is seeded). The
    level and the output path are checked before anything is spent. ``on_stage`` hears of each stage as it ends
    (the command line prints them). ``limits`` are the kernel's (default ``RELEASE_LIMITS``: SF1+'s histogram is
    25.5 million of the 2^25 cells one request may build, its measurement 4.8e9 of the 2^33 steps)."""
    from ektelo_ng.operators import measure
    from ektelo_ng.operators.budget import noise_of
    from ektelo_ng.operators.census import SF1, SF1Plus, check_release_path, write_release
    from ektelo_ng.operators.confidence import check_level
    from ektelo_ng.operators.selection.hdmm import hdmm
    from ektelo_ng.session import open_table, protect

    stages: list[Stage] = []

    @contextmanager
    def stage(name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        stages.append(Stage(name, time.perf_counter() - start, peak_bytes()))
        if on_stage is not None:
            on_stage(stages[-1])

    level = check_level(level)
    path = None if out is None else check_release_path(out)
    workload = SF1Plus() if plus else SF1()
    noise = noise_of(budget)
    with stage("open"):
        session = protect(open_table(table, workload.domain, backend, **engine), workload.domain, budget,
                          seed=noise_seed, limits=limits or RELEASE_LIMITS)
    with stage("select"):
        strategy = hdmm(workload.matrix, noise=noise, restarts=restarts, seed=seed)
    with stage("vectorize"):
        vector, _ = measure.data_vector(session.source, None)
    with stage("measure"):
        measurements = strategy.measure(vector, budget)
    with stage("reconstruct"):
        estimate = strategy.reconstruct(measurements)
    with stage("error bars"):
        columns = workload.release(estimate, level)
    if path is not None:
        with stage("write"):
            write_release(columns, path)
    return Release(workload, columns, stages, strategy.at(budget).rmse(), session.budget, path)
