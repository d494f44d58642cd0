"""The one evaluation algorithm of the sealed matrix language, with its cost and rounding bounds derived beside it
(docs/privacy/arithmetic.md#the-sealed-language).

A block ``c * kron(L_1, ..., L_d)`` (c: the weight, or fl(weight * row_weights) per row) is applied to counts x
with ||x||_1 <= N one leaf at a time, each along its own axis: first the leaves with integer algorithms (identity,
ones, ranges), then the dot-product leaves (dense, sparse, fourier), then the weights, once. Then:

- every value the integer leaves produce is an integer of magnitude at most N prod(growth) < 2^53 (else the
  block is refused), so they are exact;
- if every dot-product leaf is integer and every value stays below 2^53, and c is an integer, the block is
  exact; otherwise each answer is within gamma(L + 1) (|c| |K| |x|)_r + 2 (|c| + 1) U of the exact one, L the
  dot-product lengths summed, U the underflows (``Block.underflow``), which sums over the rows to at most
  gamma(L + 1) Delta_1 N + rows 2 (|c| + 1) U;
- an answer r whose matrix entry K_rj is 0 does not depend on x_j at all (0 * x_j adds 0): on neighbouring tables
  only the ``nonzeros`` rows of column j can differ.

So on neighbours the answers differ in L1 by at most Delta_1 + 2 error (``Released``), where Delta_1 is the largest
column L1 norm of the matrix actually applied (the float entries and weights), and in L2 by Delta_2 + 2 error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, reduce
from typing import Literal, NamedTuple

import numpy as np

from . import spec as s
from .leaves import BUILDERS, COSTS, EXACT, Leaf, LeafCost
from .rounding import LIMIT, TINY, UNIT, above, exact_product, gamma, product_above
from .threads import single_threaded_blas
from ..limits import OBJECT_STEPS, Cost, Limits, Work

Norm = Literal["l1", "l2"]

DOT_KINDS = ("dense", "sparse", "fourier")
"""Leaves applied by dot products, after the others: a ranges leaf's prefix sums and differences are exact on
integers, but not bounded entry by entry on rounded values."""


def _order(factors: list) -> list[int]:
    """The evaluation order of a block's factors: the identity, ones and ranges leaves first (exact on counts), then
    the dot-product leaves, each group in factor order."""
    return [k for k, f in enumerate(factors) if f.kind not in DOT_KINDS] + [
        k for k, f in enumerate(factors) if f.kind in DOT_KINDS
    ]


def block_cost(block: s.Block, limits: Limits, vectors: int) -> tuple[int, int, Cost, Cost]:
    """(rows, cols, cost of building the block and its column sums, cost of applying it to ``vectors`` vectors),
    from the spec alone; refuses any array over ``max_cells``."""
    leaves: list[LeafCost] = [COSTS[f.kind](f) for f in block.factors]
    for leaf, factor in zip(leaves, block.factors):
        limits.cells(f"a {factor.kind} leaf", max(leaf.rows, leaf.cols))
        if factor.kind == "ranges":
            limits.cells("a ranges leaf's prefix sums", math.prod(n + 1 for n in factor.shape) * vectors)
    rows, cols = math.prod(f.rows for f in leaves), math.prod(f.cols for f in leaves)
    limits.cells("the block's rows", rows * vectors)
    column_sums = sum(f.sums_steps for f in leaves) + 12 * cols  # one pass of Block._column_sums
    build = Cost(
        sum(f.build_steps for f in leaves)
        + 2 * column_sums  # two passes: L1 (every rounding bound) and L2 (Gaussian noise)
        + (len(leaves) + 1) * OBJECT_STEPS,
        sum(f.build_bytes for f in leaves) + 24 * cols,
    )
    if block.row_weights is not None:
        build = build + Cost(4 * rows, 16 * rows)
    size, apply = cols * vectors, Cost(0, 16 * cols * vectors)
    for k in _order(block.factors):
        leaf = leaves[k]
        after = size // leaf.cols * leaf.rows
        limits.cells("an intermediate of the block's evaluation", after)
        columns = size // leaf.cols
        apply = apply.then(
            Cost(
                2 * size + after + leaf.apply_steps * columns + leaf.call_steps,
                8 * (2 * size + after) + leaf.apply_bytes * columns,
            )
        )
        size = after
    return rows, cols, build, apply.then(Cost(2 * size, 16 * size))


def stack_cost(stack: s.Stack, limits: Limits, vectors: int = 1) -> tuple[tuple[int, int], Cost, Cost]:
    """(shape, cost of building the matrix and its sensitivities, cost of applying it to ``vectors`` vectors)."""
    shapes, build, apply = [], Cost(), Cost()
    for block in stack.blocks:
        rows, cols, made, applied = block_cost(block, limits, vectors)
        shapes.append((rows, cols))
        build, apply = build + made, apply.then(applied)
    widths = {cols for _, cols in shapes}
    if len(widths) != 1:
        raise ValueError(f"the stack's blocks have different numbers of columns: {sorted(widths)}")
    rows = sum(r for r, _ in shapes)
    limits.cells("the matrix's rows", rows * vectors)
    cols = widths.pop()
    sums = Cost(4 * len(stack.blocks) * cols + 2 * OBJECT_STEPS, 32 * cols)
    return (rows, cols), build.then(sums), apply.then(Cost(rows * vectors, 8 * rows * vectors))


class MatrixCost(NamedTuple):
    """A matrix's rows, and the cost of building it (with its sensitivities) and of applying it."""

    rows: int
    build: Cost
    apply: Cost


@dataclass(frozen=True)
class Released:
    """What a release of M x (||x||_1 <= N) rests on: ``sensitivity`` of the released floats before the release grid
    (the exact matrix's, plus twice the evaluation error); of the rows that can differ on neighbours (at most
    ``nonzeros``), ``rounded`` are not exact integers; ``peak``: every answer is below it."""

    sensitivity: float
    rounded: int
    nonzeros: int
    peak: float


class Block:
    """One block, built from its spec (after its cost was checked)."""

    def __init__(self, block: s.Block, work: Work):
        work.step((len(block.factors) + 1) * OBJECT_STEPS)
        self.leaves: list[Leaf] = [BUILDERS[f.kind](f, work) for f in block.factors]
        self.order = _order(block.factors)
        first_dot = next((i for i, k in enumerate(self.order) if block.factors[k].kind in DOT_KINDS), len(self.order))
        self.exact_leaves = [self.leaves[k] for k in self.order[:first_dot]]
        self.real_leaves = [self.leaves[k] for k in self.order[first_dot:]]  # applied to rounded values
        self.rows = math.prod(f.rows for f in self.leaves)
        self.cols = math.prod(f.cols for f in self.leaves)
        self._sums: dict[int, tuple[np.ndarray, bool]] = {}
        if block.row_weights is None:
            self.weights = None
            self.c = float(block.weight)
            self.c_max, self.c_integer = abs(self.c), self.c == round(self.c)
        else:
            row_weights = block.row_weights.array()
            if row_weights.size != self.rows or not np.all(np.isfinite(row_weights)):
                raise ValueError(f"row weights: give {self.rows} finite numbers, one per row of the block")
            self.weights = self.c = block.weight * row_weights  # the weights applied: these floats, exactly
            self.c_max = float(np.abs(self.c).max())
            self.c_integer = bool(np.all(self.c == np.rint(self.c)))
        if not self.c_max < LIMIT:
            raise ValueError("a block's weights must be below 2^500 in magnitude")

    @cached_property
    def nonzeros(self) -> int:
        return math.prod(f.nonzeros for f in self.leaves)

    def growth(self, size: float) -> tuple[float, float]:
        """(bound on the integer leaves' values, bound on every value computed) on inputs of L1 norm <= size. A
        leaf whose entries are all below 1 bounds nothing before it: the values on the way are bounded by the
        partial products of the leaves' growths, each at least 1 here."""
        exact, real = self._growths
        if not math.isfinite(exact):
            return math.inf, math.inf  # past any float: refused
        integer = Fraction(size) * Fraction(exact)
        if not (math.isfinite(real) and math.isfinite(self.underflow)):
            return above(integer), math.inf
        on_the_way = integer * Fraction(real) * (1 + Fraction(gamma(self.length + 2))) + 2 * Fraction(self.underflow)
        return above(integer), above((on_the_way + Fraction(TINY)) * max(1, Fraction(self.c_max)) + Fraction(TINY))

    @cached_property
    def _growths(self) -> tuple[float, float]:
        """Upper bounds on the integer leaves' growths multiplied, and on the dot-product leaves' (each at least 1)."""
        return (
            above(exact_product(f.growth for f in self.exact_leaves)),
            above(exact_product(max(1.0, f.growth) for f in self.real_leaves)),
        )

    @cached_property
    def length(self) -> int:
        """L: the dot-product lengths of the stages on rounded values, summed (each product's roundings on its path)."""
        return sum(f.dot_length for f in self.real_leaves)

    @cached_property
    def underflow(self) -> float:
        """U: each dot-product stage's underflows (TINY per product) carried through the later stages' row L1 norms
        (each at least 1, so the stages after the first carry the most), doubled: an upper bound."""
        later = exact_product(max(1.0, f.row_l1) for f in self.real_leaves[1:])
        return above(2 * Fraction(TINY) * self.length * later)

    @cached_property
    def largest(self) -> float:
        """An upper bound on max |entry| of the block as applied: |c| times each leaf's largest entry."""
        return above(exact_product([self.c_max, *(f.largest for f in self.leaves)]))

    def exact(self, size: float) -> bool:
        """Whether every answer is an exact integer on counts of L1 norm <= size."""
        _, peak = self.growth(size)
        return all(f.integer for f in self.real_leaves) and self.c_integer and peak < EXACT

    def error(self, size: float, sensitivity_l1: float) -> Fraction:
        """A bound on sum_r |fl(M x)_r - (M x)_r| over any set of rows, for ||x||_1 <= size (0 if exact)."""
        if self.exact(size):
            return Fraction(0)
        relative = Fraction(gamma(self.length + 1)) * Fraction(sensitivity_l1) * Fraction(size)
        return relative + self.rows * self._underflows()

    def row_error(self, size: float) -> Fraction:
        """A bound on |fl(M x)_r - (M x)_r| for every row r (0 if exact)."""
        if self.exact(size):
            return Fraction(0)
        return Fraction(gamma(self.length + 1)) * Fraction(self.largest) * Fraction(size) + self._underflows()

    def answers(self, size: float) -> float:
        """A bound on every answer |fl(M x)_r| for ||x||_1 <= size: the largest entry's share and the row error."""
        return above(Fraction(self.largest) * Fraction(size) + self.row_error(size))

    def _underflows(self) -> Fraction:
        """One answer's underflows: U through the weight, and the weight's own."""
        return 2 * (Fraction(self.c_max) + 1) * (Fraction(self.underflow) + Fraction(TINY))

    def column_sums_below(self, power: int, limit: float) -> bool:
        """Whether every column sum, and every term of one, is surely below ``limit`` (in logarithms: no overflow)."""
        logs = [power * math.log2(self.c_max) if self.c_max else -math.inf]
        for leaf in self.leaves:
            logs.append(math.log2(leaf.rows) + power * math.log2(leaf.largest) if leaf.largest else -math.inf)
        return sum(logs) + math.log2(len(self.leaves) + 8) < math.log2(limit)

    def column_sums(self, power: int, work: Work) -> tuple[np.ndarray, bool]:
        """Upper bounds on sum_r |M_rj|^power for every column j of the block, and whether they are exact."""
        if power not in self._sums:
            self._sums[power] = self._column_sums(power, work)
        return self._sums[power]

    def _column_sums(self, power: int, work: Work) -> tuple[np.ndarray, bool]:
        if self.weights is not None:
            sums = self.leaves[0].column_sums(power, self.c, work)
            return sums.upper(), sums.exact
        parts = [f.column_sums(power, None, work) for f in self.leaves]
        work.step(12 * self.cols)
        if all(p.exact for p in parts) and self.c_integer:  # integers: exact while the products stay below 2^53
            scale = self.c_max**power
            out = reduce(lambda a, b: np.multiply.outer(a, b).ravel(), [p.values for p in parts]) * scale
            if scale < EXACT and float(out.max()) < EXACT:
                return out, True
        return product_above([p.upper() for p in parts] + [np.array([self.c_max])] * power), False

    def apply(self, X: np.ndarray, work: Work) -> np.ndarray:
        """The block on the columns of X (cols x m): each leaf along its own axis of X as a tensor, in ``order``,
        then the weights."""
        m, dims = X.shape[1], [f.cols for f in self.leaves]
        T = X
        for k in self.order:
            T = self.leaves[k].apply(T.reshape(math.prod(dims[:k]), dims[k], math.prod(dims[k + 1 :]) * m), work)
            dims[k] = self.leaves[k].rows
        out = T.reshape(self.rows, m)
        work.step(2 * out.size)
        if self.weights is None and self.c == 1.0:
            return out
        return out * (self.c if self.weights is None else self.c[:, None])


class SealedMatrix:
    """A matrix of the sealed language, built by the kernel from a ``Stack`` spec whose cost was checked."""

    def __init__(self, stack: s.Stack, work: Work):
        """Build the matrix (its cost checked first: ``cost``), counting the steps on ``work``."""
        self._work = work
        work.step(2 * OBJECT_STEPS)
        self.blocks = [Block(b, work) for b in stack.blocks]
        self.shape = (sum(b.rows for b in self.blocks), self.blocks[0].cols)
        self._sensitivity: dict[str, tuple[float, bool]] = {}
        self._released: dict[tuple[str, float], Released] = {}

    @staticmethod
    def cost(stack: s.Stack, limits: Limits, columns: int | None, vectors: int = 1) -> MatrixCost:
        """Its rows, the cost of building the matrix and its sensitivities, and of applying it to ``vectors`` vectors
        at once, from the spec alone; refuses a matrix without ``columns`` columns (if given) or with an array too
        large."""
        (rows, cols), build, apply = stack_cost(stack, limits, vectors)
        if columns is not None and cols != columns:
            raise ValueError(f"the matrix has {cols} columns but the vector has {columns} cells")
        return MatrixCost(rows, build, apply)

    def sensitivity(self, norm: Norm) -> float:
        """An upper bound on the largest column norm of the matrix the kernel applies (its float entries and
        weights); refuses a matrix with none."""
        if norm not in self._sensitivity:
            power = 1 if norm == "l1" else 2
            for b in self.blocks:  # every term and sum below 2^500: nothing overflows
                if not b.column_sums_below(power, LIMIT):
                    raise ValueError(
                        "the matrix's column norms can pass 2^500, beyond what the kernel evaluates safely: rescale it"
                    )
            parts = [b.column_sums(power, self._work) for b in self.blocks]
            self._work.step(2 * len(parts) * self.shape[1])
            total = sum(p for p, _ in parts)
            largest = float(np.max(total))
            exact = all(e for _, e in parts) and largest < EXACT
            if not exact:
                largest = largest * (1 + 2 * gamma(len(parts) + 2)) + 4 * len(parts) * TINY
            if norm == "l2":  # sqrt is correctly rounded: exact for the square of an integer below 2^26
                root = math.isqrt(int(largest)) if exact else -1
                exact = exact and root * root == largest and root < 2**26
                largest = float(root) if exact else math.sqrt(largest) * (1 + 4 * UNIT)
            if not largest > 0:
                raise ValueError("the matrix has no non-zero entries: it measures nothing")
            if not largest < LIMIT:
                raise ValueError(
                    f"the matrix's column norms reach {largest:.3g}, beyond what the kernel evaluates "
                    "safely (2^500): rescale it"
                )
            self._sensitivity[norm] = (largest, exact)
        return self._sensitivity[norm][0]

    def stability(self) -> int:
        """The exact largest column L1 norm of an integer matrix (a transform's stability), or refuse."""
        norm = self.sensitivity("l1")
        if not self._sensitivity["l1"][1]:
            raise ValueError(
                "a transform needs a matrix of integer entries and integer weights: measure others instead"
            )
        return int(norm)

    def released(self, norm: Norm, size: float) -> Released:
        """The bounds a release on vectors of L1 norm <= size rests on (module docstring), derived once for each
        norm and size (a batch asks again for every item); refuses blocks whose integer leaves could leave the
        exact range, and values past 2^500."""
        if (norm, size) not in self._released:
            self._released[norm, size] = self._derive(norm, size)
        return self._released[norm, size]

    def _derive(self, norm: Norm, size: float) -> Released:
        largest = 0.0
        for block in self.blocks:
            integer, everything = block.growth(size)
            if not integer < EXACT:
                raise ValueError(
                    f"this matrix's integer leaves can reach {integer:.3g} on vectors of up to {size:.3g} "
                    "records, beyond 2^53 where the kernel's arithmetic is exact: split it, or measure "
                    "a source with a smaller public bound"
                )
            largest = max(largest, everything)
        if not largest < LIMIT:
            raise ValueError(
                f"this matrix's values can reach {largest:.3g} on vectors of up to {size:.3g} records, "
                "beyond what the kernel evaluates safely (2^500): rescale it"
            )
        error = sum(b.error(size, b_l1) for b, b_l1 in zip(self.blocks, self._block_l1()))
        rounded = sum(b.nonzeros for b in self.blocks if not b.exact(size))
        nonzeros = sum(b.nonzeros for b in self.blocks)
        sensitivity = above(Fraction(self.sensitivity(norm)) + 2 * error)
        if not sensitivity < LIMIT:
            raise ValueError(
                f"this matrix's rounding on vectors of up to {size:.3g} records can reach {sensitivity:.3g}, "
                "beyond what the kernel evaluates safely (2^500): rescale it"
            )
        return Released(sensitivity, rounded, nonzeros, max(b.answers(size) for b in self.blocks))

    def exact(self, size: float) -> bool:
        """Whether M x is computed exactly (an integer vector) for counts of L1 norm <= size."""
        return all(b.exact(size) and b.growth(size)[0] < EXACT for b in self.blocks)

    def _block_l1(self) -> list[float]:
        """Each block's own L1 sensitivity (its errors scale with it)."""
        return [float(np.max(b.column_sums(1, self._work)[0])) for b in self.blocks]

    def row_error(self, size: float) -> Fraction:
        """A bound on the error of any one answer on vectors of L1 norm <= size."""
        return max(b.row_error(size) for b in self.blocks)

    def largest_entry(self) -> float:
        """An upper bound on max |M_ij| of the applied matrix."""
        return max(b.largest for b in self.blocks)

    def apply(self, X: np.ndarray, work: Work) -> np.ndarray:
        """M @ X for counts X (cells,) or (cells, m), on one BLAS thread (small products are memory-bound)."""
        matrix = np.asarray(X, dtype=np.float64).reshape(self.shape[1], -1)
        with single_threaded_blas():
            out = np.concatenate([b.apply(matrix, work) for b in self.blocks], axis=0)
        return out.reshape(-1) if np.ndim(X) == 1 else out
