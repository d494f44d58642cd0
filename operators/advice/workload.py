"""The workload an advice is for, in the forms the selectors take.

An advice compares selectors that read a workload differently: the classic selectors and HDMM take one
matrix over the full data vector, ResidualPlanner a list of marginals, QuerySmasher linear queries on
marginals, ``[(attributes, matrix over that marginal)]``. :class:`QueryWorkload` holds one workload and
gives each form where it exists (``None`` where it does not: a selector is then not applicable).

Matrices pass once through the kernel's spec form (``operators.specs``), so the workload the advice
selects for is exactly the one a saved advice rebuilds (``to_dict`` / ``from_dict``).
"""

from __future__ import annotations

import math
from decimal import Decimal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...kernel.domain import Domain
from ..matrix import Dense, Identity, Kronecker, Matrix, MatrixSpecAdapter, Ones, Total, VStack, from_spec
from ..domains import DomainLike, as_domain
from ..selection.hdmm.gram import product_terms
from ..specs import to_spec

Subset = tuple[int, ...]
#: A workload as ``advise`` takes it: a matrix (or array) over every cell, or ``[(attributes, matrix)]`` items.
WorkloadLike = Matrix | np.ndarray | Iterable[tuple]


@dataclass(frozen=True)
class Item:
    """Queries on the marginal of ``attributes`` (positions, increasing; ``sizes`` theirs; columns in C order);
    ``weight`` multiplies each query's variance in the objective."""

    attributes: Subset
    sizes: tuple[int, ...]
    matrix: Matrix
    weight: float = 1.0

    @property
    def factors(self) -> list[Matrix] | None:
        """One query block per attribute when the matrix is a Kronecker product of them (a marginal always is)."""
        if _is_identity(self.matrix):
            return [Identity(n) for n in self.sizes]
        if len(self.attributes) == 1:
            return [self.matrix]
        if isinstance(self.matrix, Kronecker) and [f.shape[1] for f in self.matrix.factors] == list(self.sizes):
            return list(self.matrix.factors)
        return None


def _is_identity(matrix: Matrix) -> bool:
    """True for the queries of a marginal: every cell once (the total, on no attribute, is a 1 x 1 one)."""
    if matrix.shape == (1, 1) and isinstance(matrix, (Identity, Ones)):
        return True
    return isinstance(matrix, Identity) or (
        isinstance(matrix, Kronecker) and all(isinstance(f, Identity) for f in matrix.factors)
    )


def _round_trip(matrix: Matrix) -> Matrix:
    """The matrix as the kernel's spec rebuilds it (what a saved advice will select for)."""
    return from_spec(to_spec(matrix))


class QueryWorkload:
    """A workload over ``domain``: items of queries on marginals and/or one matrix over every cell."""

    def __init__(self, domain: DomainLike, items: Sequence[Item] | None, matrix: Matrix | None = None):
        self.domain = as_domain(domain)
        self.items = None if items is None else list(items)
        if self.items is None and matrix is None:
            raise ValueError("a workload needs items or a matrix")
        self._matrix = matrix

    # ---- construction ---------------------------------------------------------------
    @classmethod
    def of(cls, domain: DomainLike, workload: WorkloadLike | QueryWorkload,
           weights: Sequence[float] | None = None) -> QueryWorkload:
        """From a matrix over every cell of ``domain``, or ``[(attributes, matrix)]`` items (QuerySmasher's form:
        attributes by name or position, the matrix over that marginal); ``weights``: one per item."""
        if isinstance(workload, QueryWorkload):
            return workload
        domain = as_domain(domain)
        if isinstance(workload, np.ndarray):  # rows over every cell
            workload = Dense(np.asarray(workload, dtype=np.float64))
        if isinstance(workload, Matrix):
            if weights is not None:
                raise ValueError("weights go with (attributes, matrix) items; weight a matrix with W * c")
            return cls._from_matrix(domain, _round_trip(workload))
        pairs = list(workload)
        if not pairs:
            raise ValueError("the workload has no queries: give a matrix or at least one (attributes, matrix) item")
        weights = [1.0] * len(pairs) if weights is None else [float(w) for w in weights]
        if len(weights) != len(pairs):
            raise ValueError(f"{len(weights)} weights for {len(pairs)} workload items")
        if not all(isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in pairs):
            raise ValueError("each workload item is an (attributes, matrix) pair; a matrix over every cell is given "
                             "alone")
        return cls(domain, [_item(domain, attributes, matrix, w) for (attributes, matrix), w in zip(pairs, weights)])

    @classmethod
    def _from_matrix(cls, domain: Domain, W: Matrix) -> QueryWorkload:
        cells = math.prod(domain.sizes)
        if W.shape[1] != cells:
            raise ValueError(f"the workload matrix has {W.shape[1]} columns but the domain {cells} cells")
        if W.shape[0] == 0:
            raise ValueError("the workload matrix has no queries (no rows)")
        terms = product_terms(W)
        if [f.shape[1] for f in terms[0][1]] != list(domain.sizes):
            return cls(domain, [Item((0,), domain.sizes, W)] if len(domain) == 1 else None, W)
        items = []
        for weight, factors in terms:
            kept = tuple(i for i, f in enumerate(factors) if not (isinstance(f, Ones) and f.shape[0] == 1))
            blocks = [factors[i] for i in kept]
            matrix = blocks[0] if len(blocks) == 1 else Kronecker(blocks) if blocks else Total(1)
            items.append(Item(kept, tuple(domain.sizes[i] for i in kept), matrix, weight * weight))
        return cls(domain, items, W)

    # ---- the forms the selectors take -----------------------------------------------
    @property
    def cells(self) -> int:
        """Cells of the full data vector (a Python int: it may be astronomically large)."""
        return math.prod(self.domain.sizes)

    @cached_property
    def num_queries(self) -> int:
        if self.items is not None:
            return sum(i.matrix.shape[0] for i in self.items)
        return self._matrix.shape[0]

    @property
    def has_matrix(self) -> bool:
        """Whether :attr:`matrix` exists, without building it (on many attributes the embedding of every item
        over all of them is slow and large: 166,751 marginals on 100 attributes take 28 s and 420 MB pickled)."""
        if "matrix" in self.__dict__ or self.items is None:
            return self.matrix is not None
        return all(i.factors is not None for i in self.items) or (len(self.domain) == 1 and self._matrix is not None)

    @cached_property
    def matrix(self) -> Matrix | None:
        """The workload over every cell as the selectors weigh it (each item's rows times sqrt(weight)), as a union
        of Kronecker products, whose structure the error formulas use (a 2-D range workload becomes one product
        per range): HDMM's and the classic selectors' form; None when an item is not a product of per-attribute
        queries (its embedding would not be a Kronecker product)."""
        if self.items is None:
            return self._matrix
        embedded = self._embedded(weighted=True)
        return self._matrix if embedded is None and len(self.domain) == 1 else embedded

    @cached_property
    def answers(self) -> Matrix | None:
        """The queries over every cell as asked (no weights): what an estimate answers."""
        return self._matrix if self._matrix is not None else self._embedded(weighted=False)

    def _embedded(self, weighted: bool) -> Matrix | None:
        blocks = []
        for item in self.items:
            factors = item.factors
            if factors is None:
                return None
            by_attribute = dict(zip(item.attributes, factors))
            product = Kronecker([by_attribute.get(a, Total(n)) for a, n in enumerate(self.domain.sizes)])
            product = product.factors[0] if len(self.domain) == 1 else product
            blocks.append(product * math.sqrt(item.weight) if weighted and item.weight != 1.0 else product)
        return blocks[0] if len(blocks) == 1 else VStack(blocks)

    @cached_property
    def marginals(self) -> tuple[list[Subset], list[float]] | None:
        """(attribute sets, weights) when every item is a marginal (ResidualPlanner's form), else None."""
        if self.items is None or not all(_is_identity(i.matrix) for i in self.items):
            return None
        return [i.attributes for i in self.items], [i.weight for i in self.items]

    @property
    def queries(self) -> list[tuple[Subset, Matrix]] | None:
        """QuerySmasher's ``[(attributes, matrix)]``, or None for a matrix that is not on marginals."""
        return None if self.items is None else [(i.attributes, i.matrix) for i in self.items]

    @property
    def weights(self) -> list[float] | None:
        return None if self.items is None else [i.weight for i in self.items]

    def describe(self) -> str:
        names = self.domain.names
        cells = f"{self.cells:,}" if self.cells < 10**12 else f"{Decimal(self.cells):.3g}"
        size = f"{len(self.domain)} attribute{'s' * (len(self.domain) > 1)}, {cells} cells"
        if self.items is None:
            return f"{self.num_queries:,} queries over {size}"
        kinds = "marginals" if self.marginals is not None else "query sets on marginals"
        shown = "; ".join("(" + ", ".join(names[a] for a in i.attributes) + ")" for i in self.items[:4])
        more = f"; ... {len(self.items) - 4} more" if len(self.items) > 4 else ""
        return f"{len(self.items):,} {kinds} ({shown}{more}): {self.num_queries:,} queries over {size}"

    # ---- saved form -------------------------------------------------------------------
    def to_dict(self) -> dict:
        domain = dict(zip(self.domain.names, self.domain.sizes))
        if self._matrix is not None:  # given as a matrix: its items are derived from it again on loading
            return {"domain": domain, "matrix": to_spec(self._matrix).model_dump(mode="json")}
        return {"domain": domain, "items": [
            {"attributes": list(i.attributes), "matrix": to_spec(i.matrix).model_dump(mode="json"), "weight": i.weight}
            for i in self.items]}

    @classmethod
    def from_dict(cls, data: dict) -> QueryWorkload:
        domain = as_domain(data["domain"])
        if "matrix" in data:
            return cls._from_matrix(domain, from_spec(MatrixSpecAdapter.validate_python(data["matrix"])))
        return cls(domain, [_item(domain, i["attributes"], from_spec(MatrixSpecAdapter.validate_python(i["matrix"])),
                                  float(i["weight"])) for i in data["items"]])


def _item(domain: Domain, attributes, matrix, weight: float) -> Item:
    names = [attributes] if isinstance(attributes, (str, int, np.integer)) else list(attributes)
    positions = domain.indices(names) if names else []
    cells = math.prod(domain.sizes[a] for a in positions)
    if not isinstance(matrix, Matrix):  # rows as an array or lists
        try:
            rows = np.array(matrix, dtype=np.float64, ndmin=2)
        except (TypeError, ValueError):
            rows = None
        matrix = Dense(rows) if rows is not None and rows.ndim == 2 else matrix
    if not isinstance(matrix, Matrix) or matrix.shape[1] != cells:
        raise ValueError(f"the queries on {names} need {cells} columns (one per cell of that marginal), "
                         f"got {getattr(matrix, 'shape', type(matrix).__name__)}")
    if matrix.shape[0] == 0:
        raise ValueError(f"the item on {names} has no queries (no rows)")
    if not (math.isfinite(weight) and weight > 0):
        raise ValueError(f"item weights must be positive and finite, got {weight}")
    order = sorted(range(len(positions)), key=positions.__getitem__)
    if order != list(range(len(positions))):
        matrix = _permuted(matrix, [domain.sizes[a] for a in positions], order)
    positions = sorted(positions)
    return Item(tuple(positions), tuple(domain.sizes[a] for a in positions), _round_trip(matrix), weight)


def _permuted(matrix: Matrix, sizes: list[int], order: list[int]) -> Matrix:
    """``matrix``'s queries over the same marginal with its attributes in increasing position order."""
    if isinstance(matrix, Kronecker) and [f.shape[1] for f in matrix.factors] == sizes:
        return Kronecker([matrix.factors[j] for j in order])
    dense = matrix.dense().reshape([matrix.shape[0]] + sizes)
    return Dense(dense.transpose([0] + [j + 1 for j in order]).reshape(matrix.shape[0], -1))
