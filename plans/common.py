"""What every plan needs: budget shares, the estimate from its measurements, the
record count (public or noisy), and parameter tables keyed by the signal strength eps * N (MWEM*, AHP*).

Every plan in the catalog is ``plan(source, workload, budget, *, shape=None, **params) -> Estimate``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..operators.budget import share
from ..operators.client import Handle
from ..operators.matrix import Matrix
from ..operators import measure
from ..operators.measurement import Measurement
from ..operators.estimate import VectorEstimate
from ..operators.inference import least_squares

def solved(measurements: Sequence[Measurement], size: int, workload: Matrix | None, *, chosen: str = "",
           reused: Sequence[Measurement] = ()) -> VectorEstimate:
    """The least-squares estimate of the ``size`` cells from ``measurements``, with their error bars. A
    data-dependent plan names what it ``chosen`` privately before measuring (its intervals then bound the bias of
    that choice), and passes the ``reused`` measurements that made the choice and are also in the estimate (its
    intervals are then withheld: ``VectorEstimate``)."""
    measurements = list(measurements)
    if not chosen:
        note = "least squares: unbiased for the queries the measurements determine"
    elif reused:
        note = (f"least squares over {chosen}, chosen privately; the noisy counts that chose it are also in the "
                "estimate, so no interval holds: intervals withheld (method='noise' for the noise's alone)")
    else:
        note = (f"least squares over {chosen}, chosen privately: intervals add a bound on the bias of spreading "
                "counts evenly within it, or are withheld where none holds")
    return VectorEstimate(least_squares(measurements, size=size), measurements, workload=workload, note=note,
                          chosen=chosen, reused=bool(reused))


def post_processed(measurements: Sequence[Measurement], size: int, workload: Matrix | None,
                   step: Callable[[np.ndarray], np.ndarray], *, chosen: str, note: str) -> VectorEstimate:
    """The least-squares estimate after a non-linear ``step`` that a DPBench engine takes (clipping, truncation):
    not least squares any more, so without error bars; ``note`` says which step."""
    x = step(least_squares(measurements, size=size))
    return VectorEstimate(x, measurements, workload=workload, error_bars=False, note=note, chosen=chosen)


def split_budget(epsilon: Fraction, part: float | Fraction | str, name: str) -> tuple[Fraction, Fraction]:
    """(part * epsilon, (1 - part) * epsilon), exactly; ``part`` is a share, strictly between 0 and 1."""
    fraction = share(part, name)
    return fraction * epsilon, (1 - fraction) * epsilon


@dataclass(frozen=True)
class RecordCount:
    """The record count a plan works with and the budget it leaves.

    ``value`` is the public N, or the noisy total floored at 1; ``measurements`` holds the noisy
    total (empty when N is public), for the plan's final inference.
    """

    value: float
    remaining: Fraction
    measurements: tuple[Measurement, ...]


def records_or_noisy_total(
    vector: Handle, epsilon: Fraction, records: float | None, total_share: float | Fraction | str
) -> RecordCount:
    """Use a public record count, or buy a noisy total with ``total_share`` of ``epsilon``."""
    if records is not None:
        if not records > 0:
            raise ValueError(f"records (the public record count) must be positive, got {records!r}")
        return RecordCount(float(records), epsilon, ())
    spent, remaining = split_budget(epsilon, total_share, "total_share")
    total = measure.noisy_count(vector, spent)
    return RecordCount(max(float(total.answers[0]), 1.0), remaining, (total,))


def signal_table(table: Sequence[tuple[float, Any]], name: str, check: Callable[[Any], object]) -> tuple:
    """``table`` as a tuple of (lowest signal, value) rows after checking that the signals start at
    0 and increase and that ``check(value)`` accepts every value (it raises ValueError if not)."""
    try:
        rows = tuple((float(low), value) for low, value in table)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be (lowest signal eps * N, value) rows, got {table!r}") from None
    lows = [low for low, _ in rows]
    if not rows or lows[0] != 0 or any(not b > a for a, b in zip(lows, lows[1:])):
        raise ValueError(f"{name} must list signals eps * N increasing from 0, got {lows}")
    for _, value in rows:
        check(value)
    return rows


def by_signal(rows: tuple, signal: float):
    """A checked ``signal_table``'s value at ``signal`` as DPBench reads its tuned tables (``numpy.interp``): linear
    between the two rows around it, the last row's beyond it; a value that is a tuple, component by component."""
    lows = [low for low, _ in rows]
    values = np.array([value for _, value in rows], dtype=float)
    if values.ndim == 1:
        return float(np.interp(signal, lows, values))
    return tuple(float(np.interp(signal, lows, column)) for column in values.T)
