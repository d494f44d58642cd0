"""Measured evidence for the advice: how each DPBench plan's error compared with Identity's in the replay.

Data-independent strategies have exact error formulas, data-dependent plans (DAWA, AHP, MWEM, ...) have
none: their error depends on the data. What the advice can say about them is what the project's DPBench
replay measured, shipped as ``dpbench_evidence.json`` (written by ``benchmarks/build_evidence.py``, whose
header names the replays): per setting and dataset, each algorithm's L2 error relative to Identity's.
DPBench found that the scale N and epsilon act on these plans' relative error almost only through their
product (scale-epsilon exchangeability), so the evidence is looked up by N x epsilon; the replays behind
the shipped table ran epsilon 0.1 only, so N x epsilon 1e2 stands for N = 1,000 at epsilon 0.1.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from numbers import Integral, Real

TABLE = "dpbench_evidence.json"
#: Plans that choose nothing from the data but whose error is a bias that depends on it: they are compared
#: with the data-dependent plans, not offered as the data-independent baseline.
BIASED = frozenset({"Uniform"})


@dataclass(frozen=True)
class Evidence:
    """One algorithm at the replay setting nearest to the one asked about: its error over Identity's.

    ``typical`` is the geometric mean over the datasets of the ratio, ``low`` and ``high`` its extremes,
    ``by_dataset`` the ratios in the order of ``datasets``; < 1 means smaller errors than Identity's.
    ``cells`` and ``n_eps`` are what was asked about; ``domain`` and ``n_eps_used`` the replay's nearest setting,
    whose numbers these are.
    """

    algorithm: str
    data_dependent: bool
    dims: int
    cells: int
    domain: tuple[int, ...]
    workload: str
    n_eps: float
    n_eps_used: float
    typical: float
    low: float
    high: float
    datasets: tuple[str, ...]
    by_dataset: tuple[float, ...]
    trials: int  # the fewest trials behind any one dataset's ratio
    shape: str | None


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped evidence table (read once)."""
    return json.loads(resources.files(__package__).joinpath(TABLE).read_text())


def shape_labels() -> tuple[str, ...]:
    """The shape labels the table gives its datasets (``skewed``, ``smooth``)."""
    return tuple(sorted({label for by_domain in table()["datasets"].values() for _, label in by_domain.values()}))


def is_data_dependent(algorithm: str) -> bool:
    """True for a plan of the table whose error depends on the data (those the advice may pick by name)."""
    return bool(table()["data_dependent"].get(algorithm)) or algorithm in BIASED


def evidence(dims: int, cells: int, n_eps: float, shape: str | None = None) -> list[Evidence]:
    """Every algorithm's evidence at the replay setting nearest to ``cells`` and ``n_eps`` in ``dims`` dimensions.

    One setting serves all algorithms, so that they compare like with like: the replay's domain nearest in
    log cells, then its N x epsilon nearest in log (ties go to the larger). With ``shape`` only datasets
    with that label at that domain count; none at all gives an empty list. Sorted by ``typical``.
    """
    known = sorted({s["dims"] for s in table()["settings"]})
    if dims not in known:
        raise ValueError(f"evidence exists only for {' and '.join(f'{d}-D' for d in known)} range workloads "
                         f"(the DPBench replay); got dims={dims!r}")
    if isinstance(cells, bool) or not isinstance(cells, Integral) or cells < 1:
        raise ValueError(f"cells must be a positive whole number of domain cells, got {cells!r}")
    if isinstance(n_eps, bool) or not (isinstance(n_eps, Real) and math.isfinite(n_eps) and n_eps > 0):
        raise ValueError(f"n_eps (records N times epsilon) must be a positive number, got {n_eps!r}")
    if shape is not None and shape not in shape_labels():
        raise ValueError(f"unknown shape label {shape!r}; the labels are {', '.join(shape_labels())}")
    labels = table()["datasets"]
    settings = [s for s in table()["settings"] if s["dims"] == dims and (
        shape is None or labels[s["dataset"]][_domain_text(s["domain"])][1] == shape)]
    if not settings:
        return []
    domain = _nearest({tuple(s["domain"]) for s in settings}, cells, math.prod)
    settings = [s for s in settings if tuple(s["domain"]) == domain]
    used = _nearest({s["n_eps"] for s in settings}, n_eps, float)
    ratios: dict[str, dict[str, list[tuple[float, int]]]] = defaultdict(lambda: defaultdict(list))
    for s in settings:
        if s["n_eps"] == used:
            for algorithm, (ratio, trials) in s["ratios"].items():
                ratios[algorithm][s["dataset"]].append((ratio, trials))  # several epsilons may share an N x eps
    rows = []
    for algorithm, by_dataset in ratios.items():
        names = tuple(sorted(by_dataset))
        values = tuple(_geomean([r for r, _ in by_dataset[d]]) for d in names)
        rows.append(Evidence(
            algorithm=algorithm, data_dependent=is_data_dependent(algorithm), dims=dims, cells=int(cells),
            domain=domain, workload=settings[0]["workload"], n_eps=float(n_eps), n_eps_used=used,
            typical=_geomean(values), low=min(values), high=max(values), datasets=names, by_dataset=values,
            trials=min(t for d in names for _, t in by_dataset[d]), shape=shape,
        ))
    return sorted(rows, key=lambda e: (e.typical, e.algorithm))


def sentence(rows: list[Evidence]) -> str:
    """One plain sentence comparing the best data-dependent plan of ``rows`` with the best data-independent one."""
    if not rows:
        raise ValueError("no evidence to put in a sentence (evidence() found no replay setting for the request)")
    best = {flag: min((r for r in rows if r.data_dependent == flag), key=lambda r: r.typical, default=None)
            for flag in (True, False)}
    lead = best[True] or best[False]
    sides = "x".join(f"{side:,}" for side in lead.domain)
    count = len(lead.datasets)
    datasets = f"{count} {lead.shape + ' ' if lead.shape else ''}dataset{'s' * (count > 1)}"
    nearest = [f"{lead.cells:,} cells"] * (math.prod(lead.domain) != lead.cells) + [
        f"N x epsilon {_power(lead.n_eps)}"] * (_power(lead.n_eps) != _power(lead.n_eps_used))
    asked = f"; the replay setting nearest to {' and '.join(nearest)}" if nearest else ""
    said = (f"At N x epsilon ~ {_power(lead.n_eps_used)} (DPBench replay: {lead.dims}-D {lead.workload} on {sides} "
            f"cells, {datasets}{asked}), {lead.algorithm}'s error is typically "
            f"{_x(lead.typical)}x{_spread(lead.low, lead.high)} of Identity's")
    other = best[False] if lead is best[True] else None
    if other is None:
        return said + "."
    factor = other.typical / lead.typical
    compared = f"{_x(factor)}x below" if factor >= 1 else f"{_x(1 / factor)}x above"
    per = [lead.by_dataset[i] / other.by_dataset[other.datasets.index(d)]
           for i, d in enumerate(lead.datasets) if d in other.datasets]
    detail = f"; per dataset {lead.algorithm}'s error is {_x(min(per))}-{_x(max(per))}x {other.algorithm}'s"
    return (f"{said}, {compared} the best data-independent plan {other.algorithm} "
            f"({_x(other.typical)}x{detail if len(per) > 1 else ''}).")


def _spread(low: float, high: float) -> str:
    """`` (low-highx)``, or nothing when one dataset gives both."""
    return f" ({_x(low)}-{_x(high)}x)" if low != high else ""


def _nearest(options: set, target: float, size: Callable[[object], float]) -> object:
    """The option whose size is nearest to ``target`` in log; a tie (to rounding) goes to the larger."""
    return min(options, key=lambda o: (round(abs(math.log10(size(o) / target)), 9), -size(o)))


def _domain_text(domain: list[int]) -> str:
    return "x".join(str(side) for side in domain)


def _geomean(values: Sequence[float]) -> float:
    return values[0] if len(values) == 1 else math.exp(sum(math.log(v) for v in values) / len(values))


def _power(value: float) -> str:
    """A number in powers of ten with at most two digits: ``1e2``, ``3e3``, ``2.5e3``."""
    exponent = math.floor(math.log10(value))
    mantissa = round(value / 10**exponent, 1)
    if mantissa >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:g}e{exponent}"


def _x(value: float) -> str:
    """A ratio for reading: two significant digits, whole numbers from 100 on."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2g}"
