"""An analyst's sources: the table and what was derived from it, their lineage, and the memory they hold.

Sources are random 128-bit ids, so another session's handles are simply unknown. Every source counts
``SOURCE_BYTES`` against the memory limit, and a vector its 8 bytes a cell too, taken from the kernel's ``Memory``
(and so the server's) before it is made; ``release`` frees a source and everything derived from it. Their charges
stay: each was propagated to the ancestors when it was made, so the released nodes leave the lineage and the
accountant, and their parent counts them (docs/privacy/accountant.md).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import networkx as nx
import numpy as np

from . import protocol as p
from .accountant import Accountant
from .domain import Domain
from .limits import RAISE, SOURCE_BYTES, Limits, Memory
from .predicate import Predicate
from .table import TableBackend


@dataclass(frozen=True)
class Table:
    """A view of the private table: some attributes, the rows satisfying a predicate."""

    backend: TableBackend
    attributes: tuple[int, ...]
    predicate: Predicate | None

    @cached_property
    def domain(self) -> Domain:
        if self.attributes == tuple(range(len(self.backend.domain))):
            return self.backend.domain
        return self.backend.domain.project(self.attributes)


@dataclass(frozen=True)
class Vector:
    """Integer counts and a public bound on their L1 norm, below 2^53: so every entry, and every sum of entries,
    is an exact integer in int64 and in float64 alike (``transforms.transform`` refuses a larger bound)."""

    values: np.ndarray
    bound: float


class UnknownSource(KeyError):
    """A handle this kernel does not know (another session's, made up, or released)."""


class Sources:
    """The sources of one kernel session, with their lineage graph; ``accountant`` tracks their spends."""

    def __init__(self, table: TableBackend, limits: Limits, max_rows: float, server: Memory | None = None):
        """``max_rows``: the public bound on the table's records, which bounds every histogram's L1 norm;
        ``server``: the memory this kernel's is drawn from (shared by a served table's analysts)."""
        self.limits, self.max_rows = limits, max_rows
        self.memory, self.held = Memory(limits.memory, server), 0  # what a request took, then what the sources hold
        self._data: dict[str, Table | Vector | None] = {}
        self.graph = nx.DiGraph()
        self.accountant: Accountant | None = None  # set by the kernel, whose accountant is built on the root
        self.reserve(1, 0, "the table's root")
        self.root = self.add(None, Table(table, tuple(range(len(table.domain))), None), "table", Fraction(1))

    @staticmethod
    def bytes(source: Table | Vector | None) -> int:
        """What a source counts against the memory limit: public (8 bytes a cell, whatever the storage)."""
        return SOURCE_BYTES + (8 * source.values.size if isinstance(source, Vector) else 0)

    def reserve(self, sources: int, cells: int, what: str) -> None:
        """Take, before anything is built, the memory of ``sources`` new sources holding ``cells`` vector cells in
        all, or refuse them."""
        self.memory.take(sources * SOURCE_BYTES + 8 * cells, what)
        if len(self._data) + sources > self.limits.sources:
            raise ValueError(
                f"{what} would make {sources} sources, and the kernel holds {len(self._data)} already: over its "
                f"limit of {self.limits.sources} sources; release sources you no longer need (the 'release' "
                "request), or " + RAISE.format(option="sources", flag="sources")
            )

    def settle(self) -> None:
        """At the end of a request: keep what the sources hold, and give back the rest it took."""
        self.memory.give(self.memory.held - self.held)

    def add(
        self, parent: str | None, source: Table | Vector | None, op: str, stability: Fraction, kind: str | None = None
    ) -> str:
        """A new source: the root, or a ``stability``-stable derivation of ``parent`` (reserved beforehand)."""
        name = secrets.token_hex(16)
        self._data[name] = source
        self.held += self.bytes(source)
        kind = kind or ("table" if isinstance(source, Table) else "vector")
        public = {"kind": kind}
        if isinstance(source, Table):
            public["attributes"] = list(source.domain.names)
        elif isinstance(source, Vector):
            public["size"] = int(source.values.size)
        self.graph.add_node(name, **public)
        if parent is not None:
            self.graph.add_edge(parent, name, op=op, stability=str(stability))
            self.accountant.add(name, parent, stability, is_partition=(kind == "partition"))
        return name

    def get(self, name: str, kind: type | None = None):
        """The source named ``name`` (of ``kind``, if given), or a refusal."""
        if name not in self._data:
            raise UnknownSource(f"unknown source {name}: it does not belong to this kernel session, or was released")
        source = self._data[name]
        if kind is not None and not isinstance(source, kind):
            raise ValueError(
                f"source {name} is a {self.graph.nodes[name]['kind']}; this operation needs a "
                + ("table" if kind is Table else "vector")
            )
        return source

    def info(self, name: str) -> p.SourceInfo:
        source = self._data[name]
        if isinstance(source, Table):
            return p.SourceInfo(source=name, source_kind="table", domain=source.domain, size=source.domain.size)
        return p.SourceInfo(source=name, source_kind="vector", size=self.graph.nodes[name].get("size", 0))

    def release(self, name: str) -> list[p.SourceInfo]:
        """Free ``name`` and everything derived from it; their parent keeps the count of released sources."""
        self.get(name)
        if name == self.root:
            raise ValueError("the root table cannot be released; release what was derived from it")
        names = [name, *nx.descendants(self.graph, name)]
        infos = [self.info(n) for n in names if self._data[n] is not None]
        parent = next(self.graph.predecessors(name))
        self.graph.nodes[parent]["released"] = self.graph.nodes[parent].get("released", 0) + len(names)
        for n in names:
            self.held -= self.bytes(self._data.pop(n))
        self.graph.remove_nodes_from(names)
        self.accountant.remove(names)
        return infos
