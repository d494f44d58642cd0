"""What a graphical-model fit returns: marginals, answers to marginal queries, synthetic records and the loss history.

A model is a :class:`MarginalEstimate`, so ``answer`` takes a list of items, each an attribute set (every cell
of that marginal) or an ``(attributes, Q)`` pair (queries ``Q`` over that marginal's cells, C order, axes in the
order given). Its marginals are non-negative and sum to ``total``. No variances are known (post-processing
of the measurements, not an unbiased estimate): ``variances`` are NaN.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from ...kernel.domain import Domain
from ..estimate import unavailable
from ..confidence import ConfidenceIntervals
from ..marginal_estimate import MarginalEstimate
from .tables import Clique


#: Most synthetic records drawn at once (8 bytes a value: 800 MB a column).
MAX_ROWS = 10**8


class Model(MarginalEstimate):
    """Common face of the exact (junction tree) and approximate (region graph) models."""

    #: Which of ``fit``'s methods made it: "exact" or "approximate" (what ``method="auto"`` chose).
    method: str

    def __init__(self, domain: Domain, total: float, history: list[float], measured: list[Clique]):
        self.domain = domain
        self.total = float(total)
        self.history = list(history)
        self.measured = list(measured)

    def marginal(self, attributes) -> np.ndarray:
        """The fitted marginal on ``attributes`` (names or positions): a count tensor, axes in the order given."""
        given = self._positions(attributes)
        subset = tuple(sorted(given))
        return self._marginal(subset).transpose([subset.index(i) for i in given])

    @abstractmethod
    def _marginal(self, subset: Clique) -> np.ndarray:
        """The count tensor over sorted positions ``subset``."""

    def synthetic(self, n_rows: int | None = None, seed: int | np.random.Generator | None = None, *,
                  labels: bool = False) -> dict[str, np.ndarray]:
        """``n_rows`` synthetic records (default: the total, rounded) as ``{name: integer codes}``; with
        ``labels``, an attribute that has value labels gives them instead of its codes (as the table was read)."""
        rows = int(round(self.total)) if n_rows is None else n_rows
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or not 0 <= rows <= MAX_ROWS:
            raise ValueError(f"n_rows must be a whole number from 0 to {MAX_ROWS:,}, got {n_rows!r}")
        if not (seed is None or isinstance(seed, np.random.Generator)
                or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool))):
            raise ValueError(f"seed must be a whole number, a numpy Generator or None, got {seed!r}")
        records = self._sample(int(rows), np.random.default_rng(seed))
        return {a.name: np.asarray(a.labels)[records[:, i]] if labels and a.labels else records[:, i]
                for i, a in enumerate(self.domain.attributes)}

    def synthetic_frame(self, n_rows: int | None = None, seed: int | np.random.Generator | None = None):
        """The synthetic records as a pandas DataFrame, one column per attribute, labels where the domain has
        them (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("synthetic_frame needs pandas (pip install -e '.[pandas]'); synthetic() does not") from None
        return pandas.DataFrame(self.synthetic(n_rows, seed, labels=True))

    @abstractmethod
    def _sample(self, n_rows: int, rng: np.random.Generator) -> np.ndarray:
        """Records as a (rows, attributes) array of codes."""

    def cell_covariance(self, subset: tuple[int, ...]) -> None:
        return None

    def intervals(self, W=None, level: float = 0.95, method: str = "auto") -> ConfidenceIntervals:
        """No intervals (NaN bounds): the fit is post-processing of the measurements, not an unbiased estimate
        whose variance is known."""
        return unavailable(self.answer(W), level, "a fitted model has no error bars")

    def default_workload(self) -> list:
        return list(self.measured)
