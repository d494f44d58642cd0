"""What every plan needs: the data vector from a source handle, the budget as an epsilon, one measure-and-solve,
the record count (public or noisy), and parameter tables keyed by the signal strength eps * N (MWEM*, AHP*)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from operators.client import Handle
from kernel.matrix import Matrix
from kernel.privacy import PureDP
from operators import measure
from operators.measurement import Measurement
from operators.inference import least_squares

BudgetLike = PureDP | float | int | Fraction | str


def epsilon_of(budget: BudgetLike) -> Fraction:
    """A plan's budget as an exact epsilon (a PureDP, or a number read exactly as PureDP reads it)."""
    if isinstance(budget, PureDP):
        return budget.epsilon
    return PureDP(budget).epsilon


def data_vector(source: Handle, shape: Sequence[int] | None = None) -> tuple[Handle, tuple[int, ...]]:
    """The vector handle to measure and its shape: vectorize a table handle, or take a vector handle as it is."""
    if source.kind == "table":
        dims = tuple(source.domain.sizes)
        vector = source.vectorize()
    else:
        vector, dims = source, (source.size,)
    if shape is not None:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != vector.size:
            raise ValueError(f"shape {shape} has {math.prod(shape)} cells but the vector has {vector.size}")
        dims = shape
    return vector, dims


def measure_and_solve(vector: Handle, strategy: Matrix, epsilon: BudgetLike) -> np.ndarray:
    """Laplace-measure ``strategy`` with the whole budget and return the least-squares estimate."""
    return least_squares([measure.laplace(vector, strategy, epsilon_of(epsilon))], size=vector.size)


def split_budget(epsilon: Fraction, share: float | Fraction | str, name: str) -> tuple[Fraction, Fraction]:
    """(share * epsilon, (1 - share) * epsilon), exactly; ``share`` must lie strictly between 0 and 1."""
    try:
        part = epsilon_of(share)
    except ValueError:
        part = None
    if part is None or not 0 < part < 1:
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {share!r}")
    return part * epsilon, (1 - part) * epsilon


@dataclass(frozen=True)
class ScaleEstimate:
    """The record count a plan works with and the budget it leaves.

    ``value`` is the public N, or the noisy total floored at 1; ``measurements`` holds the noisy
    total (empty when N is public), for the plan's final inference.
    """

    value: float
    remaining: Fraction
    measurements: tuple[Measurement, ...]


def scale_or_noisy_total(
    vector: Handle, budget: BudgetLike, scale: float | None, total_share: float | Fraction | str
) -> ScaleEstimate:
    """Use a public record count, or buy a noisy total with ``total_share`` of the budget."""
    epsilon = epsilon_of(budget)
    if scale is not None:
        if not scale > 0:
            raise ValueError(f"a public scale must be a positive record count, got {scale!r}")
        return ScaleEstimate(float(scale), epsilon, ())
    spent, remaining = split_budget(epsilon, total_share, "total_share")
    total = measure.noisy_count(vector, spent)
    return ScaleEstimate(max(float(total.answers[0]), 1.0), remaining, (total,))


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
    """The value of the last row of a checked ``signal_table`` whose lowest signal is <= ``signal``."""
    return [value for low, value in rows if low <= signal][-1]
