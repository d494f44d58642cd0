"""What MST and AIM share: marginals measured with Gaussian noise through the kernel (on merged values, if any),
the epsilon of a selection round under zCDP, and a junction tree's size.

Measurements are returned as ``operators.pgm`` tuples ``(attributes, Identity, answers, std)`` on the domain the
model is fitted over (the merged one). Amounts are exact fractions on the kernel's grid, so a plan can count what it
has spent without asking the kernel, and never asks for more than it has.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

from ..kernel.privacy import AMOUNT_GRID
from ..operators.client import Handle
from ..operators.matrix import Identity
from ..operators.pgm.junction import TooLarge, triangulate

Measured = tuple[tuple[str, ...], Identity, np.ndarray, float]


def in_table_order(source: Handle, names: Sequence[str]) -> tuple[str, ...]:
    """``names`` in the table's attribute order (the order of the kernel's marginals and of the model's cliques)."""
    order = {name: i for i, name in enumerate(source.domain.names)}
    return tuple(sorted(names, key=order.__getitem__))


def measure_marginals(source: Handle, cliques: Sequence[tuple[str, ...]], rhos: Sequence[Fraction],
                      codes: Mapping[str, np.ndarray] | None = None) -> list[Measured]:
    """Each clique's marginal (attributes in table order) plus Gaussian noise spending its rho, in one batch; with
    ``codes`` (per attribute, the merged value of each value) the marginal of the merged values, reduced from the
    table's marginal by the kernel (a partition: sensitivity 1 still)."""
    codes = dict(codes or {})
    sizes = dict(zip(source.domain.names, source.domain.sizes))
    handles, shapes = [], []
    for clique, handle in zip(cliques, source.vectorize_many([list(c) for c in cliques])):
        merged = [codes[a] if a in codes else np.arange(sizes[a]) for a in clique]
        shape = tuple(int(m.max()) + 1 for m in merged)
        if any(a in codes for a in clique):
            labels = np.ravel_multi_index(np.meshgrid(*merged, indexing="ij"), shape).ravel()
            handle = handle.reduce_by_partition(labels)
        handles.append(handle)
        shapes.append(shape)
    answers = source.session.gaussian_batch(handles, [Identity(math.prod(s)) for s in shapes], rho=list(rhos))
    return [(clique, Identity(math.prod(shape)), answer.values, answer.scale)
            for clique, shape, answer in zip(cliques, shapes, answers)]


def selection_epsilon(rho: Fraction) -> Fraction:
    """The largest epsilon on the kernel's grid whose exponential-mechanism charge under zCDP, epsilon^2 / 8, is at
    most ``rho``."""
    square = 8 * Fraction(rho) * AMOUNT_GRID**2  # epsilon = k / AMOUNT_GRID with k^2 <= 8 rho AMOUNT_GRID^2
    return Fraction(math.isqrt(square.numerator // square.denominator), AMOUNT_GRID)


def tree_cells(cliques: Sequence[tuple[int, ...]], sizes: Sequence[int], limit: float) -> float:
    """The cells of a junction tree over ``cliques`` (attribute positions), or infinity past ``limit``."""
    try:
        return float(sum(math.prod(sizes[i] for i in c) for c in triangulate(cliques, sizes, limit)))
    except TooLarge:
        return math.inf
