"""The one measurement currency: what the kernel returned for a linear query, ready for any inference.

A ``Measurement`` is a query matrix over the ROOT data vector, its noisy answers, the noise's
kind (``"laplace"`` or ``"gaussian"``) and standard deviation (one number, or one per row), and
the id of the root source whose vector the matrix reads. Marginal strategies (ResidualPlanner,
QuerySmasher) measure marginals of a table rather than one data vector: their measurements name
the marginal's attributes (positions), and the matrix reads that marginal's cells. Measurements taken on derived sources
map back to the root through their lineage (``map_to_root``: a reduced vector x' = P x, a split
part x_i = S_i x, any linear transform x' = T x), so one solve uses everything (ektelo section
5.5). Public knowledge enters as a measurement with tiny noise (``known_total``).
``operators.measure`` makes them from kernel answers; every inference routine, every strategy's
``reconstruct`` and every error bar (``operators.covariance``) reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, aslinearoperator

from .matrix import Identity, Matrix, Product, Total, VStack, Weighted
from .linalg import explicit_sparse
from .matrices import marginalizer

NoiseKind = Literal["laplace", "gaussian"]

#: Largest number of non-zeros for which the stacked measurements are built as one CSR array (32 MB).
SPARSE_NONZEROS = 1 << 21


@dataclass(frozen=True, eq=False)
class Measurement:
    """Noisy answers ``answers`` ~ matrix @ x + ``noise`` noise with standard deviation ``noise_std``."""

    matrix: Matrix
    answers: np.ndarray
    noise_std: float | np.ndarray
    noise: NoiseKind = "gaussian"
    source: str | None = None
    attributes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        answers = np.asarray(self.answers, dtype=np.float64).ravel()
        if answers.size != self.matrix.shape[0]:
            raise ValueError(f"{answers.size} answers for a matrix with {self.matrix.shape[0]} rows")
        std = np.asarray(self.noise_std, dtype=np.float64)
        if std.ndim not in (0, 1) or (std.ndim == 1 and std.size != answers.size):
            raise ValueError("noise_std must be one number or one per answer")
        if not (np.all(np.isfinite(std)) and np.all(std > 0) and np.all(np.isfinite(answers))):
            raise ValueError("answers must be finite and noise_std finite and positive")
        if self.noise not in ("laplace", "gaussian"):
            raise ValueError(f"noise must be 'laplace' or 'gaussian', got {self.noise!r}")
        object.__setattr__(self, "answers", answers)
        object.__setattr__(self, "noise_std", float(std) if std.ndim == 0 else std)

    @property
    def weights(self) -> float | np.ndarray:
        """1 / noise_std: the row scaling that makes every answer's noise unit-variance."""
        return 1.0 / self.noise_std

    def on(self, matrix: Matrix) -> Measurement:
        """The same answers and noise, read as answers to ``matrix`` (a re-expression of this one's query)."""
        return Measurement(matrix, self.answers, self.noise_std, self.noise, self.source, self.attributes)

    def on_data_vector(self, sizes: Sequence[int]) -> Measurement:
        """A marginal measurement (``attributes`` set) as a query of the whole data vector over ``sizes``: its
        matrix after the marginalization, for inference that solves for the data vector (least squares)."""
        if self.attributes is None:
            return self
        onto = marginalizer(sizes, self.attributes)
        return self.on(onto if isinstance(self.matrix, Identity) else self.matrix @ onto)


def known_total(n: int, total: float, noise_std: float = 1e-4) -> Measurement:
    """A publicly known total as a measurement with tiny noise; keep noise_std far below the
    other measurements' (it weighs (their std / noise_std)^2 times more in least squares)."""
    return Measurement(Total(n), np.array([float(total)]), noise_std)


def map_to_root(matrix: Matrix, lineage: Sequence[Matrix]) -> Matrix:
    """A query matrix on a derived vector, as a matrix on the root vector.

    ``lineage`` lists the transformations from the root down, x_1 = T_1 x, x_2 = T_2 x_1, ...;
    the result is matrix @ T_k @ ... @ T_1 (implicit). E.g. a part of a split: [S_i]; a
    reduced vector: [P]; a part of a split of a reduced vector: [P, S_i].
    """
    return Product([matrix, *reversed(list(lineage))]) if lineage else matrix


def columns(measurements: Sequence[Measurement], size: int | None) -> int:
    if not measurements:
        raise ValueError("give at least one measurement")
    widths = {m.matrix.shape[1] for m in measurements} | ({int(size)} if size is not None else set())
    if len(widths) != 1:
        raise ValueError(f"measurements must all be over the same vector; got column counts {sorted(widths)}")
    return widths.pop()


def stacked_system(measurements: Sequence[Measurement], n: int) -> tuple[LinearOperator, np.ndarray]:
    """The weighted system [w_i M_i] x = [w_i y_i] as a LinearOperator: one CSR array when every
    block is cheaply explicit (at most SPARSE_NONZEROS non-zeros in all), else implicit products."""
    rhs = np.concatenate([m.weights * m.answers for m in measurements])
    explicit = explicit_sparse(VStack([Weighted(m.matrix, 1.0) for m in measurements]), SPARSE_NONZEROS)
    if explicit is not None:
        weights = np.concatenate([np.broadcast_to(m.weights, m.answers.shape) for m in measurements])
        return aslinearoperator(sp.csr_array(explicit.multiply(weights[:, None]))), rhs
    blocks = [(m.matrix, m.weights) for m in measurements]
    offsets = np.cumsum([0] + [M.shape[0] for M, _ in blocks])

    def matvec(x):
        return np.concatenate([w * (M @ np.ravel(x)) for M, w in blocks])

    def rmatvec(r):
        r = np.ravel(r)
        return sum(M.T @ (w * r[a:b]) for (M, w), a, b in zip(blocks, offsets[:-1], offsets[1:]))

    operator = LinearOperator((int(offsets[-1]), n), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    return operator, rhs


