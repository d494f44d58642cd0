"""The transformations: new sources derived from old ones, each with the stability the accountant multiplies by.

Card
- Neighbours: one record added or removed from the table; a c-stable derivation moves its source by at most c
  (records for tables, L1 for vectors).
- Stability: where, project, vectorize (each marginal of vectorize_many), reduce and split by partition: 1; a
  transform x' = M x: M's exact largest column L1 norm, M integer and evaluated exactly (``SealedMatrix.stability``).
- Cost: a source's ``SOURCE_BYTES`` and its vector's cells, reserved before it is made; a matrix's cost
  (``kernel.matrix.sealed``); the table's columns read (a histogram's attributes and predicate nodes, at most
  ``Limits.scans`` a request); the sources held (``Limits.sources``).
- Reads data: the histograms (vectorize), M x (transform), the sums of a partition's groups, the parts of a split.
- May fail before the charge: (there is none) names, sizes, predicates, matrices and labels, every limit,
  all before anything is read. Nothing after.
- Proof: docs/privacy/accountant.md#stabilities-computed-by-the-kernel-from-the-transformations-own-parameters
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import protocol as p
from .limits import OBJECT_STEPS, RAISE, Work
from .matrix import SealedMatrix
from .matrix.leaves import EXACT
from .predicate import NODES, And, validate_predicate
from .sources import Sources, Table, Vector

_INT32_MAX = np.iinfo(np.int32).max


def root(sources: Sources, request: p.Root, work: Work) -> p.SourceInfo:
    return sources.info(sources.root)


def describe(sources: Sources, request: p.Describe, work: Work) -> p.SourceInfo:
    sources.get(request.source)
    return sources.info(request.source)


def release(sources: Sources, request: p.Release, work: Work) -> p.Sources:
    return p.Sources(sources=sources.release(request.source))


def where(sources: Sources, request: p.Where, work: Work) -> p.SourceInfo:
    table = sources.get(request.source, Table)
    nodes = validate_predicate(request.predicate, table.domain)  # this source's attributes only
    if nodes + _passes(table) > NODES:
        raise ValueError(
            f"the predicate, with its source's, has more than {NODES} nodes: each costs a pass over "
            "the rows; vectorize and partition the counts instead"
        )
    combined = request.predicate if table.predicate is None else And(terms=[table.predicate, request.predicate])
    sources.reserve(1, 0, "a new source")
    return sources.info(
        sources.add(request.source, Table(table.backend, table.attributes, combined), "where", Fraction(1))
    )


def project(sources: Sources, request: p.Project, work: Work) -> p.SourceInfo:
    child = projected(sources.get(request.source, Table), request.attributes)
    sources.reserve(1, 0, "a new source")
    return sources.info(sources.add(request.source, child, "project", Fraction(1)))


def vectorize(sources: Sources, request: p.Vectorize, work: Work) -> p.SourceInfo:
    table = sources.get(request.source, Table)
    if request.attributes is not None:  # projection is 1-stable: the vector stays 1-stable
        table = projected(table, request.attributes)
    sources.reserve(1, check_histograms(sources, [table]), "the histogram")
    return sources.info(_vectorized(sources, request.source, table, work))


def vectorize_many(sources: Sources, request: p.VectorizeMany, work: Work) -> p.Sources:
    table = sources.get(request.source, Table)
    tables = [projected(table, names) for names in request.attributes]
    sources.reserve(len(tables), check_histograms(sources, tables), f"{len(tables)} histograms")
    return p.Sources(sources=[sources.info(_vectorized(sources, request.source, t, work)) for t in tables])


def transform(sources: Sources, request: p.Transform, work: Work) -> p.SourceInfo:
    """Integer matrices only, evaluated exactly: the child is integer counts again, and its stability is the
    matrix's exact largest column L1 norm (docs/privacy/arithmetic.md#exact-transforms)."""
    vector = sources.get(request.source, Vector)
    cost = SealedMatrix.cost(request.matrix, sources.limits, vector.values.size)
    sources.limits.check("this transform", cost.build + cost.apply, sources.memory)
    sources.reserve(1, cost.rows, "the transformed vector")
    M = SealedMatrix(request.matrix, work)
    stability = M.stability()
    bound = stability * vector.bound  # an integer: both are
    if not bound < EXACT:
        raise ValueError(
            f"the transformed vector could hold {bound:.3g} records in all (the matrix's stability {stability} "
            f"times its source's public bound {vector.bound:.3g}), past 2^53 where the kernel's sums of counts "
            "stay exact: split the matrix, or measure it instead"
        )
    if not M.exact(vector.bound):
        raise ValueError(
            "a transform's products on this vector must stay exact integers (below 2^53 on its public "
            "bound of records): split the matrix, or measure it instead"
        )
    child = Vector(np.rint(M.apply(vector.values, work)).astype(np.int64), float(bound))
    return sources.info(sources.add(request.source, child, "transform", Fraction(stability)))


def reduce_by_partition(sources: Sources, request: p.ReduceByPartition, work: Work) -> p.SourceInfo:
    vector = sources.get(request.source, Vector)
    labels = _labels(sources, request.partition, vector)
    sources.reserve(1, request.partition.groups, "the reduced vector")
    work.step(2 * labels.size + request.partition.groups)
    reduced = np.bincount(labels, weights=vector.values, minlength=request.partition.groups)  # exact: below 2^53
    child = Vector(np.rint(reduced).astype(np.int64), vector.bound)
    return sources.info(sources.add(request.source, child, "reduce_by_partition", Fraction(1)))


def split_by_partition(sources: Sources, request: p.SplitByPartition, work: Work) -> p.Parts:
    vector = sources.get(request.source, Vector)
    labels = _labels(sources, request.partition, vector)
    groups = request.partition.groups
    sources.reserve(groups + 1, labels.size, f"a split into {groups} parts")
    sizes = np.bincount(labels, minlength=groups)
    if np.any(sizes == 0):
        raise ValueError(f"partition group(s) {np.flatnonzero(sizes == 0)[:5].tolist()} have no cells")
    work.step(4 * labels.size + OBJECT_STEPS * groups)
    node = sources.add(request.source, None, "split_by_partition", Fraction(1), kind="partition")
    order = np.argsort(labels, kind="stable")
    bounds = np.r_[0, np.cumsum(sizes)]
    parts = [Vector(vector.values[order[bounds[g] : bounds[g + 1]]], vector.bound) for g in range(groups)]
    return p.Parts(parts=[sources.info(sources.add(node, part, "part", Fraction(1))) for part in parts])


# ---- helpers -----------------------------------------------------------------------------------------------------


def _passes(table: Table) -> int:
    """Passes over the rows one histogram of ``table`` takes: its predicate's nodes."""
    return validate_predicate(table.predicate, table.backend.domain) if table.predicate is not None else 0


def projected(table: Table, attributes: list[str]) -> Table:
    table.domain.indices(attributes)  # names must be in this source's domain
    return Table(table.backend, tuple(sorted(table.backend.domain.indices(attributes))), table.predicate)


def check_histograms(sources: Sources, tables: list[Table]) -> int:
    """Refuse, before any row is read, histograms of one table that would read too many of its columns (each of a
    histogram's attributes, and each node of the table's predicate, is a pass over the rows) or build too many
    cells; their cells in all."""
    scans = sum(max(1, len(t.attributes)) + _passes(t) for t in tables)
    if scans > sources.limits.scans:
        raise ValueError(
            f"{len(tables)} histograms would read the table's columns {scans} times, over the kernel's limit of "
            f"{sources.limits.scans} scans per request: vectorize fewer at once, or a larger histogram once and "
            "reduce it; " + RAISE.format(option="scans", flag="scans")
        )
    for t in tables:
        sources.limits.cells("a histogram", t.domain.size)
    return sum(t.domain.size for t in tables)


def _vectorized(sources: Sources, parent: str, table: Table, work: Work) -> str:
    work.step(table.domain.size + OBJECT_STEPS)
    counts = np.asarray(table.backend.histogram(table.attributes, table.predicate), dtype=np.int64).ravel()
    if counts.size and counts.max() <= _INT32_MAX:  # held as int32: half the memory (a batch holds many)
        counts = counts.astype(np.int32)
    name = sources.add(parent, Vector(counts, sources.max_rows), "vectorize", Fraction(1))
    names = table.backend.domain.names
    sources.graph.nodes[name]["attributes"] = [names[i] for i in table.attributes]  # the cells' axes, in order
    return name


def _labels(sources: Sources, partition: p.PartitionSpec, vector: Vector) -> np.ndarray:
    """A partition's labels, checked against the vector and the limits."""
    sources.limits.cells("the partition's groups", partition.groups)
    labels = partition.labels.array()
    if labels.size != vector.values.size:
        raise ValueError(f"the partition labels {labels.size} cells but the vector has {vector.values.size}")
    if labels.size and (labels.min() < 0 or labels.max() >= partition.groups):
        raise ValueError(f"partition labels must lie in 0..{partition.groups - 1}")
    return labels
