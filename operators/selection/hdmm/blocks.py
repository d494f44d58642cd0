"""The distinct workload blocks of each attribute of a union of products, and their factor errors.

Products repeat blocks (a marginal workload has only I and T per attribute), so factor
errors and surrogate Grams are computed once per distinct block, not once per product. A box
workload is the other extreme: thousands of products whose blocks are one-row intervals.
Those rows are stacked into one interval matrix per attribute, so a surrogate Gram is one
row-weighted part and the factor errors of all rows come from one product with the strategy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...matrix import Intervals, Matrix
from .gram import Gram, Term
from .opt0 import factor_error, row_errors
from ..strategy import Noise
from ...specs import to_spec


def _is_row_interval(block: Matrix) -> bool:
    return type(block) is Intervals and block.shape[0] == 1


class AttributeBlocks:
    """For each attribute i: its distinct blocks, and which of them each product j uses."""

    def __init__(self, terms: Sequence[Term]):
        d = len(terms[0][1])
        self.index = np.zeros((len(terms), d), dtype=np.int64)
        self.blocks: list[list[Matrix]] = [[] for _ in range(d)]
        self.rows: list[Intervals | None] = []
        for i in range(d):
            blocks: dict[str, int] = {}
            rows: dict[tuple[int, int], int] = {}
            is_row = np.zeros(len(terms), dtype=bool)
            for j, (_, factors) in enumerate(terms):
                block = factors[i]
                if _is_row_interval(block):
                    is_row[j] = True
                    self.index[j, i] = rows.setdefault((int(block.lo[0]), int(block.hi[0])), len(rows))
                else:
                    key = to_spec(block).model_dump_json()
                    if key not in blocks:
                        blocks[key] = len(self.blocks[i])
                        self.blocks[i].append(block)
                    self.index[j, i] = blocks[key]
            self.index[is_row, i] += len(self.blocks[i])  # rows are numbered after the other blocks
            ends = np.array(list(rows), dtype=np.int64).reshape(-1, 2)
            self.rows.append(Intervals(terms[0][1][i].shape[1], ends[:, 0], ends[:, 1]) if rows else None)
        self.grams = [[Gram.of(block) for block in blocks] for blocks in self.blocks]

    def errors(self, i: int, A: Matrix, noise: Noise) -> np.ndarray:
        """The factor error of strategy block A for attribute i's block of every product j."""
        per_block = [factor_error(A, g, noise) for g in self.grams[i]]
        rows = self.rows[i]
        per_row = row_errors(A, rows, noise) if rows is not None else np.zeros(0)
        return np.concatenate([np.array(per_block, dtype=np.float64), per_row])[self.index[:, i]]

    def surrogate(self, i: int, coefficients: np.ndarray) -> Gram:
        """sum_j coefficients_j (W_i^(j))^T W_i^(j): one part per distinct block, one for all rows."""
        count = len(self.blocks[i])
        rows = self.rows[i]
        size = count + (rows.shape[0] if rows is not None else 0)
        summed = np.bincount(self.index[:, i], weights=coefficients, minlength=size)
        parts: list[tuple[float | np.ndarray, Matrix]] = list(zip(summed[:count], self.blocks[i]))
        if rows is not None:
            parts.append((summed[count:], rows))
        return Gram(parts)
