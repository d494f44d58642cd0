"""Estimates of marginals (ResidualPlanner, QuerySmasher): the Estimate interface over attribute sets.

A workload for these estimates is ``None`` (the plan's own workload), a ``MarginalStack`` matrix (its
subsets, each row weight scaling its answers), or a list of items, each an attribute set (names or
positions: every cell of that marginal) or a pair ``(attributes, Q)``: the linear queries ``Q`` over
that marginal's cells, its axes in the order the attributes are given. Noise is Gaussian, so the
intervals are exact.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable

import numpy as np

from .matrix import Matrix
from .estimate import Estimate, IntervalMethod, intervals_from
from .confidence import ConfidenceIntervals, check_level, normal_halfwidths
from .matrices import MarginalStack

Item = tuple[tuple[int, ...], tuple[int, ...], object, float]  # (domain-order subset, given order, Q or None, weight)


class MarginalEstimate(Estimate):
    """Answers, variances and intervals for marginal workloads from ``marginal`` / ``covariance``."""

    domain = None  # set by the reconstruction this is mixed into

    @abstractmethod
    def marginal(self, attributes) -> np.ndarray:
        """The estimated marginal on ``attributes`` (a tensor, its axes in the order given)."""

    @abstractmethod
    def cell_covariance(self, subset: tuple[int, ...]) -> np.ndarray | None:
        """Covariance of the marginal's cells (C order, domain order), or None if unknown."""

    @abstractmethod
    def default_workload(self) -> list:
        """The workload the plan was run with, as items."""

    def _items(self, W) -> list[Item]:
        if W is None:
            W = self.default_workload()
        if isinstance(W, MarginalStack):
            return [(s, s, None, w) for s, w in W.weights.items()]
        if isinstance(W, Matrix) or isinstance(W, (str, int)) or not isinstance(W, Iterable):
            raise TypeError("a marginal workload is a MarginalStack or a list of attribute sets or "
                            "(attributes, queries) pairs")
        items = []
        for item in W:
            attributes, Q = (item if isinstance(item, tuple) and len(item) == 2 and _is_queries(item[1])
                             else (item, None))
            given = self._positions(attributes)
            items.append((tuple(sorted(given)), given, Q, 1.0))
        return items

    def _positions(self, attributes) -> tuple[int, ...]:
        names = self.domain.names
        if isinstance(attributes, (str, int)):
            attributes = (attributes,)
        positions = []
        for a in attributes:
            if isinstance(a, str):
                if a not in names:
                    raise ValueError(f"unknown attribute {a!r}; the domain has {list(names)}")
                positions.append(names.index(a))
            elif isinstance(a, (int, np.integer)) and 0 <= a < len(names):
                positions.append(int(a))
            else:
                raise ValueError(f"attribute {a!r} is neither a name nor a position 0..{len(names) - 1}")
        if len(set(positions)) != len(positions):
            raise ValueError(f"attributes repeat in {tuple(attributes)}")
        return tuple(positions)

    def _order(self, subset: tuple[int, ...], given: tuple[int, ...]) -> np.ndarray:
        """Cell permutation from domain order to the given order."""
        shape = [self.domain.sizes[i] for i in subset]
        cells = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
        return cells.transpose([subset.index(i) for i in given]).ravel()

    def answer(self, W=None) -> np.ndarray:
        out = []
        for subset, given, Q, weight in self._items(W):
            cells = np.asarray(self.marginal(subset), dtype=np.float64).ravel()[self._order(subset, given)]
            out.append(weight * (cells if Q is None else np.asarray(Q @ cells, dtype=np.float64).ravel()))
        return np.concatenate(out) if out else np.empty(0)

    def variances(self, W=None) -> np.ndarray:
        out = []
        for subset, given, Q, weight in self._items(W):
            size = int(np.prod([self.domain.sizes[i] for i in subset], dtype=np.int64))
            rows = size if Q is None else Q.shape[0]
            covariance = self.cell_covariance(subset) if Q is not None or size <= 4096 else None
            if covariance is None:
                out.append(np.full(rows, self.cell_variance(subset) * weight**2))
                continue
            order = self._order(subset, given)
            covariance = covariance[np.ix_(order, order)]
            diagonal = np.diag(covariance) if Q is None else _quadratic_diagonal(Q, covariance)
            out.append(weight**2 * diagonal)
        return np.concatenate(out) if out else np.empty(0)

    def cell_variance(self, subset: tuple[int, ...]) -> float:
        """Each cell's variance when all cells of the marginal have the same (NaN if unknown)."""
        return float("nan")

    def intervals(self, W=None, level: float = 0.95, method: IntervalMethod = "auto") -> ConfidenceIntervals:
        level = check_level(level)
        variances = self.variances(W)
        return intervals_from(self.answer(W), level, normal_halfwidths(variances, level), "exact (Gaussian)")

    def labels(self, W=None) -> list[str]:
        names = self.domain.names
        out = []
        for subset, given, Q, _ in self._items(W):
            title = ",".join(names[i] for i in given) or "total"
            if Q is None:
                shape = [self.domain.sizes[i] for i in given]
                out += [f"{title}{list(index)}" for index in np.ndindex(*shape)] if shape else [title]
            else:
                out += [f"{title} query {k}" for k in range(Q.shape[0])]
        return out


def _is_queries(value) -> bool:
    return isinstance(value, (Matrix, np.ndarray)) or hasattr(value, "toarray")


def _quadratic_diagonal(Q, covariance: np.ndarray) -> np.ndarray:
    """diag(Q C Q^T) for a query matrix (kernel Matrix, numpy or scipy) and a dense covariance."""
    dense = Q.dense() if isinstance(Q, Matrix) else (Q.toarray() if hasattr(Q, "toarray") else np.asarray(Q))
    dense = np.atleast_2d(np.asarray(dense, dtype=np.float64))
    return np.einsum("ij,jk,ik->i", dense, covariance, dense)

