"""Answering a batch jointly: one workload, one strategy, one measurement, one estimate, every answer read from it.

:func:`answer_batch` compiles the batch (:mod:`.compile`), refusing bad queries before anything is spent, projects
the table onto the columns the batch reads (a 1-stable view, nothing charged), picks a strategy for the whole
weighted workload (``strategy="auto"``: the advisor, :mod:`operators.advice`, ranks HDMM, ResidualPlanner,
QuerySmasher, Identity and the classic strategies at the budget), measures it once with all of the budget and
reads every answer from the one estimate (:mod:`.results` turns them into labelled frames). Counts, sums and the
CDFs are linear in that estimate, so a total equals the sum of its parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...kernel.privacy import PureDP, ZCDP
from ..budget import Budget, accounted, for_noise, noise_of
from ..client import Handle
from ..estimate import Estimate, VectorEstimate
from ..marginal_estimate import MarginalEstimate
from ..matrix import Dense, Identity, Kronecker, Matrix, Ones, Product
from ..selection.linear import LinearStrategy
from ..selection.query_smasher.strategy import QuerySmasherEstimate
from ..selection.strategy import Strategy
from .compile import Compiled, Part, Read, compile_batch
from .model import Batch, Query
from .results import Results, results_of
from .schema import Schema

STRATEGIES = ("auto", "identity", "hdmm", "residual-planner", "query-smasher")
#: Seconds the advisor may spend choosing the strategy of a batch (``strategy="auto"``).
ADVICE_SECONDS = 20.0


@dataclass(frozen=True)
class Choice:
    """The strategy a batch is measured with, its name, and why it was chosen."""

    strategy: Strategy
    name: str
    reason: str


def answer_batch(source: Handle, queries: Batch | Sequence[Query] | Query, budget: Budget, *,
                 schema: Schema | None = None, level: float = 0.95, strategy: str | Strategy = "auto",
                 nonnegative: bool = False, integer: bool = False, time_limit: float = ADVICE_SECONDS) -> Results:
    """Answer ``queries`` from one measurement of ``source`` (a table handle) spending all of ``budget``.

    ``schema``: the table's (default: the one its domain carries, ``Schema.from_domain``); it must agree with the
    kernel's domain on every column the batch reads. ``strategy``: ``"auto"`` (the advisor's pick within
    ``time_limit`` seconds), ``"identity"``, ``"hdmm"``, ``"residual-planner"``, ``"query-smasher"`` or a
    Strategy selected for :meth:`Compiled.items`. ``nonnegative`` / ``integer``: clip counts (and sums of
    non-negative columns) at 0 / round counts, after the intervals are made; stated in every row.
    """
    if isinstance(queries, Query):
        queries = [queries]
    spent = accounted(budget)  # a bare number refused first
    if not 0 < level < 1:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level!r}")
    if source.kind != "table":
        raise ValueError(f"queries are answered from a table handle, got a {source.kind} handle")
    schema = _checked_schema(schema, source)
    compiled = compile_batch(queries, schema)
    if isinstance(strategy, str) and strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)} or give a Strategy")
    table = source if compiled.schema.names == source.domain.names else source.project(list(compiled.schema.names))
    choice = choose(compiled, table.domain, spent, strategy, time_limit)
    estimate = measure(choice.strategy, table, spent)
    reader = Reader(estimate, compiled, table.domain)
    return results_of(compiled, reader, level, nonnegative, integer, choice, spent)


def _checked_schema(schema: Schema | None, source: Handle) -> Schema:
    """The schema the queries read, checked against the kernel's domain (which holds the rules it loaded with)."""
    from_kernel = Schema.from_domain(source.domain)
    if schema is None:
        return from_kernel
    kernel = {a.name: a for a in source.domain.attributes}
    for name, attribute in zip(schema.names, schema.domain().attributes):
        if name in kernel and kernel[name] != attribute:
            raise ValueError(f"column {name!r}: the schema says {schema[name]!r} but the table was loaded as "
                             f"{from_kernel[name]!r}; answer with the schema the table was protected with")
    missing = [n for n in schema.names if n not in kernel]
    if missing:
        raise ValueError(f"the schema has columns {missing} that the table does not")
    return schema


def choose(compiled: Compiled, domain, budget: PureDP | ZCDP, strategy: str | Strategy,
           time_limit: float = ADVICE_SECONDS) -> Choice:
    """The strategy for the compiled batch: given, named, or the advisor's pick."""
    if isinstance(strategy, Strategy):
        return Choice(strategy, type(strategy).__name__, "given")
    from ..advice import QueryWorkload, advise
    from ..advice.candidates import Candidate, select

    workload = QueryWorkload.of(domain, compiled.items, compiled.weights)
    noise = noise_of(budget)
    if strategy == "identity" or (strategy == "auto" and workload.matrix is None and noise == "laplace"):
        return _identity(domain, workload, noise, "asked for" if strategy == "identity" else
                         "a filter joins columns (no product form) under pure DP: the cells are measured")
    if strategy != "auto":
        option = {"hdmm": "opt_kron" if len(domain) > 1 else "opt_0", "residual-planner": "sum",
                  "query-smasher": "exact"}[strategy]
        candidate = Candidate(strategy, option, "gaussian" if strategy != "hdmm" else noise)
        if candidate.noise == "gaussian" and noise == "laplace":
            raise ValueError(f"{strategy} adds Gaussian noise, which cannot give pure epsilon-DP: give a zCDP budget "
                             "(ek.ZCDP(rho)) or strategy='auto'")
        if strategy == "hdmm" and workload.matrix is None:
            raise ValueError("hdmm needs every filter as a product of per-column conditions; a filter here joins "
                             "columns with | or ~: use strategy='query-smasher', 'identity' or 'auto'")
        if strategy == "residual-planner" and workload.marginals is None:
            raise ValueError("residual-planner answers counts by group without filters (marginals) only; this batch "
                             "has other queries: use strategy='auto' or 'query-smasher'")
        return Choice(select(candidate, workload), candidate.name, "asked for")
    if workload.marginals is not None and noise == "gaussian":
        return Choice(select(Candidate("residual-planner", "sum", "gaussian"), workload), "ResidualPlanner (sum "
                      "loss), gaussian", "every query is a count by groups (a marginal): ResidualPlanner's "
                      "strategy is optimal for weighted marginals under zCDP")
    if workload.marginals is not None:
        return _marginals_pure(domain, workload, noise)
    advice = advise(domain, workload, budget, time_limit=time_limit)
    if advice.pick is None or advice.pick.strategy is None:
        return _structured(domain, workload, noise, f"the advisor ranked no strategy within {time_limit:g} s")
    return Choice(advice.pick.strategy, advice.pick.name, f"the advisor's pick of {len(advice.ranked())} ranked "
                  f"at the budget (RMSE {advice.pick.rmse:.4g} per weighted query)")


def _marginals_pure(domain, workload, noise: str) -> Choice:
    """Marginals under pure DP: HDMM's marginals template (OPT_M) when its strategy has at most DENSE_LIMIT rows
    (its error bars then come from the rows' Gram, :mod:`operators.covariance`), else :func:`_structured`."""
    from ..advice.candidates import Candidate, select
    from ..covariance import DENSE_LIMIT
    from ..selection.hdmm.marginals import MAX_LATTICE_ATTRIBUTES

    why = "every query is a count by groups (a marginal)"
    if 1 < len(domain) <= MAX_LATTICE_ATTRIBUTES and workload.cells > workload.num_queries:
        candidate = Candidate("hdmm", "opt_marginals", noise)
        strategy = select(candidate, workload)
        if strategy.matrix.shape[0] <= DENSE_LIMIT:
            return Choice(strategy, candidate.name, f"{why}: HDMM's marginals template, for unions of marginals")
    return _structured(domain, workload, noise, why)


def _structured(domain, workload, noise: str, why: str) -> Choice:
    """The cheapest structured strategy that takes the workload, chosen without timing anything: QuerySmasher
    under zCDP, HDMM's Kronecker template (OPT_0 on one column) under pure DP; the cells (Identity) only where
    they are no more than the queries asked, or where HDMM does not apply."""
    from ..advice.candidates import Candidate, select

    if noise == "gaussian" and workload.queries is not None:
        return Choice(select(Candidate("query-smasher", "exact", "gaussian"), workload), "QuerySmasher (exact), "
                      "gaussian", f"{why}: QuerySmasher, which optimizes for queries on marginals under zCDP")
    if workload.cells <= workload.num_queries:
        return _identity(domain, workload, noise, f"{why}: {workload.cells:,} cells, no more than the "
                         f"{workload.num_queries:,} queries, are measured")
    if workload.has_matrix:
        option = "opt_kron" if len(domain) > 1 else "opt_0"
        candidate = Candidate("hdmm", option, noise)
        return Choice(select(candidate, workload), candidate.name, f"{why}: {candidate.name}, structured "
                      f"for the {workload.num_queries:,} queries over {workload.cells:,} cells")
    return _identity(domain, workload, noise, f"{why}: no structured strategy takes it, the cells are measured")


def _identity(domain, workload, noise: str, reason: str) -> Choice:
    """Every cell of the batch's columns measured once."""
    matrix = Kronecker([Identity(n) for n in domain.sizes]) if len(domain) > 1 else Identity(domain.sizes[0])
    return Choice(LinearStrategy(matrix, workload.answers, noise, "Identity"), f"Identity, {noise}", reason)


def measure(strategy: Strategy, table: Handle, budget: PureDP | ZCDP) -> Estimate:
    """One measurement of ``table`` by ``strategy`` with all of ``budget``, reconstructed."""
    if isinstance(strategy, LinearStrategy):
        spent = for_noise(budget, strategy.noise)
        fitted = strategy.reconstruct(strategy.measure(table, spent))
        return VectorEstimate(fitted.x, fitted.measurements, note=fitted.note)
    return strategy.reconstruct(strategy.measure(table, budget))


class Reader:
    """Answers, variances and intervals of the compiled reads, from the one estimate."""

    def __init__(self, estimate: Estimate, compiled: Compiled, domain):
        self.estimate, self.compiled, self.domain = estimate, compiled, domain

    def _workload(self, part: Part, read: Read):
        """The read as the estimate takes it: its own item (QuerySmasher), an item on the marginal, or a matrix
        over every cell (a data vector)."""
        if isinstance(self.estimate, QuerySmasherEstimate):
            return self.compiled.index(part, read.key)
        if isinstance(self.estimate, MarginalEstimate):
            return [(part.attributes, read.matrix)]
        return embed(self.domain, part.attributes, read.matrix)

    def answers(self, part: Part, read: Read) -> np.ndarray:
        return np.asarray(self.estimate.answer(self._workload(part, read)))[read.order] * read.scale

    def variances(self, part: Part, read: Read) -> np.ndarray:
        return np.asarray(self.estimate.variances(self._workload(part, read)))[read.order] * read.scale**2

    def intervals(self, part: Part, read: Read, level: float) -> tuple[np.ndarray, np.ndarray, str]:
        found = self.estimate.intervals(self._workload(part, read), level)
        return found.lower[read.order] * read.scale, found.upper[read.order] * read.scale, found.method

    @property
    def note(self) -> str:
        return self.estimate.note


def embed(domain, attributes: tuple[str, ...], matrix: Matrix) -> Matrix:
    """Queries on the marginal of ``attributes`` as queries over every cell of ``domain`` (the other attributes
    summed out)."""
    if len(attributes) == len(domain) and len(domain) == 1:
        return matrix
    factors = (list(matrix.factors) if isinstance(matrix, Kronecker) else [matrix] if len(attributes) == 1
               else [] if not attributes else None)  # no attributes: the total
    if factors is not None:
        by_name = dict(zip(attributes, factors))
        return Kronecker([by_name.get(name, Ones(1, n)) for name, n in zip(domain.names, domain.sizes)])
    summed = Kronecker([Identity(n) if name in attributes else Ones(1, n) for name, n in
                        zip(domain.names, domain.sizes)])
    return Product([Dense(matrix.dense()), summed])
