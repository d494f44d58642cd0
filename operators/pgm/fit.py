"""``fit``: a graphical model from noisy marginal measurements (Private-PGM; McKenna, Sheldon, Miklau 2019).

Post-processing only: the measurements are what the kernel already released. ``method="exact"`` builds a
junction tree over the measured cliques and fits log-potentials by mirror descent; ``"approximate"`` fits
pseudo-marginals on a region graph (McKenna et al. 2021) by accelerated mirror descent, for when the tree's
largest clique is too big; ``"auto"`` takes the exact method when the tree's largest clique has at most
``max_clique_cells`` cells. No table (a tree clique, or a measured marginal in the approximate method) may exceed ``max_clique_cells``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from ...kernel.matrix.threads import single_threaded_blas
from ..domains import DomainLike, as_domain
from ..measurement import Measurement
from .accelerated import accelerated_descent
from .exact import ExactEngine, JunctionTreeModel, warm_potentials
from .junction import TooLarge, junction_tree
from .loss import LossKind, estimate_total, terms as loss_terms
from .mirror import mirror_descent
from .model import Model
from .regions import RegionEngine, RegionGraphModel

Method = Literal["auto", "exact", "approximate"]

#: The most iterations a fit takes by default, and the relative loss decrease over ``mirror.WINDOW`` iterations
#: below which it stops: on the census-like table's ResidualPlanner measurements (all 2-way marginals, rho 0.1) it
#: stops at about 2,900 iterations, where the marginals' error has settled (0.00637 from 0.00650 at 1,000; least
#: squares 0.00658), and 1e-4 takes twice as long for nothing more.
ITERATIONS = 10_000
TOLERANCE = 1e-3


def fit(domain: DomainLike, measurements: Sequence[Measurement | tuple], *, method: Method = "auto",
        iterations: int = ITERATIONS, total: float | None = None, max_clique_cells: int = 10**6, loss: LossKind = "l2",
        tol: float = TOLERANCE, callback: Callable[[int, float], object] | None = None,
        start: Model | None = None) -> Model:
    """Fit a graphical model to ``measurements``.

    ``measurements``: :class:`Measurement` objects (``attributes``: the marginal their matrix reads; None: the
    full data vector) or ``(attributes, matrix, answers, std)`` tuples (attributes by position or name, in
    domain order). ``loss``: ``"l2"`` (weighted least squares, the default for either noise) or ``"l1"`` (a
    smoothed weighted L1, the Laplace likelihood's: on PrivBayes's Laplace measurements it converged more
    slowly and fitted worse in 1000 iterations, docs/pgm.md). ``total``: the record count if public, else
    estimated from the measurements. ``iterations`` / ``tol``: mirror-descent iterations at most, and the
    relative loss decrease over the last ``mirror.WINDOW`` iterations below which it stops (converged); the model's
    ``converged`` says which ended it. ``callback(iteration, loss)``: progress after each iteration.
    ``start``: a model to start from (the exact method; e.g. the last round's in AIM): its distribution, laid on
    the new junction tree, is the first iterate.
    Returns a :class:`JunctionTreeModel` or a :class:`RegionGraphModel`; ``.history`` is the loss per iteration.
    """
    if method not in ("auto", "exact", "approximate"):
        raise ValueError(f"method must be 'auto', 'exact' or 'approximate', got {method!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 1:
        raise ValueError(f"iterations must be a positive integer, got {iterations!r}")
    domain = as_domain(domain)
    sizes = domain.sizes
    measurements = [_by_position(m, domain) for m in measurements]
    all_terms = loss_terms(measurements, sizes, loss, max_clique_cells)
    total = estimate_total(all_terms) if total is None else float(total)
    if not (math.isfinite(total) and total > 0):
        raise ValueError(f"total must be positive and finite, got {total}")
    measured = sorted({c for t in all_terms for c in t.cliques})
    tree = None
    if method != "approximate":
        try:
            tree = junction_tree(measured, sizes, max_clique_cells)
        except TooLarge as error:
            if method == "exact":
                raise ValueError(f"{error} (max_clique_cells={max_clique_cells:.3g}); use method='approximate' "
                                 "or raise max_clique_cells") from None
    if tree is None:
        largest = max(measured, key=lambda c: math.prod(sizes[i] for i in c))
        cells = math.prod(sizes[i] for i in largest)
        if cells > max_clique_cells:
            raise ValueError(f"the measured marginal on attributes {largest} has {cells:.3g} cells, more than "
                             f"max_clique_cells={max_clique_cells:.3g}; the approximate method keeps a table per "
                             "measured marginal: measure smaller marginals or raise max_clique_cells")
        engine = RegionEngine(measured, sizes, all_terms, total)
        with single_threaded_blas():  # many small products: a second thread only synchronizes, and oversubscribes
            state, history = accelerated_descent(engine, all_terms, iterations, tol, callback)
        return _reported(RegionGraphModel(domain, engine, state, total, history, measured), iterations)
    engine = ExactEngine(tree, all_terms, total, None if start is None else warm_potentials(tree, start))
    with single_threaded_blas():  # as above
        state, history = mirror_descent(engine, all_terms, iterations, tol, callback)
    return _reported(JunctionTreeModel(domain, tree, state[1], total, history, measured), iterations)


def _reported(model: Model, iterations: int) -> Model:
    """The model, with whether its fit converged (stopped by the tolerance, or no step could lower the loss) rather
    than ran out of iterations."""
    model.converged = len(model.history) - 1 < iterations
    return model


def _by_position(measurement: Measurement | tuple, domain) -> Measurement | tuple:
    """A tuple measurement's attributes named (``("age", "sex")``) as their positions in the domain."""
    if isinstance(measurement, tuple) and measurement and measurement[0] is not None:
        return (tuple(domain.index(a) for a in measurement[0]), *measurement[1:])
    return measurement
