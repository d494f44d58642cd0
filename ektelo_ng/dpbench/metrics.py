"""DPBench's error measure: the scaled average per-query error of an estimate on a workload.

With ``diff = W x - W x_hat`` over ``q`` queries and ``s = ||x||_1`` records (DPBench, as stated in
the data's NOTICE.md): ``L1 = ||diff||_1 / (q s)``, ``L2 = ||diff||_2 / (q s)`` (not an RMSE) and
``Linf = ||diff||_inf / s``. Dividing by the scale makes errors comparable across scales. The
error is measured against ``x``, the sample the algorithm was run on (DPBench's Type I error),
not against the shape it was drawn from.
"""

from __future__ import annotations

import numpy as np

from ektelo_ng.operators.matrix import Matrix

METRICS = ("L1", "L2", "Linf")


def scaled_errors(workload: Matrix, x: np.ndarray, estimate: np.ndarray) -> dict[str, float]:
    """``{"L1", "L2", "Linf"}`` of ``estimate`` against the true data vector ``x`` on ``workload``."""
    x = np.asarray(x, dtype=np.float64).ravel()
    estimate = np.asarray(estimate, dtype=np.float64).ravel()
    if estimate.shape != x.shape:
        raise ValueError(f"the estimate has {estimate.size} cells, the data {x.size}")
    scale = x.sum()
    if not scale > 0:
        raise ValueError("the data vector is empty: DPBench errors are scaled by its record count")
    diff = workload @ (x - estimate)
    queries = diff.size
    return {
        "L1": float(np.abs(diff).sum() / (queries * scale)),
        "L2": float(np.linalg.norm(diff) / (queries * scale)),
        "Linf": float(np.abs(diff).max() / scale),
    }
