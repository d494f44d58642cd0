"""The SVD lower bound: the least expected error any strategy can reach on a workload (Li and Miklau), with HDMM's
closed form for marginal workloads (J Thm 12, corrected multiplicities).

What no selector can beat, so the advice and the CLI quote it beside each pick's error. It sits with HDMM's
marginal lattice, which its closed form needs; the error formulas below it (operators.error) need nothing of it.
"""

from __future__ import annotations

import math

import numpy as np

from ...algebra import gram
from ...error import dense_gram, noise_constant
from ...matrix import Kronecker, Matrix, Weighted
from ...measurement import NoiseKind as Noise
from .marginals import marginal_svdb


def svd_bound(W: Matrix, noise: Noise = "laplace") -> float:
    """Lower bound on expected_error(W, A, noise) over all strategies A (Li and Miklau's SVD bound).

    SVDB(W) = (sum of singular values of W)^2 / n, with SVDB(kron W_i) = prod SVDB(W_i), and for marginal
    workloads (identity and total blocks) the closed form of HDMM J Thm 12 on any number of cells; the Laplace
    bound is 2 SVDB because ||A||_1 >= ||A||_2.
    """
    constant, _ = noise_constant(noise)
    closed_form = marginal_svdb(W)
    return constant * (singular_value_bound(W) if closed_form is None else closed_form)


def singular_value_bound(W: Matrix) -> float:
    """SVDB(W) from the singular values themselves (per Kronecker factor), without the closed form."""
    if isinstance(W, Kronecker):
        return math.prod(singular_value_bound(f) for f in W.factors)
    if isinstance(W, Weighted):
        return W.weight**2 * singular_value_bound(W.base)
    eigenvalues = np.linalg.eigvalsh(dense_gram(gram(W)))
    return float(np.sqrt(np.clip(eigenvalues, 0.0, None)).sum() ** 2 / W.shape[1])
