"""Expected error of a strategy on a workload, and the least any strategy can reach (re-exported from
operators.error and operators.selection.hdmm.bound)."""

from ektelo_ng.operators.error import expected_error, reconstruction_error, rmse
from ektelo_ng.operators.selection.hdmm.bound import svd_bound

__all__ = ["expected_error", "reconstruction_error", "rmse", "svd_bound"]
