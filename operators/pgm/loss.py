"""The measurement loss of a graphical model: noisy linear queries of marginals, grouped for batched products.

Each measurement reads the cells of one marginal (a *clique* of attributes). Before fitting, measurements
are cut into independent pieces on the smallest cliques they read: the rows of a ``VStack`` are separate
measurements (their noise is independent), and a Kronecker factor that sums an attribute out (``Total``)
drops that attribute from the clique. A ResidualPlanner host measurement on four attributes thus becomes
one measurement per residual, on that residual's attributes. Pieces with the same matrix on cliques of the
same shape form one :class:`Term`, evaluated for all its cliques in one matrix product.

The loss is the weighted least squares ``sum_i ||(M_i mu_{C_i} - y_i) / sigma_i||^2`` (Gaussian noise), or
the weighted L1 loss ``sum_i |(M_i mu_{C_i} - y_i) / sigma_i|`` (``loss="l1"``, Private-PGM's choice for
Laplace noise), smoothed by ``L1_SMOOTHING``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.sparse.linalg import LinearOperator, lsqr

from ..matrix import Dense, Identity, Kronecker, Matrix, Ones, VStack, Weighted
from ..measurement import Measurement
from .tables import Clique

LossKind = Literal["l2", "l1"]

#: Largest matrix (rows x cells) kept as a dense array; larger ones, and identities at any size, stay implicit.
DENSE_ENTRIES = 1 << 22
#: The L1 loss is smoothed to sum(sqrt(r^2 + e^2) - e) on standardized residuals r (within e per row of the
#: L1 loss, and differentiable, so the line search does not stall at its kinks).
L1_SMOOTHING = 1e-3


@dataclass
class Piece:
    """One independent measurement on one clique: answers ~ matrix @ mu_clique + noise (std per row)."""

    clique: Clique
    matrix: Matrix | np.ndarray
    answers: np.ndarray
    std: np.ndarray


def pieces(measurement: Measurement | tuple, sizes: Sequence[int], max_cells: int) -> list[Piece]:
    """A measurement (or an ``(attributes, matrix, answers, std)`` tuple) as pieces on the cliques it reads.

    ``attributes=None`` means the full data vector (every attribute); it is refused past ``max_cells`` cells.
    """
    if isinstance(measurement, Measurement):
        attributes, matrix, answers, std = (measurement.attributes, measurement.matrix, measurement.answers,
                                            measurement.noise_std)
    else:
        attributes, matrix, answers, std = measurement
    d = len(sizes)
    if attributes is None:
        cells = math.prod(sizes)
        if cells > max_cells:
            raise ValueError(f"a measurement of the full data vector ({cells:.3g} cells) exceeds max_clique_cells="
                             f"{max_cells:.3g}; measure marginals instead (give each measurement its attributes)")
        attributes = tuple(range(d))
    clique = tuple(int(i) for i in attributes)
    if list(clique) != sorted(set(clique)) or (clique and not 0 <= clique[0] <= clique[-1] < d):
        raise ValueError(f"measurement attributes {attributes} must be distinct sorted positions in 0..{d - 1}")
    if isinstance(matrix, np.ndarray):
        matrix = np.atleast_2d(np.asarray(matrix, dtype=np.float64))
    answers = np.asarray(answers, dtype=np.float64).ravel()
    std = np.broadcast_to(np.asarray(std, dtype=np.float64), answers.shape).copy()
    cells = math.prod(sizes[i] for i in clique)
    if matrix.shape != (answers.size, cells):
        raise ValueError(f"a measurement on attributes {clique} needs a ({answers.size}, {cells}) matrix, "
                         f"got {matrix.shape}")
    if not (np.all(np.isfinite(answers)) and np.all(np.isfinite(std)) and np.all(std > 0)):
        raise ValueError("answers must be finite and noise std finite and positive")
    return list(_split(clique, matrix, answers, std, sizes))


def _split(clique: Clique, matrix, answers: np.ndarray, std: np.ndarray, sizes: Sequence[int]):
    weight, base = (matrix.weight, matrix.base) if isinstance(matrix, Weighted) else (1.0, matrix)
    if isinstance(base, VStack):
        start = 0
        for block in base.blocks:
            stop = start + block.shape[0]
            yield from _split(clique, block if weight == 1.0 else Weighted(block, weight), answers[start:stop],
                              std[start:stop], sizes)
            start = stop
        return
    if isinstance(base, Kronecker) and len(base.factors) == len(clique):
        summed = [isinstance(f, Ones) and f.shape[0] == 1 for f in base.factors]
        if any(summed):
            kept = [f for f, s in zip(base.factors, summed) if not s]
            inner = Kronecker(kept) if kept else Dense(np.ones((1, 1)))
            matrix = inner if weight == 1.0 else Weighted(inner, weight)
            clique = tuple(i for i, s in zip(clique, summed) if not s)
    yield Piece(clique, matrix, answers, std)


def _structure(matrix) -> object:
    """A hashable key equal for matrices known to be equal (shared factors, equal small arrays)."""
    if isinstance(matrix, Weighted):
        return ("weighted", matrix.weight, _structure(matrix.base))
    if isinstance(matrix, Kronecker):
        return ("kronecker", tuple(_structure(f) for f in matrix.factors))
    if isinstance(matrix, Identity):
        return ("identity", matrix.n)
    if isinstance(matrix, Dense):
        matrix = matrix.array
    if isinstance(matrix, np.ndarray) and matrix.size <= 1 << 16:
        return ("array", matrix.shape, matrix.tobytes())
    return ("object", id(matrix))


class Term:
    """Pieces sharing one matrix on cliques of one shape: the loss of all of them in one product.

    ``answers`` and ``weights`` (1 / std) are (cliques, rows); the marginals given to :meth:`evaluate` are
    (cliques, cells), each clique's table flattened in C order.
    """

    def __init__(self, matrix, group: list[Piece], kind: LossKind):
        if (isinstance(matrix, Matrix) and not isinstance(matrix, Identity)
                and matrix.shape[0] * matrix.shape[1] <= DENSE_ENTRIES):
            matrix = matrix.dense()
        self.matrix = matrix
        self.cliques = [p.clique for p in group]
        self.answers = np.stack([p.answers for p in group])
        self.weights = 1.0 / np.stack([p.std for p in group])
        self.kind = kind

    def residuals(self, mu: np.ndarray) -> np.ndarray:
        return ((self.matrix @ mu.T).T - self.answers) * self.weights

    def evaluate(self, mu: np.ndarray) -> tuple[float, np.ndarray]:
        """The loss of marginals ``mu`` (cliques, cells) and its gradient with respect to them."""
        r = self.residuals(mu)
        return self.value(r), self.gradient(r)

    def value(self, r: np.ndarray) -> float:
        """The loss of standardized residuals ``r`` (affine in the marginals, so they mix as the marginals do)."""
        return float(np.sum(r * r)) if self.kind == "l2" else float(np.sum(np.sqrt(r * r + L1_SMOOTHING**2) - L1_SMOOTHING))

    def gradient(self, r: np.ndarray) -> np.ndarray:
        """The loss gradient with respect to the marginals, at residuals ``r``."""
        if self.kind == "l2":
            return 2.0 * ((r * self.weights) @ self.matrix)
        return (r / np.sqrt(r * r + L1_SMOOTHING**2) * self.weights) @ self.matrix


def terms(measurements: Sequence[Measurement | tuple], sizes: Sequence[int], kind: LossKind,
          max_cells: int) -> list[Term]:
    """The loss terms of ``measurements`` (pieces grouped by clique shape and matrix)."""
    if kind not in ("l2", "l1"):
        raise ValueError(f"loss must be 'l2' or 'l1', got {kind!r}")
    groups: dict[tuple, list[Piece]] = {}
    for measurement in measurements:
        for piece in pieces(measurement, sizes, max_cells):
            key = (tuple(sizes[i] for i in piece.clique), _structure(piece.matrix))
            groups.setdefault(key, []).append(piece)
    if not groups:
        raise ValueError("give at least one measurement")
    return [Term(group[0].matrix, group, kind) for group in groups.values()]


def estimate_total(all_terms: Sequence[Term]) -> float:
    """The total count, as the inverse-variance average of one unbiased estimate per clique that determines it.

    With a clique's measurements stacked and standardized, ``A mu ~ W y`` (unit noise), the best linear
    unbiased estimate of ``1^T mu`` is ``u^T W y`` for the least-norm ``u`` with ``A^T u = 1`` (variance
    ``|u|^2``), found by LSQR from products with ``A`` alone, so any clique size and implicit matrices
    serve. A clique whose measurements do not determine the total (``1`` not in the row space of ``A``)
    gives none.
    """
    stacks: dict[Clique, list] = defaultdict(list)
    for term in all_terms:
        M = term.matrix
        if not np.any(np.abs(M @ np.ones(M.shape[1])) > 1e-12):  # every row sums to zero: no total in there
            continue
        for clique, w, y in zip(term.cliques, term.weights, term.answers):
            stacks[clique].append((M, w, y))
    estimates, precisions = [], []
    for parts in stacks.values():
        cells = parts[0][0].shape[1]
        stops = np.cumsum([0] + [w.size for _, w, _ in parts])
        rows = int(stops[-1])

        def transposed(u: np.ndarray) -> np.ndarray:  # A^T u
            return sum((w * u[a:b]) @ M for (M, w, _), a, b in zip(parts, stops[:-1], stops[1:]))

        def forward(x: np.ndarray) -> np.ndarray:  # A x
            return np.concatenate([w * (M @ x) for M, w, _ in parts])

        A_T = LinearOperator((cells, rows), matvec=transposed, rmatvec=forward, dtype=np.float64)
        ones = np.ones(cells)
        u = lsqr(A_T, ones, atol=1e-12, btol=1e-12, iter_lim=10 * min(cells, rows) + 10)[0]
        if np.linalg.norm(transposed(u) - ones) <= 1e-6 * math.sqrt(cells) and u @ u > 0:
            estimates.append(u @ np.concatenate([w * y for _, w, y in parts]))
            precisions.append(1.0 / (u @ u))
    if not estimates:
        raise ValueError("the measurements do not determine the total count; pass total=")
    return max(1.0, float(np.dot(estimates, precisions) / np.sum(precisions)))
