"""Accelerated mirror descent on the local polytope (Tseng 2008, Algorithm 1, with a Bregman distance), for the
approximate method, whose plain mirror descent needed thousands of steps at 20 attributes.

With x, z on the polytope and theta_0 = 1, each step evaluates the loss gradient at y = (1 - theta) x + theta z,
takes z' = argmin <grad, z'> + theta L D(z', z) (the engine's ``move`` with step 1 / (theta L): multiply by
exp(-step * grad), project), and moves x' = (1 - theta) x + theta z'; then theta' = (sqrt(theta^4 + 4 theta^2)
- theta^2) / 2. The loss falls as O(L D / k^2) when L bounds its curvature against D (Tseng's Prop. 1); L is
found by backtracking: a step is kept when f(x') <= f(y) + <grad, x' - y> + theta^2 L D(z', z), else L doubles.
Each step first tries 0.8 L, so L can follow the curvature down as well (the analysis assumes an L that never
shrinks; the restarts below keep the loss from rising when the guess was too bold). Marginals are linear in the
tables, so those of x and y are the same mixtures of z's. When the loss rises the momentum restarts (theta = 1,
z = x: O'Donoghue and Candes 2015).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .loss import Term
from .mirror import MAX_HALVINGS, converged


def _mix(a: Sequence[np.ndarray], b: Sequence[np.ndarray], weight: float) -> list[np.ndarray]:
    return [(1.0 - weight) * p + weight * q for p, q in zip(a, b)]


def accelerated_descent(engine, terms: Sequence[Term], iterations: int, tol: float,
                        callback: Callable[[int, float], object] | None = None) -> tuple[object, list[float]]:
    """Fit the engine's tables to the loss (the engine also mixes states and measures their divergence); returns
    the final state and the loss after every iteration (``history[0]``: the start). The residuals of x and y are
    mixtures of those of the z's (they are affine in the tables), so each step costs one product with each
    term's matrix forward (per step size tried) and one backward."""
    def residuals(mu: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [t.residuals(m) for t, m in zip(terms, mu)]

    def loss(rs: Sequence[np.ndarray]) -> float:
        return sum(t.value(r) for t, r in zip(terms, rs))

    x = z = engine.start()
    mu_z = engine.marginals(z)
    r_x = r_z = residuals(mu_z)
    value = loss(r_x)
    history, theta, lipschitz = [value], 1.0, engine.total
    for iteration in range(1, iterations + 1):
        r_y = _mix(r_x, r_z, theta)
        value_y, gradients = loss(r_y), [t.gradient(r) for t, r in zip(terms, r_y)]
        lipschitz *= 0.8  # optimistic: the backtracking below doubles it back when needed
        direction = engine.direction(gradients)
        for _ in range(MAX_HALVINGS):
            candidate = engine.move(z, direction, 1.0 / (theta * lipschitz))
            mu_candidate = engine.marginals(candidate)
            r_candidate = residuals(mu_candidate)
            r_next = _mix(r_x, r_candidate, theta)
            value_next = loss(r_next)
            step = theta * sum(float(np.vdot(g, a - b)) for g, a, b in zip(gradients, mu_candidate, mu_z))  # <g, x'-y>
            if value_next <= value_y + step + theta * theta * lipschitz * engine.divergence(candidate, z):
                break
            lipschitz *= 2.0
        else:
            break  # no step size passes: converged to numerical precision
        if value_next > value:  # restart: drop the momentum, keep the better point
            z, mu_z, r_z, theta = x, engine.marginals(x), r_x, 1.0
        else:
            x, z, mu_z, r_x, r_z = engine.mix(x, candidate, theta), candidate, mu_candidate, r_next, r_candidate
            value = value_next
            theta = (math.sqrt(theta**4 + 4.0 * theta**2) - theta**2) / 2.0
        history.append(value)
        if callback is not None:
            callback(iteration, value)
        if converged(history, tol):
            break
    return x, history
