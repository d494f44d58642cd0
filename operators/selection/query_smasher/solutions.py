"""Measurement strategies for one subworkload, all behind one small interface.

A subworkload lives on the marginal ``x_A'`` (a tensor with one axis per attribute of
``A'``, flattened in C order). Its strategy is a matrix ``B`` (rows x cells) run as
``B x_A' + N(0, sigma^2 I)``; ``V = B^T B`` has maximum diagonal 1, so the privacy cost
(``max diag B^T Sigma^-1 B``) is ``1 / sigma^2``. The estimate is ``B^+ omega`` and a
subquery ``q`` has variance ``sigma^2 q V^+ q^T = sigma^2 |q B^+|^2``. ``loss`` is the
weighted total variance ``tr(G V^+)`` of the subworkload at ``sigma = 1`` and ``lower`` a
certified lower bound on the best possible loss (``None`` when the solver gives none).

Three forms: :class:`DenseSolution` (explicit ``B`` and ``B^+``), :class:`KronSolution`
(a Kronecker product of solutions on disjoint groups of axes: the optimum of a Kronecker
Gram factorises) and ``wff.FourierSolution`` (Fourier coefficients, applied with FFTs).
Batches are 2-D: ``(k, cells)`` in, ``(k, rows)`` out, and back.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ...matrix import Dense, Kronecker, Matrix, Product, Sparse
from ...residual import sub_matrix


class SubSolution(ABC):
    """A strategy ``B`` for the marginal of shape ``shape`` with ``max diag(B^T B) = 1``."""

    shape: tuple[int, ...]
    loss: float
    lower: float | None

    @property
    def cells(self) -> int:
        return math.prod(self.shape)

    @property
    @abstractmethod
    def num_rows(self) -> int:
        """Number of measurements (rows of ``B``); ``B`` has full row rank."""

    @abstractmethod
    def forward(self, x: np.ndarray) -> np.ndarray:
        """``x B^T`` for a batch ``(k, cells)``: the noise-free measurements."""

    @abstractmethod
    def backward(self, y: np.ndarray) -> np.ndarray:
        """``y (B^+)^T`` for a batch ``(k, rows)``: the least-squares estimate of ``x_A'``."""

    @abstractmethod
    def pinv_rows(self, q: np.ndarray) -> np.ndarray:
        """``q B^+`` for a batch ``(k, cells)`` of subqueries (variance = squared row norm)."""

    @abstractmethod
    def matrix(self) -> Matrix:
        """``B`` as an implicit matrix over the cells of the marginal (for a measurement request)."""

    def variances(self, q: np.ndarray) -> np.ndarray:
        """``q V^+ q^T`` for each row of the batch ``q`` (at ``sigma = 1``)."""
        return np.sum(self.pinv_rows(q) ** 2, axis=1)

    def dense(self) -> np.ndarray:
        """``B`` as a dense array (small marginals: tests and inspection)."""
        return self.forward(np.eye(self.cells)).T


class DenseSolution(SubSolution):
    """``B`` and ``B^+`` stored explicitly (``r x n`` and ``n x r``)."""

    def __init__(self, shape: Sequence[int], b: np.ndarray, b_pinv: np.ndarray, loss: float, lower: float | None):
        self.shape = tuple(int(s) for s in shape)
        self.b = np.ascontiguousarray(b)
        self.b_pinv = np.ascontiguousarray(b_pinv)
        self.loss = float(loss)
        self.lower = None if lower is None else float(lower)

    @property
    def num_rows(self) -> int:
        return self.b.shape[0]

    def forward(self, x: np.ndarray) -> np.ndarray:
        return x @ self.b.T

    def backward(self, y: np.ndarray) -> np.ndarray:
        return y @ self.b_pinv.T

    def pinv_rows(self, q: np.ndarray) -> np.ndarray:
        return q @ self.b_pinv

    def matrix(self) -> Matrix:
        return Dense(self.b)


def centered_basis_solution(n: int) -> DenseSolution:
    """ResidualPlanner's measurement of one attribute: ``V = n/(n-1) C`` (``C = I - 11^T/n``).

    Equivalent to measuring ``Sub_n x`` with noise ``Sub Sub^T``; ``B = sqrt(n/(n-1)) U^T``
    for an orthonormal basis ``U`` of the vectors with zero sum. ``loss`` is left at 0:
    the residual-basis loss of a subworkload, ``p_A' tr(G)``, is set on the product.
    """
    u, _ = np.linalg.qr(sub_matrix(n).T)
    factor = math.sqrt(n / (n - 1))
    return DenseSolution((n,), factor * u.T, u / factor, loss=0.0, lower=None)


class KronSolution(SubSolution):
    """``B = kron_p B_p`` over disjoint groups of axes ``parts = [(axes_p, solution_p)]``.

    The groups cover every axis of ``shape``; their order fixes the order of the
    measurements (C order over the parts' rows). ``loss`` and ``lower`` are given by the
    caller (the product of the parts' values times the Gram's scalar factor, or another
    formula for the residual basis).
    """

    def __init__(
        self,
        shape: Sequence[int],
        parts: Sequence[tuple[tuple[int, ...], SubSolution]],
        loss: float,
        lower: float | None,
    ):
        self.shape = tuple(int(s) for s in shape)
        self.parts = [(tuple(axes), sol) for axes, sol in parts]
        self.perm = [a for axes, _ in self.parts for a in axes]
        if sorted(self.perm) != list(range(len(self.shape))):
            raise ValueError(f"parts {[axes for axes, _ in self.parts]} do not cover the axes of {self.shape}")
        for axes, sol in self.parts:
            if tuple(self.shape[a] for a in axes) != sol.shape:
                raise ValueError(f"part on axes {axes} has shape {sol.shape}, expected {[self.shape[a] for a in axes]}")
        self.loss = float(loss)
        self.lower = None if lower is None else float(lower)

    @property
    def num_rows(self) -> int:
        return math.prod(sol.num_rows for _, sol in self.parts)

    def _apply(self, batch: np.ndarray, sizes: list[int], method: str) -> np.ndarray:
        """Apply ``method`` of each part along its axis of a ``(k, sizes...)`` tensor."""
        t = batch.reshape((batch.shape[0], *sizes))
        for p, (_, sol) in enumerate(self.parts):
            moved = np.moveaxis(t, p + 1, -1)
            lead = moved.shape[:-1]
            out = getattr(sol, method)(moved.reshape(-1, moved.shape[-1]))
            t = np.moveaxis(out.reshape(*lead, out.shape[-1]), -1, p + 1)
        return t.reshape(batch.shape[0], -1)

    def _to_parts(self, x: np.ndarray) -> np.ndarray:
        """Cells in ``shape`` order -> cells grouped by part (C order over parts)."""
        t = x.reshape((x.shape[0], *self.shape)).transpose([0] + [a + 1 for a in self.perm])
        return t.reshape(x.shape[0], -1)

    def _from_parts(self, x: np.ndarray) -> np.ndarray:
        t = x.reshape((x.shape[0], *(self.shape[a] for a in self.perm)))
        return t.transpose([0] + [self.perm.index(a) + 1 for a in range(len(self.shape))]).reshape(x.shape[0], -1)

    def _part_cells(self) -> list[int]:
        return [sol.cells for _, sol in self.parts]

    def _part_rows(self) -> list[int]:
        return [sol.num_rows for _, sol in self.parts]

    def forward(self, x: np.ndarray) -> np.ndarray:
        return self._apply(self._to_parts(x), self._part_cells(), "forward")

    def backward(self, y: np.ndarray) -> np.ndarray:
        return self._from_parts(self._apply(y, self._part_rows(), "backward"))

    def pinv_rows(self, q: np.ndarray) -> np.ndarray:
        return self._apply(self._to_parts(q), self._part_cells(), "pinv_rows")

    def matrix(self) -> Matrix:
        product = Kronecker([sol.matrix() for _, sol in self.parts])
        if self.perm == sorted(self.perm):
            return product
        # permutation P with P vec(x) = vec(x grouped by part)
        order = np.arange(self.cells).reshape(self.shape).transpose(self.perm).ravel()
        perm = sp.csr_array((np.ones(self.cells), (np.arange(self.cells), order)), shape=(self.cells, self.cells))
        return Product([product, Sparse(perm)])
