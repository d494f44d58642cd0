"""The release of linear answers: a power-of-two grid, exact integer noise on it, and the scale the charge covers.

Answers y (floats within the bounds of ``Released``) are rounded to integer codes rint(y / g), discrete Laplace or
Gaussian noise of t grid units is added in int64, and (code + noise) g is released: a deterministic function of
integers whose law is the discrete mechanism's (docs/privacy/noise.md). A row whose answer is not an exact
multiple of g may round differently on neighbours, by one step at most, so those rows add g each to the L1
sensitivity (g sqrt(rows) to the L2 one). The grid is the power of two that puts the noise scale between 2^45 and
2^46 steps: that slack is then at most rows / (2^45 epsilon) of the sensitivity, under 1% for 10^5 rounded rows at
epsilon = 1e-6 and 300 at 1e-9, and no step is finer than peak / 2^61, so no code overflows
(docs/privacy/arithmetic.md#release-grid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from ..limits import Cost
from ..matrix import Released
from ..noise import NoiseSource, discrete_gaussian, discrete_laplace, supported_scale
from ..privacy import PureDP, ZCDP

Unit = type[PureDP] | type[ZCDP]
Noise = Literal["laplace", "gaussian"]

GRID_UNITS = 2**45
"""The noise scale lies between GRID_UNITS and twice it, in grid steps (the samplers reach 2^46)."""
CODE_LIMIT = 2.0**61
"""Codes stay below this, and noise below 2^62 (noise.md), so their int64 sum cannot overflow."""
ANSWER_STEPS = 1 << 9
"""The work of releasing one answer: its code, its noise, its float and its share of the reply's text (80 to 250 ns
measured, Laplace or Gaussian, seeded or secure: a 2^25-row measurement of one cell took 6.4 s counted as 2^25 steps)."""
ANSWER_BYTES = 64
"""What one answer holds from its computation to the reply: its value, code, noise and text."""
FINEST = -1064
"""The finest grid is 2^-1064: a scale the samplers support has 11 significant bits from 2^-10 up, so on it the
scale units x grid is exact, and the noise drawn (scale / grid units) is the noise charged. On 2^-1074, 1.43
units rounded to 1."""


@dataclass(frozen=True)
class Prepared:
    """A measurement ready to release: noise kind and scale (in answer units), grid step, charge."""

    noise: Noise
    scale: float
    grid: float
    cost: Fraction

    def release(self, values: np.ndarray, source: NoiseSource) -> np.ndarray:
        codes = np.rint(np.asarray(values, dtype=np.float64) / self.grid).astype(np.int64)  # below 2^61: _grid
        sample = discrete_laplace if self.noise == "laplace" else discrete_gaussian
        codes += sample(source, self.scale / self.grid, codes.size)
        return codes * self.grid


def cost(answers: int) -> Cost:
    """Releasing ``answers`` answers, which runs after the charge and cannot be stopped: counted before it all."""
    return Cost(ANSWER_STEPS * answers, ANSWER_BYTES * answers)


def release_many(prepared: list[Prepared], values: list[np.ndarray], source: NoiseSource) -> list[np.ndarray]:
    """``prepared[i].release(values[i], source)`` for every i, one draw per noise law (independent either way)."""
    out: list[np.ndarray | None] = [None] * len(values)
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(prepared):
        groups.setdefault((p.noise, p.scale, p.grid), []).append(i)
    for members in groups.values():
        joined = np.concatenate([np.asarray(values[i]).ravel() for i in members])
        released = prepared[members[0]].release(joined, source)
        bounds = np.cumsum([0] + [np.size(values[i]) for i in members])
        for i, start, stop in zip(members, bounds[:-1], bounds[1:]):
            out[i] = released[start:stop]
    return out


def laplace(released: Released, epsilon: Fraction, unit: Unit) -> Prepared:
    """Laplace noise of scale >= (sensitivity + grid slack) / eps; charge eps (eps^2 / 2 under zCDP)."""

    def scale(grid: float) -> Fraction:
        return (Fraction(released.sensitivity) + Fraction(grid) * _rows(released, grid)) / epsilon

    grid, units = _grid(released, float(scale(0.0)), lambda g: scale(g) / Fraction(g), "laplace")
    return Prepared("laplace", units * grid, grid, epsilon if unit is PureDP else epsilon * epsilon / 2)


def gaussian(released: Released, rho: Fraction | None, sigma: float | None, unit: Unit) -> Prepared:
    """Gaussian noise for L2 sensitivity Delta (with its slack): sigma >= Delta / sqrt(2 rho), charge rho; or the
    given sigma (rounded up onto the samplers' lattice), charge Delta^2 / (2 sigma^2). zCDP sessions only."""
    if unit is not ZCDP:
        raise ValueError("Gaussian noise needs a zCDP session (a ZCDP budget); this session is pure DP")

    def delta(grid: float) -> Fraction:  # the L2 slack of `rows` steps is at most g ceil(sqrt(rows))
        rows = _rows(released, grid)
        return Fraction(released.sensitivity) + Fraction(grid) * (math.isqrt(rows - 1) + 1 if rows else 0)

    if rho is not None:
        first = released.sensitivity / math.sqrt(2 * float(rho))
        grid, units = _grid(released, first, lambda g: delta(g) ** 2 / (2 * rho * Fraction(g) ** 2), "gaussian", True)
        return Prepared("gaussian", units * grid, grid, rho)
    grid, units = _grid(released, sigma, lambda g: Fraction(sigma) / Fraction(g), "gaussian")
    return Prepared("gaussian", units * grid, grid, delta(grid) ** 2 / (2 * (Fraction(units) * Fraction(grid)) ** 2))


def _rows(released: Released, grid: float) -> int:
    """Rows whose rounding onto this grid may differ on neighbours: the inexact ones, or all that can change once
    the grid is coarser than 1 (exact integers are then rounded too)."""
    return released.nonzeros if grid > 1 else released.rounded


def _grid(released: Released, scale: float, units, noise: Noise, root: bool = False) -> tuple[float, float]:
    """(grid step, noise scale in grid steps): the step puts ``scale`` at 2^45 to 2^46 steps and no code past 2^61;
    ``units(g)`` is the exact scale in steps (its square if ``root``), rounded up onto the samplers' lattice,
    and the step doubles until that fits (refused, before any charge, if it never does)."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"the noise scale {scale:.3g} is not a positive finite number: choose another epsilon")
    floor = 2.0 ** max(math.ceil(math.log2(released.peak) - math.log2(CODE_LIMIT)), FINEST)
    grid = max(2.0 ** max(math.floor(math.log2(scale)) - int(math.log2(GRID_UNITS)), FINEST), floor)
    while grid < 2.0**1000:
        exact = units(grid)
        steps = math.sqrt(exact) if root else float(exact)
        while Fraction(steps) ** (2 if root else 1) < exact:
            steps = math.nextafter(steps, math.inf)
        if steps <= 2.0**46:
            return grid, supported_scale(noise, steps)
        grid *= 2
    raise ValueError(
        f"{released.rounded or released.nonzeros} answers may round differently on neighbouring tables, "
        "each by one grid step, and at this budget those steps alone need more than the 2^46 steps the "
        "kernel's samplers draw: use a larger epsilon or rho (docs/privacy/arithmetic.md#release-grid)"
    )
