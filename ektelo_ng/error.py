"""Expected error of a strategy on a workload (re-exported from operators.error)."""

from ektelo_ng.operators.error import expected_error, reconstruction_error, rmse, svd_bound

__all__ = ["expected_error", "reconstruction_error", "rmse", "svd_bound"]
