"""EFPA (Acs, Castelluccia and Chen 2012, enhanced Fourier perturbation; a DPBench algorithm): keep the k
lowest real Fourier frequencies of the histogram, with k chosen privately, and measure only those.

selection_share * eps buys k from the kernel's vetted ``fourier_select`` (docs/privacy/efpa.md), which trades the
signal dropped, ||x - P_k x||_2, against the noise that measuring k coefficients with (1 - selection_share) * eps will
add (the public ``offsets``). The k coefficients are then measured with Laplace noise (the kernel derives the
scale from the Fourier rows' exact L1 sensitivity), and least squares returns the inverse transform of the
noisy coefficients (the rows are orthonormal).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from kernel.matrix import Fourier, Matrix
from operators import measure
from operators.client import Handle
from operators.estimate import VectorEstimate
from plans.common import CONDITIONAL, BudgetLike, epsilon_of, solved, split_budget


def noise_error(n: int, epsilon: float) -> np.ndarray:
    """For k = 1..n, an upper bound on the expected L2 error of k Fourier coefficients measured with Laplace
    noise at ``epsilon``: scale b_k = s_k / eps with s_k the rows' L1 sensitivity, error b_k sqrt(2 k).

    A column of the first k rows has entries of size at most sqrt(2 / n) (1 / sqrt(n) for the constant row)
    and L2 norm at most 1, so s_k <= min(sqrt(k), (1 + (k - 1) sqrt(2)) / sqrt(n)).
    """
    k = np.arange(1, n + 1)
    sensitivity = np.minimum(np.sqrt(k), (1 + (k - 1) * np.sqrt(2.0)) / np.sqrt(n))
    return sensitivity / epsilon * np.sqrt(2.0 * k)


def efpa(source: Handle, workload: Matrix, budget: BudgetLike, *, shape: Sequence[int] | None = None,
         selection_share: float | Fraction | str = 0.3) -> VectorEstimate:
    """EFPA in 1-D: choose k with selection_share * eps, measure the k lowest frequencies with the rest.

    ``selection_share`` (ours; the paper splits the budget by a heuristic): selection needs much less
    than the measurement, which sets the error of every kept coefficient."""
    vector, dims = measure.data_vector(source, shape)
    if len(dims) != 1:
        raise ValueError(f"EFPA compresses a 1-D histogram; got {len(dims)} dimensions")
    select_epsilon, measure_epsilon = split_budget(epsilon_of(budget), selection_share, "selection_share")
    k = vector.fourier_select(noise_error(vector.size, float(measure_epsilon)), select_epsilon)
    measured = measure.laplace(vector, Fourier(vector.size, k), measure_epsilon)
    return solved([measured], vector.size, workload, CONDITIONAL.format("the number of frequencies"))
