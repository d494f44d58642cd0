"""A model fitted on a compressed domain (rare values of an attribute merged into one), read on the original one.

MST measures its one-way marginals first and merges each attribute's values whose noisy counts are below a
threshold (McKenna, Miklau, Sheldon 2021, section 3): the model is then fitted over the merged values. This wrapper
answers on the original domain by spreading a merged value's mass evenly over the values it merged, and its
synthetic records draw a merged value's original uniformly among them: the model's marginals and its records'
agree, and both are post-processing.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...kernel.domain import Domain
from .model import Model
from .tables import Clique


class CompressedModel(Model):
    """``inner`` fitted over ``codes`` (per attribute position, the merged value of each original value)."""

    def __init__(self, domain: Domain, inner: Model, codes: Mapping[int, np.ndarray]):
        super().__init__(domain, inner.total, inner.history, inner.measured)
        self.inner, self.codes = inner, dict(codes)
        self.method = inner.method
        self.fit_report = getattr(inner, "fit_report", None)

    def _marginal(self, subset: Clique) -> np.ndarray:
        table = self.inner.marginal(list(subset))
        for axis, i in enumerate(subset):
            if i in self.codes:
                codes = self.codes[i]
                share = 1.0 / np.bincount(codes)[codes]  # each original value's part of its merged value
                table = np.moveaxis(np.moveaxis(table, axis, 0)[codes] * share.reshape(-1, *[1] * (table.ndim - 1)),
                                    0, axis)
        return table

    def _sample(self, n_rows: int, rng: np.random.Generator) -> np.ndarray:
        records = self.inner._sample(n_rows, rng)
        for i, codes in self.codes.items():
            order = np.argsort(codes, kind="stable")  # original values grouped by merged value
            starts = np.searchsorted(codes[order], np.arange(int(codes.max()) + 1))
            counts = np.bincount(codes)
            merged = records[:, i]
            records[:, i] = order[starts[merged] + (rng.random(n_rows) * counts[merged]).astype(np.int64)]
        return records
