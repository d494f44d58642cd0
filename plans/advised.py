"""The Advised plan: measure what ``ektelo-ng advise`` picked and saved, so advice and measurement agree.

The saved file (``operators.advice.recipe``) is rebuilt and checked against the advised error; the
strategy then measures with the noise it was advised with, spending all of ``budget``: a Laplace pick
takes a pure epsilon (from a zCDP budget, the largest epsilon with epsilon^2 / 2 <= rho), a Gaussian
pick needs zCDP. A data-dependent pick runs its catalog plan by name with its defaults, and with the public
record count the advice was given where the plan takes one, on the epsilon it was advised at (from a zCDP
budget, the same largest epsilon).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..operators.matrix import Matrix
from ..operators.advice import load
from ..operators.budget import Budget, as_budget, for_noise
from ..operators.client import Handle
from ..operators.estimate import Estimate, VectorEstimate
from ..operators.selection.linear import LinearStrategy


def advised(source: Handle, workload: Matrix | None, budget: Budget, *, shape: Sequence[int] | None = None,
            advice: str | Path = "strategy.json") -> Estimate:
    """Measure the strategy saved in ``advice`` on ``source`` with all of ``budget``; ``workload``: what the
    estimate answers by default (the advised workload when None)."""
    spent_kind = as_budget(budget)  # a bare number refused before the advice is read
    saved = load(advice, getattr(source, "domain", None))
    if workload is not None and workload.shape[1] != saved.workload.cells:
        raise ValueError(f"the workload has {workload.shape[1]} columns but the advice's domain {saved.workload.cells} "
                         "cells: give queries over its cells (or none, for the advised ones)")
    spent = for_noise(spent_kind, saved.noise)  # a Laplace pick, data-dependent too, takes a pure epsilon
    if saved.plan is not None:
        from .registry import info  # the registry lists this plan: import it when needed

        if saved.plan not in info:
            raise ValueError(f"{advice} picks the plan {saved.plan!r}, which is not in this library's catalog: "
                             "advise again")
        entry = info[saved.plan]
        params = entry.defaults | ({"records": saved.records} if entry.public_records else {})
        return entry.plan(source, saved.workload.answers if workload is None else workload, spent,
                          shape=shape or saved.workload.domain.sizes, **params)
    strategy = saved.strategy
    if isinstance(strategy, LinearStrategy):
        fitted = strategy.reconstruct(strategy.measure(source, spent, shape=shape))
        return VectorEstimate(fitted.x, fitted.measurements, note=f"advised: {saved.name}",
                              workload=saved.workload.answers if workload is None else workload)
    return strategy.reconstruct(strategy.measure(source, spent))
