"""Resource limits: what one request may make the kernel build, and how much vector data it may hold.

Every check runs on public sizes (spec parameters, matrix shapes, vector lengths) before anything is
allocated, and its error names the size, the limit and the option that raises it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel

from .matrix import Kronecker, Matrix, Product, Transpose, Weighted
from .matrix.compose import HStack, VStack

_RAISE = "a data owner can raise it with Kernel(..., limits=Limits({option}=...)) or `ektelo-ng kernel serve --{flag}`"


@dataclass(frozen=True)
class Limits:
    """``max_cells``: the largest vector, matrix side or intermediate one request may build (64-bit
    floats: 2^25 cells are 256 MB); ``memory``: bytes of vector data the kernel holds at once; ``work``:
    the elementary steps of one quadratic-time selection (PHP, StructureFirst; 2^32 is seconds)."""

    max_cells: int = 1 << 25
    memory: int = 1 << 33
    work: int = 1 << 32

    def cells(self, what: str, count: int) -> None:
        if count > self.max_cells:
            raise ValueError(f"{what} has {count} cells, over the kernel's limit of {self.max_cells} per request; "
                             + _RAISE.format(option="max_cells", flag="max-cells"))

    def steps(self, what: str, count: int) -> None:
        if count > self.work:
            raise ValueError(f"{what} takes about {count} steps, over the kernel's limit of {self.work} per request; "
                             + _RAISE.format(option="work", flag="work"))

    def hold(self, held: int, more: int) -> None:
        if held + more > self.memory:
            raise ValueError(
                f"holding {more} more bytes of vectors would bring the kernel to {held + more}, over its memory limit "
                f"of {self.memory}: release sources you no longer need (the 'release' request), or "
                + _RAISE.format(option="memory", flag="memory"))

    def spec(self, spec: BaseModel) -> None:
        """Before a matrix is built: every size parameter of its spec (some classes build O(n) arrays).
        Array payloads are already in memory, bounded by the request's size."""
        if not hasattr(spec, "kind"):
            return
        for name, value in spec:
            if isinstance(value, BaseModel):
                self.spec(value)
            elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
                for item in value:
                    self.spec(item)
            elif isinstance(value, list) and value and isinstance(value[0], int) and name in ("sizes", "shape"):
                self.cells(f"a {spec.kind} matrix's domain", math.prod(value))
            elif isinstance(value, int) and name in ("n", "rows", "cols", "k"):
                self.cells(f"a {spec.kind} matrix", value)

    def matrix(self, M: Matrix) -> None:
        """Before a matrix is applied: every shape it has, and every Kronecker stage's intermediate."""
        self.cells(f"a {type(M).__name__} matrix", max(M.shape))
        if isinstance(M, Kronecker):
            size = M.shape[1]
            for f in reversed(M.factors):
                size = size // f.shape[1] * f.shape[0]
                self.cells("an intermediate of a Kronecker product", size)
        parts = {Product: "factors", Kronecker: "factors", VStack: "blocks", HStack: "blocks", Weighted: "base",
                 Transpose: "base"}
        children = next((getattr(M, name) for kind, name in parts.items() if isinstance(M, kind)), [])
        for child in children if isinstance(children, list) else [children]:
            self.matrix(child)
