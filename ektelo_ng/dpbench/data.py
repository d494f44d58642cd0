"""The DPBench data: the 28 named shapes (read from a directory the user names) and the built-in
synthetic ones, sampled to a chosen scale and coarsened to a chosen domain.

DPBench treats each file as a *shape*: it normalises the counts to a distribution, draws
``scale`` records from it (multinomial, with a data seed) and sums contiguous blocks of cells
down to the domain under test. The files themselves are never part of this project (see the
NOTICE.md that comes with them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ektelo_ng.dpbench import synthetic


#: The resolution of every DPBench shape, by dimensionality.
FULL_SHAPE = {1: (4096,), 2: (256, 256)}


@dataclass(frozen=True)
class Dataset:
    """A named shape: its dimensionality, where it comes from, and the names it is also known by."""

    name: str
    dimensions: int
    file: str | None = None  # relative to the data directory; None for a built-in synthetic shape
    aliases: tuple[str, ...] = ()
    description: str = ""

    @property
    def builtin(self) -> bool:
        return self.file is None


_FILES = [  # DPBench name, file, aliases (as in the data's NOTICE.md)
    ("HEPTH", "1D/HEPTH.n4096.npy", ()),
    ("ADULT", "1D/ADULTFRANK.n4096.npy", ()),
    ("INCOME", "1D/INCOME.n4096.npy", ()),
    ("MEDCOST", "1D/MEDCOST.n4096.npy", ()),
    ("NETTRACE", "1D/NETTRACE.n4096.npy", ()),
    ("PATENT", "1D/PATENT.n4096.npy", ()),
    ("SEARCHLOGS", "1D/SEARCHLOGS.n4096.npy", ("SEARCH",)),
    ("BIDS-FJ", "1D/bids_j.npy", ()),
    ("BIDS-FM", "1D/bids_m.npy", ()),
    ("BIDS-ALL", "1D/bids.npy", ()),
    ("MDSALARY", "1D/GrossCompenMDSalary1.npy", ("MD-SAL",)),
    ("MDSALARY-FA", "1D/GrossCompenMDSalary2_filtered.npy", ("MD-SAL-FA",)),
    ("LC-REQ-F1", "1D/RejectStats_0_4096_no_outliers_filter_7_1.npy", ()),
    ("LC-REQ-F2", "1D/RejectStats_0_4096_no_outliers_filter_7_2.npy", ()),
    ("LC-REQ-ALL", "1D/RejectStats_0_4096_no_outliers.npy", ()),
    ("LC-DTIR-F1", "1D/RejectStats_4_4096_no_outliers_filter_7_1.npy", ()),
    ("LC-DTIR-F2", "1D/RejectStats_4_4096_no_outliers_filter_7_2.npy", ()),
    ("LC-DTIR-ALL", "1D/RejectStats_4_4096_no_outliers.npy", ()),
    ("SF-CABS-E", "2D/cabspottingE_256_256.npy", ()),
    ("SF-CABS-S", "2D/cabspottingS_256_256.npy", ()),
    ("GOWALLA", "2D/checkin_256_256.npy", ()),
    ("BEIJING-CABS-E", "2D/BeijingTaxiE_256_256.npy", ("BJ-CABS-E",)),
    ("BEIJING-CABS-S", "2D/BeijingTaxiS_256_256.npy", ("BJ-CABS-S",)),
    ("ADULT-2D", "2D/Adult_2D_256_256.npy", ()),
    ("MDSALARY-OVERT", "2D/MDSalary2D_256_256.npy", ("MD-SAL-2D",)),
    ("LOAN-FUNDED-INCOME", "2D/Loan_2D_256_256.npy", ("LC-2D",)),
    ("STROKE", "2D/Stroke_2D_256_256.npy", ()),
    ("TWITTER", "2D/twitter_256_256.npy", ()),
]

DATASETS: dict[str, Dataset] = {
    **{name: Dataset(name, int(file[0]), file, aliases) for name, file, aliases in _FILES},
    **{name: Dataset(name, dims, None, (), text) for name, (dims, _, text) in synthetic.SHAPES.items()},
}
_BY_ALIAS = {key.upper(): d.name for d in DATASETS.values() for key in (d.name, *d.aliases)}


def dataset(name: str) -> Dataset:
    """The dataset called ``name`` or one of its aliases (any case)."""
    try:
        return DATASETS[_BY_ALIAS[name.strip().upper()]]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


def datasets(dimensions: int | None = None, builtin: bool | None = None) -> list[str]:
    """Names of the datasets with the given dimensionality and origin (``None``: any)."""
    return [
        d.name for d in DATASETS.values()
        if (dimensions is None or d.dimensions == dimensions) and (builtin is None or d.builtin == builtin)
    ]


def load_shape(name: str, data_dir: str | Path | None = None) -> np.ndarray:
    """The shape of ``name`` as a float64 distribution (sums to 1): 4096 cells in 1-D, 256 x 256 in 2-D."""
    info = dataset(name)
    if info.builtin:
        return synthetic.shape(info.name)
    if data_dir is None:
        raise ValueError(f"{info.name} is a DPBench data file: name the directory holding it with --data-dir")
    path = Path(data_dir) / info.file
    if not path.is_file():
        raise FileNotFoundError(f"{info.name}: no file {path} (expected the DPBench layout {info.file} under --data-dir)")
    counts = np.load(path, allow_pickle=False).astype(np.float64)
    if counts.ndim != info.dimensions or not np.all(np.isfinite(counts)) or np.any(counts < 0) or counts.sum() <= 0:
        raise ValueError(f"{path} is not a {info.dimensions}-D array of non-negative counts")
    return counts / counts.sum()


def sample(shape: np.ndarray, scale: int, seed: int | np.random.Generator | None) -> np.ndarray:
    """``scale`` records drawn from the distribution ``shape`` (multinomial): int64 counts of the same shape."""
    scale = int(scale)
    if scale < 1:
        raise ValueError(f"scale must be a positive number of records, got {scale}")
    p = np.asarray(shape, dtype=np.float64)
    counts = np.random.default_rng(seed).multinomial(scale, (p / p.sum()).ravel())
    return counts.reshape(p.shape)


def coarsen(histogram: np.ndarray, domain: int | Sequence[int]) -> np.ndarray:
    """Sum contiguous blocks of cells so that the histogram has shape ``domain`` (each side must divide)."""
    histogram = np.asarray(histogram)
    target = (int(domain),) * histogram.ndim if np.isscalar(domain) else tuple(int(s) for s in domain)
    if len(target) != histogram.ndim:
        raise ValueError(f"domain {target} has {len(target)} sides for a {histogram.ndim}-D histogram")
    for side, size in zip(target, histogram.shape):
        if side < 1 or size % side:
            raise ValueError(
                f"domain {target} does not divide the shape {histogram.shape}: each side must divide "
                f"{histogram.shape} (e.g. a power of two up to {size})"
            )
    blocks = [x for side, size in zip(target, histogram.shape) for x in (side, size // side)]
    return histogram.reshape(blocks).sum(axis=tuple(range(1, 2 * len(target), 2)))


def domain_shape(dimensions: int, domain: int | Sequence[int]) -> tuple[int, ...]:
    """A domain given as one side (``256`` means 256 x 256 in 2-D) or as every side."""
    sides = (int(domain),) * dimensions if np.isscalar(domain) else tuple(int(s) for s in domain)
    if len(sides) != dimensions:
        raise ValueError(f"domain {sides} does not fit {dimensions}-D data")
    return sides


def records(histogram: np.ndarray) -> dict[str, np.ndarray]:
    """The records a histogram counts, as a table: one integer column per axis (``a0``, ``a1``, ...)."""
    cells = np.repeat(np.arange(histogram.size), np.asarray(histogram, dtype=np.int64).ravel())
    index = np.unravel_index(cells, histogram.shape)
    return {f"a{axis}": codes for axis, codes in enumerate(index)}


__all__ = ["DATASETS", "FULL_SHAPE", "Dataset", "coarsen", "dataset", "datasets", "domain_shape", "load_shape", "records", "sample"]
