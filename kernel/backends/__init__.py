"""Table backends run by a query engine, DuckDB (``duckdb``) or Spark (``spark``), optional extras imported when a
backend is made. The engine reads and validates the private rows; only count histograms come back."""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..domain import Domain


def require(module: str, extra: str):
    """Import an optional engine, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f'the {extra} backend needs {module}: pip install -e ".[{extra}]" in ektelo-ng') from None


def source_format(source) -> str | None:
    """'parquet' or 'csv' when ``source`` names files (a Path, a file name, a glob, a URI), None for a table name."""
    if not isinstance(source, (str, Path)):
        raise TypeError(f"a table source is a path or a table name, got {type(source).__name__}")
    text = str(source)
    suffixes = [s.lower() for s in Path(text).suffixes]
    files = ".parquet" in suffixes or isinstance(source, Path) or "://" in text or Path(text).is_dir()
    kind = "csv" if ".csv" in suffixes else "parquet" if files else None
    if kind is None:
        return None
    if "://" not in text and not any(c in text for c in "*?[") and not Path(text).exists():
        raise FileNotFoundError(f"table file {text} does not exist")
    return kind


def check_outside(domain: Domain, outside: Mapping[str, int]) -> None:
    """Refuse the table, naming the first attribute (domain order) with rows that are not a code of it."""
    for attribute in domain.attributes:
        if outside[attribute.name]:
            labels = f" or a label in {list(attribute.labels)}" if attribute.labels else ""
            raise ValueError(
                f"column {attribute.name!r}: {outside[attribute.name]} row(s) outside the domain "
                f"(missing, not an integer in 0..{attribute.size - 1}{labels})"
            )


def fill(shape: tuple[int, ...], rows: np.ndarray) -> np.ndarray:
    """The int64 histogram from engine rows (code, ..., code, count); () gives the 0-d total count."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(shape) + 1)
    if not shape:
        return np.array(rows[:, 0].sum(), dtype=np.int64)
    out = np.zeros(math.prod(shape), dtype=np.int64)
    out[np.ravel_multi_index(tuple(rows[:, :-1].T), shape)] = rows[:, -1]  # raises if the table changed
    return out.reshape(shape)
