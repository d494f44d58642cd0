"""PrivBayes as plans: ektelo's plan 17, PrivBayesLS, and PrivBayes+PGM (graphical-model inference, new).

Both spend ``selection_share`` of epsilon choosing a Bayesian network through the kernel (PrivBayes's greedy
selection, ``operators.privbayes.network``) and the rest measuring its conditional marginals with Laplace noise;
they differ in inference. PrivBayesLS fits the data vector by least squares (as ektelo did; the domain must be
small enough to hold as a vector); PrivBayes+PGM fits one graphical model to the same measurements, which needs
no data vector and gives non-negative, consistent marginals and synthetic records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

from ..operators.matrix import Matrix
from ..operators import pgm, privbayes
from ..operators.client import Handle
from ..operators.estimate import VectorEstimate
from ..operators.inference import least_squares
from ..operators.measurement import Measurement
from ..operators.budget import Budget, for_noise, share
from ..operators.privacy import split_amount

MAX_VECTOR_CELLS = 1 << 25
"""The largest data vector PrivBayesLS fits (the kernel's default cell limit)."""


def measured(source: Handle, budget: Budget, selection_share: float | Fraction | str, degree: int, max_cells: int,
             seed: int | None, who: str) -> tuple[privbayes.Network, list[Measurement]]:
    """PrivBayes's network chosen with ``selection_share`` of ``budget``, and its conditional marginals measured
    with the rest (``who``: the plan named in a refusal)."""
    part = share(selection_share, "selection_share")
    selection, measurement = split_amount(for_noise(budget, "laplace"), [part, 1 - part])
    chosen = privbayes.network(source, selection, degree=degree, max_cells=max_cells, seed=seed)
    tables = privbayes.cliques(chosen, list(source.domain.names))
    return chosen, privbayes.measure_cliques(source, tables, measurement)


def privbayes_ls(source: Handle, workload: Matrix | None, budget: Budget, *, shape: Sequence[int] | None = None,
                 selection_share: float = 0.3, degree: int = 2, max_cells: int = 10_000,
                 seed: int | None = None) -> VectorEstimate:
    """PrivBayesLS (ektelo plan 17): PrivBayes selection with ``selection_share`` of epsilon, Laplace
    measurement of the network's conditional marginals with the rest, least squares on the data vector.

    ``degree``, ``max_cells``, ``seed``: the network's (``operators.privbayes.network``). ``shape``: unused (the
    table's domain is the shape). The estimate's error bars are conditional on the network chosen.
    """
    sizes = source.domain.sizes if source.domain is not None else ()
    if math.prod(sizes) > MAX_VECTOR_CELLS:
        raise ValueError(f"PrivBayesLS fits a data vector of {math.prod(sizes):.3g} cells, over {MAX_VECTOR_CELLS}: "
                         "use PrivBayes+PGM, which fits a graphical model instead")
    chosen, measurements = measured(source, budget, selection_share, degree, max_cells, seed, "PrivBayesLS")
    on_vector = [m.on_data_vector(sizes) for m in measurements]
    return VectorEstimate(least_squares(on_vector), on_vector, workload=workload,
                          note=f"least squares on PrivBayes's {len(measurements)} conditional marginals; error bars "
                               "conditional on its network " + _shown(chosen))


def privbayes_pgm(source: Handle, workload, budget: Budget, *, shape: Sequence[int] | None = None,
                  selection_share: float = 0.3, degree: int = 2, max_cells: int = 10_000, seed: int | None = None,
                  iterations: int = pgm.ITERATIONS, method: str = "auto",
                  callback: Callable[[int, float], object] | None = None) -> pgm.Model:
    """PrivBayes selection and measurement as in :func:`privbayes_ls`, then one graphical model fitted to the
    measurements (``operators.pgm.fit``, least squares weighted by the Laplace noise's scale; ``iterations``,
    ``method``, ``callback`` are the fit's). Returns the model: ``marginal(A)``, ``answer(items)``, ``synthetic(n_rows,
    seed)``. ``workload``, ``shape``: unused (the model answers any marginal)."""
    chosen, measurements = measured(source, budget, selection_share, degree, max_cells, seed, "PrivBayes+PGM")
    model = pgm.fit(source.domain, measurements, method=method, iterations=iterations, callback=callback)
    model.note = (f"a graphical model fitted to PrivBayes's {len(measurements)} conditional marginals (network "
                  f"{_shown(chosen)}): consistent and non-negative, no error bars (post-processing)")
    return model


def _shown(chosen: privbayes.Network) -> str:
    return "; ".join(f"{child} | {', '.join(parents)}" if parents else child for child, parents in chosen)
