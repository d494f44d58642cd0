"""The kernel service: holds the private table and answers protocol requests, one at a time.

``Kernel.handle_json`` is the single entry point: in-process clients send the same JSON text as socket clients
(no back door). Sources are random 128-bit ids, so another session's handles are simply unknown.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, get_args

import networkx as nx
import numpy as np
from pydantic import ValidationError

from . import protocol as p
from .accountant import Accountant, BudgetExceeded
from .domain import Domain
from .ledger import Account, SqliteLedger
from .limits import Limits
from .matrix import Matrix, Ones, Total, from_spec
from .matrix.rounding import EXACT
from .matrix.threads import single_threaded_blas
from .mechanisms import (
    MatrixFacts, Prepared, bucket_costs, dependence_score, dependence_sensitivity, dyadic_deviations, exponential_cost,
    fourier_sensitivity, fourier_tail_norms, prepare_dyadic_deviations, prepare_exponential, prepare_gaussian,
    prepare_laplace, release_many, select_worst, selectable, split_scores, split_sensitivity,
    structure_first_boundaries, structure_first_sensitivity,
)
from .noise import NoiseSource
from .predicate import NODES, And, Predicate, validate_predicate
from .privacy import PureDP, ZCDP
from .table import TableBackend


@dataclass(frozen=True)
class _Table:
    backend: TableBackend
    attributes: tuple[int, ...]
    predicate: Predicate | None

    @cached_property
    def domain(self) -> Domain:
        if self.attributes == tuple(range(len(self.backend.domain))):
            return self.backend.domain
        return self.backend.domain.project(self.attributes)


@dataclass(frozen=True)
class _Vector:
    """Integer counts (exact: every entry below 2^53) and a public bound on their L1 norm."""

    values: np.ndarray
    bound: float


_RELEASED = object()
"""What a released source's data is replaced by."""


class UnknownSource(KeyError):
    """A handle this kernel does not know (another session's, or made up)."""


_INT32_MAX = np.iinfo(np.int32).max
MAX_ROWS = 1 << 32
"""Default public bound on the table's records, on which the kernel's rounding-error bounds rest."""

TRANSCRIPT_ENTRIES = 10_000
"""Entries a kernel keeps in memory (a served kernel's audit log keeps them all, on disk)."""

QUADRATIC_LIMIT = 8192
"""Longest vector or interval the quadratic-cost selection mechanisms (PHP, StructureFirst) accept."""


class Kernel:
    """The protected kernel of one private table."""

    def __init__(self, table: TableBackend, budget: PureDP | ZCDP, *, seed: int | None = None,
                 ledger: str | Path | Account | None = None, max_rows: int = MAX_ROWS, limits: Limits = Limits(),
                 journal: Callable[[dict[str, Any]], None] | None = None):
        """``max_rows`` is a public bound on the table's records (checked here, never released otherwise):
        rounding-error bounds, hence charges, rest on it, so a tighter one gives slightly less noise. ``ledger``:
        an analyst's ``Account``, or a file where this kernel spends the whole budget as the analyst "owner";
        ``journal`` receives each transcript entry (the served kernel's audit log)."""
        if not isinstance(budget, (PureDP, ZCDP)):
            raise TypeError("budget must be PureDP(epsilon) or ZCDP(rho)")
        if not 1 <= max_rows < EXACT / 2:
            raise ValueError(f"max_rows must be between 1 and 2^52, got {max_rows}")
        if table.count() > max_rows:
            raise ValueError(f"the table has more records than max_rows = {max_rows}: give a larger public bound")
        self._max_rows, self._limits, self._journal = float(max_rows), limits, journal
        self._lock = threading.Lock()
        self._seeded = seed is not None
        self._noise = NoiseSource.seeded(seed) if seed is not None else NoiseSource()
        self._sources: dict[str, _Table | _Vector] = {}
        self._graph = nx.DiGraph()
        self._transcript: deque[dict[str, Any]] = deque(maxlen=TRANSCRIPT_ENTRIES)
        self._requests = itertools.count()
        self._root = self._derive(None, _Table(table, tuple(range(len(table.domain))), None), "table", Fraction(1))
        if isinstance(ledger, (str, Path)):
            ledger = SqliteLedger(ledger, budget).account("owner", budget.value)
        self._accountant = Accountant(budget, self._root, ledger)

    # ---- entry points ------------------------------------------------------------------
    def handle_json(self, text: str | bytes) -> str:
        """Answer one request given as JSON; always returns a JSON response (errors included)."""
        try:
            request = p.RequestAdapter.validate_json(text)
        except ValidationError as error:
            with self._lock:
                self._record({"op": None, "charge": None, "outcome": "invalid_request"})
            return p.ErrorInfo(error="invalid_request", message=_describe(error)).model_dump_json()
        return self.handle(request).model_dump_json()

    def handle(self, request) -> Any:
        with self._lock:
            entry: dict[str, Any] = _summary(request)
            try:
                response = _OPERATIONS[type(request)](self, request)
                if isinstance(response, _Measurement):  # the one place where budget is charged
                    self._accountant.charge_many(response.charges, plan_only=True)  # refused before data is read
                    exact = response.exact()
                    self._accountant.charge_many(response.charges, record=request.op)
                    response = response.release(exact)
            except BudgetExceeded as error:
                response = p.ErrorInfo(error="budget_exceeded", message=str(error))
            except UnknownSource as error:
                response = p.ErrorInfo(error="unknown_source", message=str(error.args[0]))
            except (ValueError, TypeError, NotImplementedError) as error:
                response = p.ErrorInfo(error="invalid_request", message=str(error))
            except Exception as error:  # never let a request take the kernel down; say nothing private
                message = f"the kernel could not carry out this request ({type(error).__name__})"
                response = p.ErrorInfo(error="invalid_request", message=message)
            charges = response.answers if isinstance(response, p.Answers) else [response] * hasattr(response, "charge")
            entry["charge"] = str(sum(a.charge.value for a in charges)) if charges else None
            entry["outcome"] = response.error if isinstance(response, p.ErrorInfo) else "ok"
            self._record(entry)
            return response

    def _record(self, entry: dict[str, Any]) -> None:
        """Keep ``entry`` in the transcript (its last TRANSCRIPT_ENTRIES) and pass it to the journal."""
        entry.update(seq=next(self._requests), time=time.time(), seeded=self._seeded)
        self._transcript.append(entry)
        if self._journal is not None:
            self._journal(entry)

    # ---- sources -----------------------------------------------------------------------
    def _derive(self, parent: str | None, source, op: str, stability: Fraction, kind: str | None = None) -> str:
        """A new source, named by a random id: the root, or a ``stability``-stable derivation of ``parent``."""
        name = secrets.token_hex(16)
        self._sources[name] = source
        kind = kind or ("table" if isinstance(source, _Table) else "vector")
        public = {"kind": kind}
        if isinstance(source, _Table):
            public["attributes"] = list(source.domain.names)
        elif isinstance(source, _Vector):
            public["size"] = int(source.values.size)
        self._graph.add_node(name, **public)
        if parent is not None:
            self._graph.add_edge(parent, name, op=op, stability=str(stability), stability_exact=stability)
            self._accountant.add(name, parent, stability, is_partition=(kind == "partition"))
        return name

    def _get(self, name: str, kind: type | None = None):
        if name not in self._sources or self._sources[name] is None:
            raise UnknownSource(f"unknown source {name}: it does not belong to this kernel session")
        source = self._sources[name]
        if source is _RELEASED:
            raise ValueError(f"source {name} was released: its data are gone (its lineage and charges are kept)")
        if kind is not None and not isinstance(source, kind):
            raise ValueError(f"source {name} is a {self._graph.nodes[name]['kind']}; this operation needs a "
                             + ("table" if kind is _Table else "vector"))
        return source

    def _info(self, name: str) -> p.SourceInfo:
        source = self._sources[name]
        if isinstance(source, _Table):
            return p.SourceInfo(source=name, source_kind="table", domain=source.domain, size=source.domain.size)
        return p.SourceInfo(source=name, source_kind="vector", size=self._graph.nodes[name].get("size", 0))

    def _held(self) -> int:
        """Held vector bytes, counted 8 per cell: public (int32 storage depends on the counts)."""
        return sum(8 * s.values.size for s in self._sources.values() if isinstance(s, _Vector))

    def _new_vector(self, cells: int, what: str) -> None:
        """Refuse, before building it, a vector over the per-request cell limit or the memory limit."""
        self._limits.cells(what, cells)
        self._limits.hold(self._held(), 8 * cells)

    def _op_release(self, request: p.Release) -> p.Sources:
        self._get(request.source)
        names = [request.source, *nx.descendants(self._graph, request.source)]
        infos = [self._info(name) for name in names if self._sources[name] not in (None, _RELEASED)]
        for name in names:
            self._sources[name] = _RELEASED
        return p.Sources(sources=infos)

    # ---- transformations ---------------------------------------------------------------
    def _op_root(self, request: p.Root) -> p.SourceInfo:
        return self._info(self._root)

    def _op_describe(self, request: p.Describe) -> p.SourceInfo:
        self._get(request.source)
        return self._info(request.source)

    def _op_where(self, request: p.Where) -> p.SourceInfo:
        table = self._get(request.source, _Table)
        nodes = validate_predicate(request.predicate, table.domain)  # this source's attributes only
        combined = request.predicate if table.predicate is None else And(terms=[table.predicate, request.predicate])
        if nodes + (table.predicate is not None and validate_predicate(table.predicate, table.backend.domain)) > NODES:
            raise ValueError(f"the predicate, with its source's, has more than {NODES} nodes: each costs a pass over "
                             "the rows; vectorize and partition the counts instead")
        child = _Table(table.backend, table.attributes, combined)
        return self._info(self._derive(request.source, child, "where", Fraction(1)))

    def _op_project(self, request: p.Project) -> p.SourceInfo:
        child = self._projected(self._get(request.source, _Table), request.attributes)
        return self._info(self._derive(request.source, child, "project", Fraction(1)))

    @staticmethod
    def _projected(table: _Table, attributes: list[str]) -> _Table:
        table.domain.indices(attributes)  # names must be in this source's domain
        return _Table(table.backend, tuple(sorted(table.backend.domain.indices(attributes))), table.predicate)

    def _op_vectorize(self, request: p.Vectorize) -> p.SourceInfo:
        table = self._get(request.source, _Table)
        if request.attributes is not None:  # projection is 1-stable: the vector stays 1-stable
            table = self._projected(table, request.attributes)
        self._new_vector(table.domain.size, "the histogram")
        return self._info(self._vectorized(request.source, table))

    def _op_vectorize_many(self, request: p.VectorizeMany) -> p.Sources:
        tables = self._marginals(self._get(request.source, _Table), request.attributes)
        return p.Sources(sources=[self._info(self._vectorized(request.source, t)) for t in tables])

    def _marginals(self, table: _Table, attributes: list[list[str]]) -> list[_Table]:
        """Projections of ``table`` for several histograms, all valid or none; refused before any row is read if
        they would scan a filtered table too often, or build or hold too many cells."""
        tables = [self._projected(table, names) for names in attributes]
        passes = len(tables) * (table.predicate and validate_predicate(table.predicate, table.backend.domain) or 0)
        if passes > 16 * NODES:
            raise ValueError(f"{len(tables)} histograms of this filtered table would scan its rows {passes} times (at "
                             f"most {16 * NODES}): vectorize fewer at once, or the filtered table once and reduce it")
        for t in tables:
            self._limits.cells("a histogram", t.domain.size)
        self._limits.hold(self._held(), 8 * sum(t.domain.size for t in tables))
        return tables

    def _vectorized(self, parent: str, table: _Table) -> str:
        counts = np.asarray(table.backend.histogram(table.attributes, table.predicate), dtype=np.int64).ravel()
        if counts.size and counts.max() <= _INT32_MAX:  # held as int32: half the memory (a batch holds many)
            counts = counts.astype(np.int32)
        name = self._derive(parent, _Vector(counts, self._max_rows), "vectorize", Fraction(1))
        names = table.backend.domain.names
        self._graph.nodes[name]["attributes"] = [names[i] for i in table.attributes]  # the cells' axes, in order
        return name

    def _op_transform(self, request: p.Transform) -> p.SourceInfo:
        """Integer matrices only, evaluated exactly: the child is integer counts again, and its stability is
        the matrix's exact largest column L1 norm (docs/privacy/arithmetic.md)."""
        vector = self._get(request.source, _Vector)
        M = self._matrix(request.matrix, vector.values.size)
        bounds = M.evaluation(vector.bound)
        if not (bounds.exact and bounds.size < EXACT):
            raise ValueError(
                "a transform needs a matrix with integer entries whose products on this vector stay exact (below "
                f"2^53; up to {bounds.peak:.3g} here, L1 norm up to {bounds.size:.3g}): measure such a matrix instead"
            )
        self._new_vector(M.matrix.shape[0], "the transformed vector")
        stability = Fraction(int(M.sensitivity("l1")))
        child = _Vector(np.rint(M.matrix @ vector.values).astype(np.int64), bounds.size)
        return self._info(self._derive(request.source, child, "transform", stability))

    def _op_reduce_by_partition(self, request: p.ReduceByPartition) -> p.SourceInfo:
        vector = self._get(request.source, _Vector)
        labels, groups = self._partition(request.partition, vector)
        self._new_vector(groups, "the reduced vector")
        reduced = np.bincount(labels, weights=vector.values, minlength=groups)  # exact: sums below 2^53
        child = _Vector(np.rint(reduced).astype(np.int64), vector.bound)
        return self._info(self._derive(request.source, child, "reduce_by_partition", Fraction(1)))

    def _op_split_by_partition(self, request: p.SplitByPartition) -> p.Parts:
        vector = self._get(request.source, _Vector)
        labels, groups = self._partition(request.partition, vector)
        sizes = np.bincount(labels, minlength=groups)
        if np.any(sizes == 0):
            raise ValueError(f"partition group(s) {np.flatnonzero(sizes == 0)[:5].tolist()} have no cells")
        self._limits.hold(self._held(), 8 * vector.values.size)
        node = self._derive(request.source, None, "split_by_partition", Fraction(1), kind="partition")
        order = np.argsort(labels, kind="stable")
        bounds = np.r_[0, np.cumsum(sizes)]
        parts = []
        for g in range(groups):
            part = _Vector(vector.values[order[bounds[g] : bounds[g + 1]]], vector.bound)
            parts.append(self._info(self._derive(node, part, "part", Fraction(1))))
        return p.Parts(parts=parts)

    # ---- measurements: validate and prepare from public facts, then one charge, then noise ----
    def _op_laplace(self, request: p.Laplace) -> _Measurement:
        vector = self._get(request.source, _Vector)
        M = self._matrix(request.matrix, vector.values.size)
        prepared = prepare_laplace(M, request.epsilon, vector.bound, self._accountant.kind)
        return self._answer(request.source, prepared, lambda: M.matrix @ vector.values)

    def _op_gaussian(self, request: p.Gaussian) -> _Measurement:
        vector = self._get(request.source, _Vector)
        M = self._matrix(request.matrix, vector.values.size)
        prepared = prepare_gaussian(M, request.rho, request.sigma, vector.bound, self._accountant.kind)
        return self._answer(request.source, prepared, lambda: M.matrix @ vector.values)

    def _op_gaussian_batch(self, request: p.GaussianBatch) -> _Measurement:
        """Each item exactly as its own ``gaussian`` request (same matrix, sensitivity, scale, grid, charge);
        the charges compose in order and are made together, all or none, before any noise is drawn."""
        vectors = [self._get(item.source, _Vector) for item in request.items]
        matrices = [self._matrix(spec) for spec in request.matrices]  # each built and size-checked once
        prepared, memo = [], {}
        for position, (item, vector) in enumerate(zip(request.items, vectors)):
            M = matrices[item.matrix].matrix
            if M.shape[1] != vector.values.size:
                raise ValueError(f"item {position}: the matrix has {M.shape[1]} columns but the vector has "
                                 f"{vector.values.size} cells")
            key = (item.matrix, item.rho, item.sigma, vector.bound)
            if key not in memo:
                memo[key] = prepare_gaussian(matrices[item.matrix], item.rho, item.sigma, vector.bound,
                                             self._accountant.kind)
            prepared.append(memo[key])

        def release(exact: list[np.ndarray]) -> p.Answers:
            released = release_many(prepared, exact, self._noise)
            charges = {q.cost: self._accountant.as_budget(q.cost) for q in prepared}
            return p.Answers(answers=[
                p.Answer(values=p.ArrayData.of(values), noise=q.noise, scale=q.scale, grid=q.grid,
                         charge=charges[q.cost], seeded=self._seeded)
                for q, values in zip(prepared, released)
            ])

        return _Measurement([(item.source, q.cost) for item, q in zip(request.items, prepared)],
                            lambda: _products(matrices, [item.matrix for item in request.items], vectors), release)

    def _op_noisy_count(self, request: p.NoisyCount) -> _Measurement:
        source = self._get(request.source)
        if isinstance(source, _Table):
            M, bound, total = Ones(1, 1), self._max_rows, lambda: np.array([source.backend.count(source.predicate)])
        else:
            M, bound, total = Total(source.values.size), source.bound, lambda: np.array([source.values.sum()])
        prepared = prepare_laplace(M, request.epsilon, bound, self._accountant.kind)
        return self._answer(request.source, prepared, total)

    def _op_worst_approx(self, request: p.WorstApprox) -> _Measurement:
        vector = self._get(request.source, _Vector)
        W = self._matrix(request.workload, vector.values.size)
        estimate = request.estimate.array()
        if estimate.shape != vector.values.shape or not np.all(np.isfinite(estimate)):
            raise ValueError(f"the estimate must be {vector.values.size} finite numbers, got shape {estimate.shape}")
        sensitivity = prepare_exponential(W, estimate, vector.bound, request.epsilon)
        return self._selection(request, lambda: np.abs(W.matrix @ (vector.values - estimate)),
                               lambda scores: select_worst(self._noise, scores, request.epsilon, sensitivity))

    def _op_dyadic_deviations(self, request: p.DyadicDeviations) -> _Measurement:
        vector = self._get(request.source, _Vector)
        if vector.values.size < 2:
            raise ValueError("dyadic deviations need a vector of at least 2 cells")
        prepared = prepare_dyadic_deviations(vector.values.size, vector.bound, request.epsilon, self._accountant.kind)
        return self._answer(request.source, prepared, lambda: dyadic_deviations(vector.values.astype(np.float64)))

    def _op_split_points(self, request: p.SplitPoints) -> _Measurement:
        vector = self._get(request.source, _Vector)
        previous_stop = 0
        for start, stop in request.intervals:
            if not (previous_stop <= start and start + 2 <= stop <= min(vector.values.size, start + QUADRATIC_LIMIT)):
                raise ValueError(
                    f"interval [{start}, {stop}) is not of length 2..{QUADRATIC_LIMIT} inside the {vector.values.size} "
                    "cells, after and disjoint from the ones before it: give sorted, disjoint intervals"
                )
            previous_stop = stop
        self._limits.steps("PHP's split scores", sum(2 * (stop - start) ** 2 for start, stop in request.intervals))
        sensitivities = [selectable(request.epsilon, split_sensitivity(stop - start, vector.bound))
                         for start, stop in request.intervals]
        return self._selection(request, lambda: [  # disjoint intervals: parallel composition, one charge of eps
            split_scores(vector.values[a:b].astype(np.float64)) for a, b in request.intervals], lambda scores: [
            start + 1 + select_worst(self._noise, s, request.epsilon, sensitivity)
            for (start, _), s, sensitivity in zip(request.intervals, scores, sensitivities)])

    def _op_fourier_select(self, request: p.FourierSelect) -> _Measurement:
        vector = self._get(request.source, _Vector)
        offsets = request.offsets.array()
        n = vector.values.size
        if offsets.shape != (n,) or not np.all(np.isfinite(offsets)):
            raise ValueError(f"offsets must be {n} finite numbers, one for each k = 1..{n}; got shape {offsets.shape}")
        if np.abs(offsets).max(initial=0.0) >= 2.0**500:
            raise ValueError("offsets must be below 2^500 in magnitude")
        sensitivity = selectable(request.epsilon, fourier_sensitivity(n, vector.bound, offsets))
        return self._selection(request, lambda: -(fourier_tail_norms(vector.values.astype(np.float64)) + offsets),
                               lambda scores: 1 + select_worst(self._noise, scores, request.epsilon, sensitivity))

    def _op_structure_first(self, request: p.StructureFirst) -> _Measurement:
        vector = self._get(request.source, _Vector)
        if not request.buckets <= vector.values.size <= QUADRATIC_LIMIT:
            raise ValueError(
                f"{request.buckets} buckets need at least as many cells, and the quadratic-time dynamic program at "
                f"most {QUADRATIC_LIMIT}; the vector has {vector.values.size} (reduce or split it first)"
            )
        n = vector.values.size  # each level of bucket_costs adds and compares about (n + 1)(n + 257) / 2 pairs
        self._limits.steps("StructureFirst's dynamic program", (n + 1) * (n + 257) * request.buckets // 2)
        sensitivity = selectable(request.epsilon / (request.buckets - 1), structure_first_sensitivity(
            vector.values.size, request.bound, request.buckets, vector.bound))
        return self._selection(request, lambda: bucket_costs(
            np.clip(vector.values.astype(np.float64), 0.0, request.bound), request.buckets - 1),
            lambda costs: structure_first_boundaries(  # buckets - 1 draws, one charge of eps
                self._noise, costs, request.buckets, request.epsilon, sensitivity))

    def _op_privbayes_select(self, request: p.PrivBayesSelect) -> _Measurement:
        table = self._get(request.source, _Table)
        tables = self._marginals(table, [[child, *parents] for child, parents in request.candidates])
        self._limits.steps("PrivBayes's scores", 64 * sum(t.domain.size for t in tables))  # about 70 ns a cell
        sensitivity = selectable(request.epsilon, dependence_sensitivity(self._max_rows))
        children = [table.backend.domain.index(child) for child, _ in request.candidates]
        return self._selection(request, lambda: np.array([
            dependence_score(t.backend.histogram(t.attributes, t.predicate), t.attributes.index(c))
            for t, c in zip(tables, children)]),
            lambda scores: select_worst(self._noise, scores, request.epsilon, sensitivity))

    def _selection(self, request, scores: Callable[[], Any], pick: Callable[[Any], int | list[int]]) -> _Measurement:
        """An exponential-mechanism request charged eps (eps^2/8 under zCDP): ``scores`` reads the data, ``pick``
        draws the choice from them."""
        cost = exponential_cost(request.epsilon, self._accountant.kind)

        def release(exact) -> p.Selected | p.Splits:
            choice, charge = pick(exact), self._accountant.as_budget(cost)
            if isinstance(choice, list):
                return p.Splits(indices=choice, charge=charge, seeded=self._seeded)
            return p.Selected(index=choice, charge=charge, seeded=self._seeded)

        return _Measurement([(request.source, cost)], scores, release)

    def _answer(self, source: str, prepared: Prepared, exact: Callable[[], np.ndarray]) -> _Measurement:
        def release(exact: np.ndarray) -> p.Answer:
            values = prepared.release(exact, self._noise)
            return p.Answer(
                values=p.ArrayData.of(values), noise=prepared.noise, scale=prepared.scale, grid=prepared.grid,
                charge=self._accountant.as_budget(prepared.cost), seeded=self._seeded,
            )

        return _Measurement([(source, prepared.cost)], exact, release)

    # ---- public state ------------------------------------------------------------------
    def _op_budget(self, request: p.BudgetStatus) -> p.BudgetInfo:
        a = self._accountant
        spent = a.spent()
        return p.BudgetInfo(
            total=a.total, spent=a.as_budget(spent), remaining=a.as_budget(a.total.value - spent),
            per_source={name: a.as_budget(value) for name, value in a.per_source().items()},
        )

    def _op_lineage(self, request: p.LineageGraph) -> p.LineageInfo:
        graph = self._graph.copy()
        for _, _, data in graph.edges(data=True):
            data.pop("stability_exact", None)
        for name, data in graph.nodes(data=True):
            data["spent"] = str(self._accountant.spent(name))
        return p.LineageInfo(graph=nx.node_link_data(graph, edges="links"))

    def _op_transcript(self, request: p.TranscriptLog) -> p.TranscriptInfo:
        return p.TranscriptInfo(seeded=self._seeded, entries=list(self._transcript))

    # ---- validation helpers ------------------------------------------------------------
    def _matrix(self, spec, cells: int | None = None, what: str = "the matrix") -> MatrixFacts:
        """A client's matrix, its size checked before and after it is built, and its width if ``cells`` is given."""
        self._limits.spec(spec)
        M = from_spec(spec)
        if cells is not None and M.shape[1] != cells:
            raise ValueError(f"{what} has {M.shape[1]} columns but the vector has {cells} cells")
        self._limits.matrix(M)
        return MatrixFacts(M)

    def _partition(self, partition: p.Partition, vector: _Vector) -> tuple[np.ndarray, int]:
        n = vector.values.size
        if partition.labels is not None:
            labels = partition.labels.array().ravel()
            groups = partition.groups if partition.groups is not None else int(labels.max(initial=-1)) + 1
            self._limits.cells("the partition's groups", groups)
            if labels.size != n:
                raise ValueError(f"the partition labels {labels.size} cells but the vector has {n}")
            if labels.size and (labels.min() < 0 or labels.max() >= groups):
                raise ValueError(f"partition labels must lie in 0..{groups - 1}")
            return labels, groups
        P = self._matrix(partition.matrix, n, "the partition matrix").matrix
        if not P.binary or not np.all(P.column_norms("l1") == 1.0):
            raise ValueError("not a partition: every cell (column) must belong to exactly one group, with weight 1")
        return np.rint(P.T @ np.arange(P.shape[0], dtype=np.float64)).astype(np.int64), P.shape[0]


@dataclass(frozen=True)
class _Measurement:
    """A measurement validated and prepared from public facts: the charges it needs; ``exact``, which reads the
    data (its pre-noise values or scores) once the charges are known to fit; and ``release``, which only draws
    noise from them and cannot fail."""

    charges: list[tuple[str, Fraction]]
    exact: Callable[[], Any]
    release: Callable[[Any], Any]


_OPERATIONS: dict[type, Callable[[Kernel, Any], Any]] = {
    kind: getattr(Kernel, "_op_" + kind.model_fields["op"].default) for kind in get_args(get_args(p.Request)[0])}
"""Every request type and the one method that answers it: ``_op_`` and its op name."""


_PRODUCT_ENTRIES = 1 << 17
"""Data entries stacked when a batch applies one matrix to several vectors (1 MB stays in cache: measured best)."""


def _products(matrices: list[MatrixFacts], which: list[int], vectors: list[_Vector]) -> list[np.ndarray]:
    """``matrices[which[i]].matrix @ vectors[i].values`` for every i, each matrix on a few vectors at a time (stacked
    as columns), on one BLAS thread: small memory-bound products ran 10-40x slower on two (kernel/matrix/threads.py)."""
    out: list[np.ndarray | None] = [None] * len(vectors)
    groups: dict[int, list[int]] = {}
    for i, j in enumerate(which):
        groups.setdefault(j, []).append(i)
    with single_threaded_blas():
        for j, members in groups.items():
            _product_group(matrices[j].matrix, members, vectors, out)
    return out


def _product_group(M: Matrix, members: list[int], vectors: list[_Vector], out: list) -> None:
    step = max(1, _PRODUCT_ENTRIES // max(M.shape[1], 1))
    for start in range(0, len(members), step):
        chunk = members[start : start + step]
        X = np.empty((len(chunk), M.shape[1]))  # one vector per row: X.T is the (Fortran-ordered) operand
        for row, i in enumerate(chunk):
            X[row] = vectors[i].values
        Y = M @ X.T
        for column, i in enumerate(chunk):
            out[i] = Y[:, column]


def _summary(request) -> dict[str, Any]:
    """What was asked, without bulky payloads (the transcript holds requests, never data): arrays by their
    shape, lists and objects over 16 items by their length, long strings and numbers and anything past 256
    values as "..." (scalars such as epsilon come first, so they are kept): an entry stays small."""
    left = 256

    def strip(value):
        nonlocal left
        left -= 1
        if left < 0 or isinstance(value, str) and len(value) > 64 or isinstance(value, int) and value.bit_length() > 64:
            return "..."
        if isinstance(value, (dict, list)) and len(value) > 16:
            return {"length": len(value)}
        if isinstance(value, dict):
            value = {"dtype": value["dtype"], "shape": value["shape"]} if "base64" in value else value
            return {k: strip(v) for k, v in sorted(value.items(), key=lambda kv: isinstance(kv[1], (dict, list)))}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return strip(request.model_dump(mode="json"))


def _describe(error: ValidationError) -> str:
    problems = [f"{'.'.join(str(x) for x in e['loc']) or 'request'}: {e['msg']}"
                for e in error.errors(include_url=False, include_input=False)[:5]]
    return "malformed request: " + "; ".join(problems)
