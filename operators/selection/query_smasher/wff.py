"""WFF: the Fourier-basis subworkload solver (QuerySmasher App. C; Xiao et al.'s WFF).

Fast and approximate: instead of optimising ``V`` it fixes the (real) Fourier basis of the
marginal and only chooses how much noise each coefficient gets, in closed form.

For the marginal on ``A'`` (shape ``(d_1..d_l)``, ``N`` cells) the subworkload's queries
are centred along every axis, so only frequencies ``j`` with every ``j_m`` in
``[1, d_m - 1]`` matter. For a query ``q`` with ``F = ifftn(q)`` (``1/N`` normalisation),
``q.x = sum_j F[j] fftn(x)[j]``. Measuring the real and imaginary part of ``fftn(x)[j]``
(one pair per conjugate pair ``j, -j``; only the real part if ``j = -j``) with variance
``theta_j`` costs ``1/theta_j`` (every Fourier coefficient of a unit vector has modulus 1)
and gives ``q`` the variance ``sum 4 theta_j |F[j]|^2`` (``theta_j |F[j]|^2`` when
self-conjugate). Summed over the weighted subworkload, ``|F[j]|^2`` becomes
``c_j = phi_j^H G phi_j`` with ``phi_j`` the ``j``-th column of the ``ifftn`` matrix, so
WFF, like the exact solver, only needs the Gram. The optimal allocation at pcost 1 is
``theta_j = gamma / sqrt(c'_j)`` (``c'_j = 4 c_j``, or ``c_j`` when self-conjugate),
``gamma = sum sqrt(c'_j)``, with loss ``gamma^2 = (sum_{all j} sqrt(c_j))^2``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...matrix import Dense, Matrix
from .solutions import SubSolution

#: Fourier weights below this fraction of the largest are treated as zero (not measured).
ZERO_TOL = 1e-12


def fourier_weights(gram: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``c_j = phi_j^H G phi_j`` for every frequency ``j`` (a real tensor of ``shape``)."""
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    axes = tuple(range(1, len(shape) + 1))
    g_phi = np.fft.ifftn(np.asarray(gram, dtype=np.float64).reshape((n, *shape)), axes=axes).reshape(n, n)
    both = np.fft.fftn(g_phi.reshape((*shape, n)), axes=tuple(range(len(shape)))).reshape(n, n) / n
    return np.maximum(np.real(np.diagonal(both)), 0.0).reshape(shape)


class FourierSolution(SubSolution):
    """The WFF strategy for weights ``c`` (a tensor over ``shape``, from :func:`fourier_weights`).

    Rows of ``B`` in order: real parts of the non-self-conjugate representatives, their
    imaginary parts, then the self-conjugate coefficients, each scaled by ``theta^-1/2``.
    """

    def __init__(self, shape: Sequence[int], weights: np.ndarray):
        self.shape = tuple(int(s) for s in shape)
        if not self.shape:
            raise ValueError("the Fourier solver needs at least one axis (the total is a 1 x 1 problem)")
        c = np.asarray(weights, dtype=np.float64).reshape(self.shape)
        grid = np.indices(self.shape).reshape(len(self.shape), -1)
        dims = np.array(self.shape)[:, None]
        neg = np.ravel_multi_index(tuple((-grid) % dims), self.shape)
        flat = np.arange(self.cells)
        inside = np.all(grid >= 1, axis=0)
        measured = inside & (flat <= neg) & (c.ravel() > ZERO_TOL * c.max())
        self_conj = measured & (flat == neg)
        pair = measured & (flat != neg)
        self._pair, self._pair_neg, self._self = flat[pair], neg[pair], flat[self_conj]
        c_flat = c.ravel()
        c_pair, c_self = 4.0 * c_flat[self._pair], c_flat[self._self]
        gamma = float(np.sum(np.sqrt(c_pair)) + np.sum(np.sqrt(c_self)))
        self._theta_pair = gamma / np.sqrt(c_pair)
        self._theta_self = gamma / np.sqrt(c_self)
        self.loss = gamma * gamma
        self.lower = None

    @property
    def num_rows(self) -> int:
        return 2 * len(self._pair) + len(self._self)

    def _axes(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.shape) + 1))

    def forward(self, x: np.ndarray) -> np.ndarray:
        f = np.fft.fftn(x.reshape((x.shape[0], *self.shape)), axes=self._axes()).reshape(x.shape[0], -1)
        a = f[:, self._pair] / np.sqrt(self._theta_pair)
        return np.concatenate([a.real, a.imag, f[:, self._self].real / np.sqrt(self._theta_self)], axis=1)

    def backward(self, y: np.ndarray) -> np.ndarray:
        k, m = y.shape[0], len(self._pair)
        spectrum = np.zeros((k, self.cells), dtype=np.complex128)
        coef = (y[:, :m] + 1j * y[:, m : 2 * m]) * np.sqrt(self._theta_pair)
        spectrum[:, self._pair] = coef
        spectrum[:, self._pair_neg] = np.conj(coef)
        spectrum[:, self._self] = y[:, 2 * m :] * np.sqrt(self._theta_self)
        x = np.fft.ifftn(spectrum.reshape((k, *self.shape)), axes=self._axes())
        return np.real(x).reshape(k, -1)

    def pinv_rows(self, q: np.ndarray) -> np.ndarray:
        f = np.fft.ifftn(q.reshape((q.shape[0], *self.shape)), axes=self._axes()).reshape(q.shape[0], -1)
        a = 2.0 * f[:, self._pair] * np.sqrt(self._theta_pair)
        return np.concatenate([a.real, -a.imag, f[:, self._self].real * np.sqrt(self._theta_self)], axis=1)

    def matrix(self) -> Matrix:
        return Dense(self.dense())
