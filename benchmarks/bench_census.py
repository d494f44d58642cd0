"""SF1 and SF1+ at census scale: HDMM against the paper's Tables 6 and 7, and the release end to end.

``select-*`` cases: HDMM's strategy for the workload, its RMSE (epsilon 1; Gaussian at delta 1e-6, sigma 4.22468 per
unit L2 sensitivity) against the HDMM journal paper, and the selection's seconds.

``release-*`` cases: a synthetic Person table (``ektelo_ng.census_persons``; 10^7 or 10^8 rows of Parquet, written
into $EKTELO_BENCH_DIR, default /tmp/ektelo-bench, the first time) released as SF1+ at epsilon 1 through the kernel
(``ektelo_ng.census_release``) with DuckDB or Spark (local[1] or local[2]): seconds and peak memory after each
stage, the peak memory of Spark's JVM, and the release's quality against the true answers (computed here, outside
the kernel, by the benchmark as data owner): RMSE over the 215,852 answers and the share of 95% intervals that
cover the truth. Each case runs in its own process: ``python benchmarks/bench_census.py [CASE...]``;
``--plot RESULTS.jsonl OUT.png`` draws the release cases' stages (docs/figures/census.png).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main
from ektelo_ng.operators import census
from ektelo_ng.operators.selection.hdmm import hdmm

import ektelo_ng as ek
from ektelo_ng.census_persons import write_persons
from ektelo_ng.census_release import release_sf1

FOLDER = Path(os.environ.get("EKTELO_BENCH_DIR", "/tmp/ektelo-bench"))
SIGMA = 4.22468
PAPER = {("sf1", "laplace"): 7.30, ("sf1+", "laplace"): 10.23, ("sf1", "gaussian"): 9.80, ("sf1+", "gaussian"): 10.90}


def select(name: str, noise: str) -> dict:
    workload = census.SF1Plus() if name == "sf1+" else census.SF1()
    start = time.perf_counter()
    strategy = hdmm(workload.matrix, noise=noise, seed=0)
    seconds = time.perf_counter() - start
    rmse = strategy.rmse() * (SIGMA if noise == "gaussian" else 1.0)
    paper = PAPER[name, noise]
    return {"workload": name, "noise": noise, "select_seconds": round(seconds, 3), "rmse": round(rmse, 4),
            "paper_rmse": paper, "ratio": round(rmse / paper, 4)}


def persons(rows: int) -> Path:
    path = FOLDER / f"persons_{rows}"
    if not path.exists():
        partial = FOLDER / f"persons_{rows}.partial"
        if partial.exists():
            for part in partial.glob("*"):
                part.unlink()
        write_persons(partial, rows, seed=rows % 1000, progress=False)
        partial.rename(path)
    return path


def _jvm_peak_bytes() -> int:
    """The largest peak resident memory (VmHWM) among this process's java descendants (Spark's driver JVM)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    peak, todo = 0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if name == "java":
            peak = max(peak, next(int(line.split()[1]) * 1024 for line in status.splitlines()
                                  if line.startswith("VmHWM")))  # fmt: skip
    return peak


def _truth(workload: census.CensusWorkload, table: Path) -> np.ndarray:
    """The exact answers, counted by DuckDB straight from the files (the benchmark is the data owner here)."""
    import duckdb

    names = workload.domain.names
    strides = np.cumprod((1,) + workload.domain.sizes[:0:-1])[::-1]
    flat = " + ".join(f'"{n}"::BIGINT * {int(s)}' for n, s in zip(names, strides))
    rows = duckdb.sql(f"SELECT {flat} AS cell, count(*) AS n FROM read_parquet('{table}/*.parquet') GROUP BY 1")
    found = rows.fetchnumpy()
    x = np.zeros(workload.domain.size)
    x[found["cell"]] = found["n"]
    return workload.matrix @ x


#: Spark reads the 10^8-row table (24 files, 288 MB) as 3 splits of 128 MB by default, too few for two cores to
#: share evenly; 16 MB splits give 24 tasks, and 8 shuffle partitions fit 1.7 million groups.
SPARK_CONF = {"spark.sql.files.maxPartitionBytes": "16m", "spark.sql.shuffle.partitions": "8"}


def _spark(master: str, tuned: bool):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("bench_census")
    for key, value in (SPARK_CONF if tuned else {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def release(rows: int, backend: str, master: str | None = None, tuned: bool = True) -> dict:
    table = persons(rows)
    engine = {"spark": _spark(master, tuned)} if master else {}
    done = release_sf1(str(table), ek.PureDP(1), plus=True, backend=backend, out=FOLDER / "release.parquet",
                       **engine)  # fmt: skip
    jvm = _jvm_peak_bytes() if backend == "spark" else 0
    truth = _truth(done.workload, table)
    columns = done.columns
    covered = np.mean((columns["lower"] <= truth) & (truth <= columns["upper"]))
    return {"rows": rows, "backend": backend + (f" {master}" + ("" if tuned else " default splits") if master else ""),
            "stages": {s.name: round(s.seconds, 2) for s in done.stages},
            "release_seconds": round(sum(s.seconds for s in done.stages), 2),
            "peak_memory_gib": round(max(s.peak_bytes for s in done.stages) / 2**30, 2),
            "jvm_peak_memory_gib": round(jvm / 2**30, 2) if jvm else None,
            "rmse": round(float(np.sqrt(np.mean((columns["answer"] - truth) ** 2))), 3),
            "expected_rmse": round(done.expected_rmse, 3), "coverage_95": round(float(covered), 4)}  # fmt: skip


CASES = {
    **{f"select-{w}-{n}": (lambda w=w, n=n: select(w, n)) for w in ("sf1", "sf1+") for n in ("laplace", "gaussian")},
    "release-1e7-duckdb": lambda: release(10**7, "duckdb"),
    "release-1e8-duckdb": lambda: release(10**8, "duckdb"),
    "release-1e7-spark-local2": lambda: release(10**7, "spark", "local[2]"),
    "release-1e8-spark-local1": lambda: release(10**8, "spark", "local[1]"),
    "release-1e8-spark-local2": lambda: release(10**8, "spark", "local[2]"),
    "release-1e8-spark-local1-default-splits": lambda: release(10**8, "spark", "local[1]", tuned=False),
    "release-1e8-spark-local2-default-splits": lambda: release(10**8, "spark", "local[2]", tuned=False),
}

STAGES = ("open", "vectorize", "measure", "reconstruct", "error bars", "write", "select")


def plot(results: str, out: str) -> None:
    """Stacked seconds per stage for each release case of ``results`` (this script's JSON lines), to ``out``."""
    import json

    from ektelo_ng.figures import pyplot

    runs = [r for r in map(json.loads, Path(results).read_text().splitlines()) if "stages" in r]
    plt = pyplot("--plot")
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(runs) + 1.2))
    names = [f"{r['rows']:.0e} rows, {r['backend']}".replace("e+0", "e") for r in runs]
    left = np.zeros(len(runs))
    for stage in STAGES:
        seconds = np.array([r["stages"].get(stage, 0.0) for r in runs])
        ax.barh(names, seconds, left=left, label=stage)
        left += seconds
    for y, (total, r) in enumerate(zip(left, runs)):
        ax.text(total + 0.5, y, f"{total:.0f} s, {r['peak_memory_gib']:.1f} GiB", va="center", fontsize=8)
    ax.set_xlabel("seconds (2 cores)")
    ax.set_title("SF1+ at epsilon 1: 215,852 answers with error bars, by stage")
    ax.invert_yaxis()
    ax.set_xlim(0, left.max() * 1.25)
    ax.legend(fontsize=8, ncols=3, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--plot"]:
        plot(sys.argv[2], sys.argv[3])
    else:
        main(CASES)
