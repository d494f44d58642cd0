"""The experiment grid of a DPBench replay: which algorithms, datasets, scales, domains, budgets
and trials, checked up front and expanded into runs.

A *setting* is one data sample (dataset, scale, domain, trial): every algorithm and epsilon of the
grid runs on the same sample, so algorithms are compared on identical data, as in DPBench. Seeds
are derived from the grid's seed and the run's coordinates (never from Python's salted ``hash``),
so a run's data and noise are the same whatever order or process it runs in.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ektelo_ng.dpbench import data, workloads
from ektelo_ng.plans import info

#: Settings of the grid that ``--quick`` runs: built-in data, small enough for a minute or two.
QUICK = dict(
    algorithms=("Identity", "Uniform", "HB", "Privelet", "GreedyH", "MWEM", "MWEM*", "AHP", "DAWA", "DPCube", "PHP",
                "EFPA"),
    datasets=("SYN-STEPS", "SYN-SPIKES", "SYN-BUMPS", "SYN-INCOME"),
    scales=(1_000, 10_000, 100_000, 1_000_000, 10_000_000),
    domains=(1024,),
    epsilons=("0.1",),
    trials=3,
)


def _stable(*parts) -> int:
    """A 32-bit number from the parts' text, the same in every process and Python version."""
    return zlib.crc32(repr(parts).encode())


@dataclass(frozen=True)
class Setting:
    """One data sample: the dataset drawn at ``scale`` records, coarsened to ``domain``, trial ``trial``."""

    dataset: str
    scale: int
    domain: tuple[int, ...]
    trial: int
    workload: str
    seed: int

    @property
    def data_seed(self) -> int:
        return _stable("data", self.seed, self.dataset, self.scale, self.trial)

    @property
    def workload_seed(self) -> int:
        return _stable("workload", self.seed, self.workload, self.domain)

    def noise_seed(self, algorithm: str, epsilon: str) -> int:
        return _stable("noise", self.seed, self.dataset, self.scale, self.domain, self.trial, algorithm, epsilon)

    def run_key(self, algorithm: str, epsilon: str) -> tuple:
        """What identifies a run in the results file."""
        return (algorithm, self.dataset, str(self.scale), domain_text(self.domain), epsilon, str(self.trial),
                self.workload)


def domain_text(domain: Sequence[int]) -> str:
    """``4096`` or ``256x256``: how a domain is written in results and on the command line."""
    return "x".join(str(int(s)) for s in domain)


def parse_domain(text: str | int) -> tuple[int, ...] | int:
    """``"256"`` (one side, any dimensionality) or ``"32x64"`` (every side)."""
    parts = str(text).lower().split("x")
    try:
        sides = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"a domain is a whole number or sides joined by 'x' (e.g. 256x256), got {text!r}") from None
    if any(s < 1 for s in sides):
        raise ValueError(f"domain sides must be positive, got {text!r}")
    return sides[0] if len(sides) == 1 else sides


def epsilon_text(value) -> str:
    """An epsilon as an exact, canonical string (``0.1`` stays ``0.1``, ``1/10`` becomes ``1/10``)."""
    text = str(value).strip()
    try:
        amount = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"epsilon must be a positive number, got {value!r}") from None
    if not amount > 0:
        raise ValueError(f"epsilon must be a positive number, got {value!r}")
    return text


@dataclass(frozen=True)
class Grid:
    """Algorithms x datasets x scales x domains x epsilons x trials, validated when built."""

    algorithms: tuple[str, ...]
    datasets: tuple[str, ...]
    scales: tuple[int, ...]
    domains: tuple[tuple[int, ...] | int, ...] = ()
    epsilons: tuple[str, ...] = ("0.1",)
    trials: int = 5
    workload: str | None = None  # None: DPBench's default per dimensionality
    seed: int = 0
    public_scale: bool = False
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "datasets", tuple(data.dataset(d).name for d in self.datasets))
        unknown = [a for a in self.algorithms if a not in info]
        if unknown:
            raise ValueError(f"unknown algorithm(s) {unknown}; known: {', '.join(info)}")
        if int(self.trials) < 1:
            raise ValueError(f"trials must be a positive number, got {self.trials}")
        for scale in self.scales:
            if not float(scale) >= 1 or float(scale) != int(float(scale)):
                raise ValueError(f"scales are whole numbers of records, got {scale!r}")
        object.__setattr__(self, "scales", tuple(int(float(s)) for s in self.scales))
        object.__setattr__(self, "epsilons", tuple(epsilon_text(e) for e in self.epsilons))
        if self.workload is not None and self.workload not in workloads.WORKLOADS:
            raise ValueError(f"unknown workload {self.workload!r}; choose one of {list(workloads.WORKLOADS)}")
        for name in self.datasets:
            dims = data.dataset(name).dimensions
            shapes = self.domains_for(name)
            if not shapes:
                raise ValueError(f"no domain of the grid fits {name} ({dims}-D): give one side (e.g. 256) or {dims} sides")
            for shape in shapes:
                data.coarsen(np.zeros(data.FULL_SHAPE[dims]), shape)  # raises if it does not divide
        for name in self.algorithms:
            if not any(data.dataset(d).dimensions in info[name].dimensions for d in self.datasets):
                raise ValueError(f"{name} runs on {info[name].dimensions}-D data; no dataset of the grid fits it")

    def algorithms_for(self, dataset: str) -> list[str]:
        """The grid's algorithms that support the dataset's dimensionality."""
        dims = data.dataset(dataset).dimensions
        return [a for a in self.algorithms if dims in info[a].dimensions]

    def domains_for(self, dataset: str) -> list[tuple[int, ...]]:
        """The grid's domains as shapes for the dataset: one side fits any data, several sides their own;
        no domains means the data's own resolution (4096 cells in 1-D, 256 x 256 in 2-D)."""
        dims = data.dataset(dataset).dimensions
        if not self.domains:
            return [data.FULL_SHAPE[dims]]
        return [data.domain_shape(dims, d) for d in self.domains if isinstance(d, int) or len(d) == dims]

    def settings(self) -> list[Setting]:
        """Every data sample of the grid."""
        out = []
        for name in self.datasets:
            workload = self.workload or workloads.default_workload(data.dataset(name).dimensions)
            for scale in self.scales:
                for shape in self.domains_for(name):
                    out.extend(Setting(name, scale, shape, t, workload, self.seed) for t in range(int(self.trials)))
        return out

    def size(self) -> int:
        """The number of runs in the grid."""
        return sum(len(self.algorithms_for(s.dataset)) * len(self.epsilons) for s in self.settings())
