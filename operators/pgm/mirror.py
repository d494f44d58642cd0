"""Entropic mirror descent on (pseudo-)marginals with an Armijo backtracking line search (Private-PGM's estimator).

Each step moves the log-parameters against the loss gradient, ``theta <- theta - alpha * grad L(mu)``,
and maps them back to marginals with an oracle (belief propagation on a junction tree for the exact
method, a Bregman projection onto the local polytope for the approximate one). A step is accepted when
the loss falls by at least half its first-order prediction, ``L(mu) - L(mu') >= <grad, mu - mu'> / 2``;
otherwise ``alpha`` halves. After an accepted step ``alpha`` doubles, so the step size follows the
curvature. Iteration stops at ``iterations`` or when the loss has fallen by less than ``tol`` of itself over the
last ``WINDOW`` iterations (:func:`converged`): one step's decrease can be tiny while the descent is still
moving, and a window sees through that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from .loss import Term

#: Halvings of the step size before a step is given up (the loss then no longer decreases measurably).
MAX_HALVINGS = 40
#: Iterations over which the loss's relative decrease is measured for the stopping rule.
WINDOW = 10


def converged(history: Sequence[float], tol: float) -> bool:
    """Whether the loss fell by at most ``tol`` of itself over the last ``WINDOW`` iterations."""
    if len(history) <= WINDOW:
        return False
    return history[-1 - WINDOW] - history[-1] <= tol * max(abs(history[-1]), 1e-12)


class Engine(Protocol):
    """What mirror descent needs from a model: its start, its marginals per loss term, and a step: the loss
    gradients laid out once in the model's own tables (``direction``), then moved along for any step size."""

    total: float

    def start(self) -> object: ...

    def marginals(self, state: object) -> list[np.ndarray]: ...

    def direction(self, gradients: Sequence[np.ndarray]) -> object: ...

    def move(self, state: object, direction: object, alpha: float) -> object: ...


def evaluate(terms: Sequence[Term], stacks: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    """The total loss and its gradient per term."""
    value, gradients = 0.0, []
    for term, mu in zip(terms, stacks):
        v, g = term.evaluate(mu)
        value += v
        gradients.append(g)
    return value, gradients


def mirror_descent(engine: Engine, terms: Sequence[Term], iterations: int, tol: float,
                   callback: Callable[[int, float], object] | None = None) -> tuple[object, list[float]]:
    """Fit the engine's parameters to the loss; returns the final state and the loss after every iteration
    (``history[0]``: the start). ``callback(iteration, loss)`` is called after each iteration."""
    state = engine.start()
    mu = engine.marginals(state)
    value, gradients = evaluate(terms, mu)
    history = [value]
    alpha = 1.0 / engine.total
    for iteration in range(1, iterations + 1):
        direction = engine.direction(gradients)
        for _ in range(MAX_HALVINGS):
            candidate = engine.move(state, direction, alpha)
            new_mu = engine.marginals(candidate)
            new_value, new_gradients = evaluate(terms, new_mu)
            predicted = sum(float(np.vdot(g, a - b)) for g, a, b in zip(gradients, mu, new_mu))
            if new_value <= value and value - new_value >= 0.5 * predicted:
                break
            alpha /= 2.0
        else:
            break  # no step decreases the loss measurably: converged to numerical precision
        state, mu, value, gradients = candidate, new_mu, new_value, new_gradients
        history.append(value)
        if callback is not None:
            callback(iteration, value)
        if converged(history, tol):
            break
        alpha *= 2.0
    return state, history
