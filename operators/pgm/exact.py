"""The exact method: log-potentials on a junction tree, fitted by mirror descent, marginals by belief propagation.

The model is ``p(x) ∝ exp(sum_J theta_J(x_J))`` over the junction tree's cliques ``J``. A mirror-descent step
subtracts ``alpha`` times each measured clique's loss gradient (broadcast) from the potential of the clique that
holds it, so from ``theta = 0`` the model stays in the exponential family of the measured cliques: with
consistent noise-free marginals it converges to their maximum-entropy distribution. Each tree clique's
measured sub-cliques are summed out of it, and their gradients broadcast into it, by one :class:`Reducer`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ...kernel.domain import Domain
from .junction import JunctionTree, calibrate, forward_sample, marginal
from .loss import Term
from .model import Model
from .tables import Clique, Reducer, expand, shape_of


class ExactEngine:
    """Mirror-descent state: (potentials per tree clique, count tables per tree clique)."""

    def __init__(self, tree: JunctionTree, terms: Sequence[Term], total: float,
                 potentials: list[np.ndarray] | None = None):
        self.tree, self.terms, self.total = tree, terms, total
        self.initial = potentials
        self.homes = [[tree.home(c) for c in term.cliques] for term in terms]
        held: dict[int, list[Clique]] = defaultdict(list)
        for term, homes in zip(terms, self.homes):
            for j, c in zip(homes, term.cliques):
                held[j].append(c)
        self.reducers = {j: Reducer(tree.cliques[j], cliques, tree.sizes) for j, cliques in held.items()}

    def start(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        if self.initial is not None:
            return self._state(self.initial)
        return self._state([np.zeros(shape_of(c, self.tree.sizes)) for c in self.tree.cliques])

    def _state(self, potentials: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return potentials, calibrate(self.tree, potentials, self.total)

    def marginals(self, state) -> list[np.ndarray]:
        tables = {j: reducer.marginals(state[1][j]) for j, reducer in self.reducers.items()}
        return [np.stack([tables[j][c].ravel() for j, c in zip(homes, term.cliques)])
                for term, homes in zip(self.terms, self.homes)]

    def direction(self, gradients: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
        """The loss gradient per tree clique: every measured clique's gradient broadcast onto its home clique and
        summed (the total is fixed: its gradient moves nothing)."""
        held: dict[int, dict[Clique, np.ndarray]] = defaultdict(dict)
        for term, homes, gradient in zip(self.terms, self.homes, gradients):
            for j, c, g in zip(homes, term.cliques, gradient):
                if c:
                    g = g.reshape(shape_of(c, self.tree.sizes))
                    held[j][c] = held[j][c] + g if c in held[j] else g
        return {j: self.reducers[j].expand(tables) for j, tables in held.items()}

    def move(self, state, direction: dict[int, np.ndarray], alpha: float):
        return self._state([p - alpha * direction[j] if j in direction else p for j, p in enumerate(state[0])])


def warm_potentials(tree: JunctionTree, model: Model) -> list[np.ndarray]:
    """Log-potentials on ``tree`` whose distribution is ``model``'s when ``model`` factorizes over ``tree`` (AIM's
    next tree holds every clique of the last one): ``p = prod_J mu_J / prod_S mu_S``, each separator's marginal
    taken off its child clique."""
    tiny = 1e-300 * model.total
    out = []
    for j, clique in enumerate(tree.cliques):
        log = np.log(np.maximum(model.marginal(list(clique)), tiny))
        separator = tree.separator(j)
        if separator:
            log = log - expand(np.log(np.maximum(model.marginal(list(separator)), tiny)), separator, clique, tree.sizes)
        out.append(log)
    return out


class JunctionTreeModel(Model):
    """An exact graphical model: any marginal (variable elimination), forward-sampled synthetic records."""

    method = "exact"

    def __init__(self, domain: Domain, tree: JunctionTree, counts: list[np.ndarray], total: float,
                 history: list[float], measured: list[Clique]):
        super().__init__(domain, total, history, measured)
        self.tree = tree
        self._log = [np.log(np.maximum(c, 1e-300) / total) for c in counts]
        self._counts = counts

    def _marginal(self, subset: Clique) -> np.ndarray:
        return self.total * np.exp(marginal(self.tree, self._log, subset))

    def _sample(self, n_rows: int, rng: np.random.Generator) -> np.ndarray:
        return forward_sample(self.tree, self._counts, n_rows, rng)
