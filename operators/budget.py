"""The client's one budget currency: ``PureDP(epsilon)``, ``ZCDP(rho)`` or ``ApproxDP(epsilon, delta)``.

Every place that takes a budget (``protect``, plans, strategies, selectors' error at a budget, advice) reads it
with :func:`as_budget`, which refuses a bare number: ``1.0`` would mean epsilon = 1 to one reader and pcost = 1
(rho = 1/2) to another. The one conversion rule:

- ``ApproxDP(epsilon, delta)`` is the zCDP budget ``rho`` that the kernel accounts, the largest rho whose
  rho-zCDP implies (epsilon, delta)-DP by the tight bound of Canonne, Kamath & Steinke (2020, Cor. 13;
  :func:`operators.privacy.zcdp_for_approx_dp`). It holds for whatever a zCDP session spends (discrete Gaussian,
  Laplace, exponential-mechanism charges together). The exact Gaussian rule (Balle & Wang 2018) gives more
  (pcost 0.0560 against 0.0487 at (1, 1e-6)) but holds only when every release is a continuous Gaussian, which
  neither the kernel's ledger nor its discrete samplers promise.
- A noise takes what it can serve of a budget (:func:`for_noise`): Laplace spends a pure epsilon (all of a
  ``PureDP``, or the epsilon with epsilon^2 / 2 = rho of a zCDP one); Gaussian spends a ``ZCDP`` (or an
  ``ApproxDP``'s rho) and cannot serve a ``PureDP``.

Shares (what part of a budget a stage spends) are fractions in (0, 1), read by :func:`share`, never budgets.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

from ..kernel.privacy import PureDP, ZCDP, to_fraction
from .measurement import NoiseKind
from .privacy import epsilon_within_zcdp, zcdp_for_approx_dp

WRITE_ONE = ("write ek.PureDP(epsilon) (pure DP, Laplace noise), ek.ZCDP(rho) (zCDP, Gaussian noise) or "
             "ek.ApproxDP(epsilon, delta) (converted once to the zCDP budget that implies it)")


@dataclass(frozen=True)
class ApproxDP:
    """An (epsilon, delta)-DP budget, spent as the zCDP budget that implies it (:meth:`zcdp`)."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        for name, value in (("epsilon", self.epsilon), ("delta", self.delta)):
            if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
                raise ValueError(f"ApproxDP {name} must be a number, got {type(value).__name__} {value!r}")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"ApproxDP epsilon must be positive and finite, got {self.epsilon!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"ApproxDP delta must lie strictly between 0 and 1, got {self.delta!r}")

    def zcdp(self) -> ZCDP:
        """The largest rho (never above the bound) whose rho-zCDP implies this budget (module docstring)."""
        return _zcdp_for(float(self.epsilon), float(self.delta))

    def split(self, shares) -> list[ZCDP]:
        """The rho this budget is spent as, in parts (``ZCDP.split``): what each stage of a plan may spend."""
        return self.zcdp().split(shares)

    def __str__(self) -> str:
        return f"(epsilon, delta) = ({self.epsilon:g}, {self.delta:g})"


@functools.lru_cache(maxsize=256)
def _zcdp_for(epsilon: float, delta: float) -> ZCDP:
    return zcdp_for_approx_dp(epsilon, delta)


Budget = Union[PureDP, ZCDP, ApproxDP]
"""Every budget a client may give."""


def as_budget(value: Any, name: str = "budget") -> Budget:
    """``value`` if it is a budget; anything else (a bare number, a pair) refused with what to write."""
    if isinstance(value, (PureDP, ZCDP, ApproxDP)):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        raise ValueError(f"{name} {value!r} is a bare pair: write ek.ApproxDP{value!r} for (epsilon, delta)")
    raise ValueError(f"{name} {value!r} is not a budget: a bare number means epsilon to one reader and pcost to "
                     f"another; {WRITE_ONE}")


def accounted(budget: Any) -> PureDP | ZCDP:
    """The budget as the kernel accounts it: a ``PureDP`` or ``ZCDP`` as given, an ``ApproxDP`` as its rho."""
    budget = as_budget(budget)
    return budget.zcdp() if isinstance(budget, ApproxDP) else budget


def for_noise(budget: Any, noise: NoiseKind) -> PureDP | ZCDP:
    """What ``noise`` spends of ``budget``: Laplace a pure epsilon, Gaussian a rho (module docstring)."""
    budget = accounted(budget)
    if noise == "laplace":
        return budget if isinstance(budget, PureDP) else PureDP(epsilon_within_zcdp(budget))
    if noise != "gaussian":
        raise ValueError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
    if not isinstance(budget, ZCDP):
        raise ValueError("Gaussian noise cannot satisfy pure epsilon-DP: give ek.ZCDP(rho) or "
                         "ek.ApproxDP(epsilon, delta) (a pure epsilon's zCDP is rho = epsilon^2 / 2)")
    return budget


def noise_of(budget: Any) -> NoiseKind:
    """The noise a budget serves best when the strategy may use either: Laplace for pure DP, else Gaussian."""
    return "laplace" if isinstance(as_budget(budget), PureDP) else "gaussian"


def variance_factor(budget: Any, noise: NoiseKind) -> float:
    """From unit-noise variances (epsilon 1, or sigma 1 per unit L2 sensitivity) to ``budget``'s:
    1 / epsilon^2 for Laplace, 1 / (2 rho) for Gaussian."""
    spent = for_noise(budget, noise)
    return 1.0 / float(spent.epsilon) ** 2 if isinstance(spent, PureDP) else 1.0 / (2 * float(spent.rho))


def epsilon_of(budget: Any) -> Fraction:
    """The pure epsilon a Laplace plan spends of ``budget`` (:func:`for_noise`)."""
    return for_noise(budget, "laplace").epsilon


def share(value: Any, name: str) -> Fraction:
    """A part of a budget, exactly: a number strictly between 0 and 1 (0.25, "1/4", Fraction(1, 4))."""
    try:
        part = to_fraction(name, value)
    except ValueError:
        part = None
    if part is None or not 0 < part < 1:
        raise ValueError(f"{name} is a share of the budget: a number strictly between 0 and 1, got {value!r}")
    return part
