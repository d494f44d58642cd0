"""Vectorizing a 10-million-row, 5-attribute table (target under 3 s), and the cost of validating it on load."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

from ektelo_ng.kernel.domain import Domain  # noqa: E402
from ektelo_ng.kernel.table import load_table  # noqa: E402

ROWS = 10_000_000
SIZES = {"a": 10, "b": 20, "c": 30, "d": 40, "e": 50}


def _columns():
    rng = np.random.default_rng(0)
    return {name: rng.integers(0, size, ROWS) for name, size in SIZES.items()}


def vectorize_10M_rows_5_attributes() -> dict:
    table = load_table(_columns(), Domain.from_dict(SIZES))
    start = time.perf_counter()
    histogram = table.histogram(range(5))
    seconds = time.perf_counter() - start
    return {"rows": ROWS, "cells": int(histogram.size), "histogram_seconds": round(seconds, 3),
            "rows_per_second": round(ROWS / seconds)}


def load_and_validate_10M_rows() -> dict:
    columns = _columns()
    start = time.perf_counter()
    load_table(columns, Domain.from_dict(SIZES))
    return {"rows": ROWS, "load_seconds": round(time.perf_counter() - start, 3)}


if __name__ == "__main__":
    main({f.__name__: f for f in [vectorize_10M_rows_5_attributes, load_and_validate_10M_rows]})
