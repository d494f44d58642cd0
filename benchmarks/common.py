"""Shared benchmark plumbing: run each case in a fresh process and print one JSON object per case."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def true_marginal(columns: Mapping[str, np.ndarray], sizes: Mapping[str, int], names: Sequence[str]) -> np.ndarray:
    """The exact count tensor of the records ``columns`` over the attributes ``names`` (at least one; axes in that order)."""
    shape = [sizes[a] for a in names]
    flat = np.ravel_multi_index([columns[a] for a in names], shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape)


def timed(fn: Callable[[], dict]) -> dict:
    start = time.perf_counter()
    result = fn()
    return {"seconds": round(time.perf_counter() - start, 4), **result}


def main(cases: dict[str, Callable[[], dict]]) -> None:
    """With ``--case NAME`` run one case here; otherwise run every case in its own subprocess."""
    args = sys.argv[1:]
    if args[:1] == ["--case"]:
        name = args[1]
        record = {"name": name, **timed(cases[name])}
        record["peak_memory_mb"] = round(peak_memory_mb(), 1)
        print(json.dumps(record), flush=True)
        return
    selected = args or list(cases)
    unknown = sorted(set(selected) - set(cases))
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; cases: {sorted(cases)}")
    for name in selected:
        out = subprocess.run([sys.executable, sys.argv[0], "--case", name], capture_output=True, text=True)
        if out.returncode != 0:
            print(json.dumps({"name": name, "error": out.stderr.strip().splitlines()[-1:]}), flush=True)
        else:
            print(out.stdout.strip(), flush=True)
