"""Expected error of answering a workload W with a strategy A by least squares (the SVD lower bound over all
strategies is operators.selection.hdmm.bound's).

Total squared error at unit noise (Laplace with epsilon = 1; Gaussian with sigma = 1 per unit of
L2 sensitivity, i.e. pcost 1):

    Laplace:  2 * ||A||_1^2 * ||W A^+||_F^2        Gaussian:  ||A||_2^2 * ||W A^+||_F^2

with ||W A^+||_F^2 = tr[(A^T A)^+ W^T W], infinite unless W is in the row space of A.
Everything goes through Grams: a Kronecker strategy factorizes the trace per attribute,
a union workload sums over its blocks, and only small per-factor Grams are ever dense.

>>> from ektelo_ng.operators.matrix import Identity
>>> from ektelo_ng.operators.matrices import Prefix
>>> round(rmse(Prefix(1024), Identity(1024)), 2)    # J Table 4, Identity column
32.02
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from .matrix import Identity, Kronecker, Matrix, VStack, Weighted
from .algebra import frobenius_squared, gram
from .matrices import as_matrix
from .measurement import NoiseKind as Noise

#: Largest dense Gram side the generic path will build (n x n doubles).
DENSE_LIMIT = 8192


def noise_constant(noise: Noise) -> tuple[float, str]:
    """(squared-error factor of unit noise, the sensitivity norm it scales with): (2, l1) Laplace, (1, l2) Gaussian."""
    if noise == "laplace":
        return 2.0, "l1"
    if noise == "gaussian":
        return 1.0, "l2"
    raise ValueError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")


def expected_error(W: Matrix, A: Matrix, noise: Noise = "laplace") -> float:
    """Total squared error over W's queries at unit noise (see module docstring); A may be a strategy."""
    A = as_matrix(A)
    constant, norm = noise_constant(noise)
    _check_columns(W, A)
    return constant * A.sensitivity(norm) ** 2 * reconstruction_error(W, A)


def rmse(W: Matrix, A: Matrix, noise: Noise = "laplace") -> float:
    """Root mean squared error per query at unit noise: sqrt(expected_error / #queries)."""
    return math.sqrt(expected_error(W, A, noise) / W.shape[0])


def reconstruction_error(W: Matrix, A: Matrix) -> float:
    """||W A^+||_F^2 = tr[(A^T A)^+ W^T W] (inf when W is not answerable from A)."""
    _check_columns(W, A)
    if isinstance(W, Weighted):
        return W.weight**2 * reconstruction_error(W.base, A)
    if isinstance(W, VStack):
        return float(sum(reconstruction_error(block, A) for block in W.blocks))
    if isinstance(A, Identity):
        return frobenius_squared(W)
    if isinstance(A, Weighted):
        return reconstruction_error(W, A.base) / A.weight**2 if A.weight else math.inf
    if isinstance(A, Kronecker) and isinstance(W, Kronecker) and _aligned(W, A):
        return math.prod(reconstruction_error(w, a) for w, a in zip(W.factors, A.factors))
    return _dense_trace(gram(W), gram(A))


def _aligned(W: Kronecker, A: Kronecker) -> bool:
    return len(W.factors) == len(A.factors) and all(
        w.shape[1] == a.shape[1] for w, a in zip(W.factors, A.factors)
    )


def _check_columns(W: Matrix, A: Matrix) -> None:
    if W.shape[1] != A.shape[1]:
        raise ValueError(
            f"workload and strategy must act on the same domain: W has {W.shape[1]} columns, A has {A.shape[1]}"
        )


def dense_gram(G: Matrix) -> np.ndarray:
    """A Gram as a dense array, refused (naming the remedy) beyond DENSE_LIMIT on a side."""
    n = G.shape[0]
    if n > DENSE_LIMIT:
        raise NotImplementedError(
            f"this workload/strategy pair has no structure to exploit and a {n} x {n} Gram is too large to form; "
            "use Kronecker-structured workloads and strategies"
        )
    return G.dense()


def _dense_trace(WtW: Matrix, AtA: Matrix) -> float:
    V, G = dense_gram(WtW), dense_gram(AtA)
    try:  # full column rank (the usual case): one Cholesky solve
        factor = scipy.linalg.cho_factor(G)
        if np.min(np.abs(np.diag(factor[0]))) ** 2 > np.max(np.diag(G)) * G.shape[0] * 1e-12:
            return float(np.trace(scipy.linalg.cho_solve(factor, V)))
    except np.linalg.LinAlgError:
        pass
    eigenvalues, vectors = np.linalg.eigh(G)
    tolerance = eigenvalues.max(initial=0.0) * G.shape[0] * np.finfo(float).eps
    keep = eigenvalues > tolerance
    basis = vectors[:, keep]
    # W must lie in the row space of A: no workload energy outside span(basis).
    outside = np.trace(V) - np.trace(basis.T @ V @ basis)
    if outside > 1e-8 * max(np.trace(V), 1.0):
        return math.inf
    return float(np.trace((basis.T @ V @ basis) / eigenvalues[keep][:, None]))
