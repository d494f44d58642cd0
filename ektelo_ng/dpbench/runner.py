"""Running a DPBench grid: every run in a fresh kernel, in parallel, resumable, one CSV row per run.

Each worker process takes one setting (a data sample) at a time: it draws the sample, protects it
once per run in a new kernel holding exactly the run's budget, runs the plan from ``plans.catalog``,
checks the budget it spent, and scores the estimate with DPBench's metric. The parent appends each
finished setting's rows to ``results.csv`` at once, so an interrupted replay loses at most the
settings in flight, and a rerun with the same output directory skips every run already recorded.

The replay plays both parts of a study: it is the data owner (it draws the private sample and
scores the estimate against it) and the analyst (the plan sees only its kernel handle).
"""

from __future__ import annotations

import csv
import os
import pickle
import sys
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from functools import lru_cache
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from ektelo_ng.dpbench import data, workloads
from ektelo_ng.dpbench.grid import Grid, Setting
from ektelo_ng.dpbench.metrics import METRICS, scaled_errors
from ektelo_ng.session import protect
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.privacy import PureDP
from ektelo_ng.kernel.table import load_table
from ektelo_ng.operators.selection import memo
from ektelo_ng.plans import info

COLUMNS = (
    "algorithm", "dataset", "scale", "domain", "epsilon", "trial", "seed", *METRICS, "seconds",
    "workload", "data_seed", "spent", "error",
)
KEY_COLUMNS = ("algorithm", "dataset", "scale", "domain", "epsilon", "trial", "workload")
RESULTS = "results.csv"

Row = dict[str, str]


# ---- one setting (runs in a worker process) ------------------------------------------------
@lru_cache(maxsize=64)
def _shape(dataset: str, data_dir: str | None) -> np.ndarray:
    return data.load_shape(dataset, data_dir)


@lru_cache(maxsize=16)
def _workload(name: str, shape: tuple[int, ...], seed: int):
    return workloads.build(name, shape, seed)


def sample_of(setting: Setting, data_dir: str | None) -> np.ndarray:
    """The setting's private data vector: ``scale`` records drawn from the shape, coarsened to the domain."""
    return data.coarsen(data.sample(_shape(setting.dataset, data_dir), setting.scale, setting.data_seed), setting.domain)


def run_setting(
    setting: Setting, runs: Iterable[tuple[str, str]], data_dir: str | None, public_scale: bool, secure: bool,
    params: dict[str, dict], strategies: str | None = None,
) -> list[Row]:
    """Run ``(algorithm, epsilon)`` pairs on the setting's sample; one row each, failures included.
    ``strategies``: a file of selections saved by :func:`select_strategies`, loaded once per process."""
    if strategies is not None:
        _load_strategies(strategies)
    x = sample_of(setting, data_dir)
    domain = _domain(setting.domain)
    table = load_table(data.records(x), domain)
    workload = _workload(setting.workload, setting.domain, setting.workload_seed)
    truth = x.ravel()
    rows = []
    for algorithm, epsilon in runs:
        entry = info[algorithm]
        seed = None if secure else setting.noise_seed(algorithm, epsilon)
        options = {**entry.defaults, **params.get(algorithm, {})}
        if public_scale and entry.public_records:  # DPBench's scale is the plan's public record count
            options["records"] = setting.scale
        row: Row = dict(zip(KEY_COLUMNS, setting.run_key(algorithm, epsilon)))
        row.update(seed="" if seed is None else str(seed), data_seed=str(setting.data_seed), error="")
        session = protect(table, domain, PureDP(epsilon), seed=seed)
        start = time.perf_counter()
        try:
            estimate = entry.plan(session.source, workload, PureDP(epsilon), **options)
            seconds = time.perf_counter() - start
            estimate = np.asarray(getattr(estimate, "x", estimate), dtype=np.float64).ravel()
            if not np.all(np.isfinite(estimate)):
                raise ValueError("the estimate has non-finite values")
            row.update({k: repr(v) for k, v in scaled_errors(workload, truth, estimate).items()})
            row["seconds"] = f"{seconds:.4f}"
        except Exception as error:  # a failed run is recorded, not fatal: the grid goes on
            row.update({k: "" for k in METRICS}, seconds=f"{time.perf_counter() - start:.4f}")
            row["error"] = f"{type(error).__name__}: {error}".replace("\n", " ")[:500]
        row["spent"] = str(session.budget.spent.epsilon)
        rows.append(row)
    return rows


# ---- the results file ----------------------------------------------------------------------
def read_results(out: Path) -> list[Row]:
    """Rows recorded so far in ``out/results.csv`` (none if it does not exist)."""
    path = Path(out) / RESULTS
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None:
            return []
        missing = set(KEY_COLUMNS) - set(reader.fieldnames)
        if missing:
            raise ValueError(f"{path} is not a results file of this tool (no columns {sorted(missing)}); use another --out")
        return list(reader)


class ResultsFile:
    """Appends rows to ``results.csv``, writing the header on first use; each batch is flushed to disk."""

    def __init__(self, out: Path):
        self.path = Path(out) / RESULTS
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._handle = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._handle, fieldnames=COLUMNS, extrasaction="ignore")
        if fresh:
            self._writer.writeheader()

    def append(self, rows: list[Row]) -> None:
        self._writer.writerows(rows)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


# ---- the grid ------------------------------------------------------------------------------
def pending(grid: Grid, done: set[tuple]) -> list[tuple[Setting, list[tuple[str, str]]]]:
    """Each setting with the (algorithm, epsilon) runs not yet recorded."""
    out = []
    for setting in grid.settings():
        runs = [
            (a, e) for a in grid.algorithms_for(setting.dataset) for e in grid.epsilons
            if setting.run_key(a, e) not in done
        ]
        if runs:
            out.append((setting, runs))
    return out


Selections = list[tuple[str, str, tuple[int, ...], int]]  # (algorithm, workload, domain, workload seed)


def selections(grid: Grid, work: list[tuple[Setting, list[tuple[str, str]]]]) -> Selections:
    """The distinct strategy selections of the data-independent runs in ``work``."""
    found = {(a, s.workload, s.domain, s.workload_seed) for s, runs in work for a, _ in runs
             if not info[a].data_dependent}
    return sorted(found)


def select_strategies(wanted: Selections, params: dict[str, dict], store: str) -> None:
    """Run each data-independent plan once per workload on an empty table and save what the plans
    remembered (``operators.selection.memo``) to ``store``, for the runs that follow to load: HDMM
    or Greedy-H then select once for the whole grid, in a worker, while other runs go on."""
    for algorithm, workload_name, shape, seed in wanted:
        empty, domain = _empty_table(shape)
        options = {**info[algorithm].defaults, **params.get(algorithm, {})}
        source = protect(empty, domain, PureDP(1), seed=0).source
        try:
            info[algorithm].plan(source, _workload(workload_name, shape, seed), PureDP(1), **options)
        except Exception:  # noqa: BLE001 - its runs will fail the same way and record why
            continue
    with open(store, "wb") as handle:
        pickle.dump(memo.snapshot(), handle)


@lru_cache(maxsize=4)
def _load_strategies(store: str) -> None:
    """Install the selections saved in ``store`` into this process's memo (once per process)."""
    with open(store, "rb") as handle:
        memo.install(pickle.load(handle))  # written by select_strategies of this same replay


def _empty_table(shape: tuple[int, ...]) -> tuple[dict[str, np.ndarray], Domain]:
    """A table with no records over ``shape``: enough to run a data-independent plan for its selection."""
    domain = _domain(shape)
    return {name: np.zeros(0, dtype=np.int64) for name in domain.names}, domain


def _domain(shape: tuple[int, ...]) -> Domain:
    return Domain.from_dict({f"a{axis}": size for axis, size in enumerate(shape)})


def _split(work, data_dependent: bool):
    """The part of each setting's runs whose plans are (or are not) data-dependent."""
    parts = [(s, [r for r in runs if info[r[0]].data_dependent == data_dependent]) for s, runs in work]
    return [(s, runs) for s, runs in parts if runs]


def run_grid(
    grid: Grid,
    out: str | Path,
    data_dir: str | Path | None = None,
    jobs: int | None = None,
    secure: bool = False,
    progress: bool = True,
) -> list[Row]:
    """Run every run of ``grid`` not yet in ``out/results.csv``; return all rows recorded there.

    Data-dependent runs start at once; one worker first selects the data-independent plans'
    strategies (once per workload), and their runs follow with the selections loaded.
    """
    out = Path(out)
    data_dir = None if data_dir is None else str(data_dir)
    for name in grid.datasets:  # a missing file fails now, not in a worker an hour in
        data.load_shape(name, data_dir)
    done = {tuple(row[c] for c in KEY_COLUMNS) for row in read_results(out)}
    work = pending(grid, done)
    bar = _progress_bar(sum(len(runs) for _, runs in work), progress)
    results = ResultsFile(out)
    store = str(out / ".strategies.pickle")
    jobs = max(1, min(jobs or os.cpu_count() or 1, 2 * len(work) or 1))
    try:
        with ProcessPoolExecutor(jobs, initializer=threadpool_limits, initargs=(1,)) as pool:

            def submit(part, strategies=None):
                return {pool.submit(run_setting, s, runs, data_dir, grid.public_scale, secure, grid.params,
                                    strategies) for s, runs in part}

            independent = _split(work, data_dependent=False)
            selecting = pool.submit(select_strategies, selections(grid, work), grid.params, store) if independent else None
            futures = submit(_split(work, data_dependent=True))
            try:
                while futures or selecting:
                    finished, _ = wait(futures | {selecting} - {None}, return_when=FIRST_COMPLETED)
                    futures -= finished
                    if selecting in finished:
                        finished.remove(selecting)
                        selecting.result()  # raises if a selection failed: nothing to run the rest with
                        selecting = None
                        futures |= submit(independent, store)
                    for future in finished:
                        rows = future.result()
                        results.append(rows)
                        bar.update(len(rows))
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        results.close()
        bar.close()
    return read_results(out)


def _progress_bar(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="run", disable=not enabled, file=sys.stderr, dynamic_ncols=True)


__all__ = ["COLUMNS", "KEY_COLUMNS", "RESULTS", "read_results", "run_grid", "run_setting", "sample_of"]
