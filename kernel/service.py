"""The kernel: one analyst's session with the private table, answering protocol requests one at a time.

``Kernel.handle_json`` is the single entry point: in-process clients send the same JSON text as socket clients (no
back door). ``OPERATIONS`` maps each request type to the one function that answers it (``kernel.transforms``,
``kernel.measurements``, or the session's public state here); ``Kernel.handle`` is where a measurement is planned,
read, charged and released, and the one place budget is charged.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import networkx as nx
from pydantic import ValidationError

from . import measurements as m
from . import protocol as p
from . import transforms as t
from .accountant import Accountant, BudgetExceeded
from .ledger import Account, SqliteLedger
from .limits import BYTE_STEPS, SKIP_STEPS, SOURCE_STEPS, Cost, Limits, Memory, Timeout, Work
from .matrix.leaves import EXACT
from .noise import NoiseSource
from .privacy import PureDP, ZCDP
from .sources import Sources, UnknownSource
from .table import TableBackend

MAX_ROWS = 1 << 32
"""Default public bound on the table's records, on which the kernel's rounding-error bounds rest."""

TRANSCRIPT_BYTES = 1 << 23
"""What a kernel keeps of its transcript in memory: its newest entries, up to 8 MiB of JSON (a served kernel's audit
log keeps them all, on disk)."""

PAGE = 1024
"""Sources one ``budget`` or ``lineage`` reply lists (a few hundred bytes of JSON each). Pages are not drawn from
memory (their bytes are bounded), so an analyst whose memory is full can still read its state and release."""

TRANSCRIPT_PAGE = 1 << 20
"""Bytes of entries one ``transcript`` reply lists (and at least one entry)."""


class Kernel:
    """The protected kernel of one private table, for one analyst."""

    def __init__(
        self,
        table: TableBackend,
        budget: PureDP | ZCDP,
        *,
        seed: int | None = None,
        ledger: str | Path | Account | None = None,
        max_rows: int = MAX_ROWS,
        limits: Limits = Limits(),
        journal: Callable[[dict[str, Any]], None] | None = None,
        memory: Memory | None = None,
    ):
        """``max_rows`` is a public bound on the table's records (checked here, never released otherwise):
        rounding-error bounds, hence charges, rest on it, so a tighter one gives slightly less noise. ``ledger``:
        an analyst's ``Account``, or a file where this kernel spends the whole budget as the analyst "owner";
        ``journal`` receives each transcript entry (the served kernel's audit log); ``memory``: the server's, which this
        kernel's memory is drawn from, shared with the other analysts' kernels."""
        if not isinstance(budget, (PureDP, ZCDP)):
            raise TypeError("budget must be PureDP(epsilon) or ZCDP(rho)")
        if not 1 <= max_rows < EXACT / 2:
            raise ValueError(f"max_rows must be between 1 and 2^52, got {max_rows}")
        if table.count() > max_rows:
            raise ValueError(f"the table has more records than max_rows = {max_rows}: give a larger public bound")
        self._limits, self._journal = limits, journal
        self._lock = threading.Lock()
        self._noise = NoiseSource.seeded(seed) if seed is not None else NoiseSource()
        self._transcript: deque[tuple[dict[str, Any], int]] = deque()  # each entry with its JSON length
        self._transcript_bytes = 0
        self._requests = itertools.count()
        self._sources = Sources(table, limits, float(max_rows), memory)
        if isinstance(ledger, (str, Path)):
            ledger = SqliteLedger(ledger, budget).account("owner", budget.value)
        self._accountant = self._sources.accountant = Accountant(budget, self._sources.root, ledger)

    @property
    def seeded(self) -> bool:
        """Whether this kernel draws reproducible (non-secure) noise: every answer says so too."""
        return self._noise.is_seeded

    # ---- entry points ------------------------------------------------------------------------------------------
    def handle_json(self, text: str | bytes, deadline: float | None = None) -> str:
        """Answer one request given as JSON, by ``deadline`` (``time.monotonic()``); always returns a JSON response
        (errors included). Its length and objects are checked before it is parsed."""
        try:
            self._limits.text(text)
            request = p.RequestAdapter.validate_json(text)
        except (ValueError, ValidationError) as error:
            message = _describe(error) if isinstance(error, ValidationError) else str(error)
            with self._lock:
                self._record({"op": None, "charge": None, "outcome": "invalid_request", "work": 0})
            return p.ErrorInfo(error="invalid_request", message=message).model_dump_json()
        return self.handle(request, deadline, lambda response: response.model_dump_json())

    def handle(self, request, deadline: float | None = None, encode: Callable[[Any], Any] = lambda reply: reply) -> Any:
        """Answer one request: its operation validates and prepares it from public facts (refusing, before any work,
        what is malformed or over a limit); a measurement's charges are then planned (refusing, before any data is
        read, what the budget cannot cover), its data read (stopped at the deadline), charged at this one site, and
        released, which only draws noise and cannot fail. Every outcome becomes one transcript entry. The response
        is returned through ``encode`` (``handle_json``: as JSON) before the request's working memory is given back."""
        with self._lock:
            work = Work(deadline)
            try:
                response = OPERATIONS[type(request)](self, request, work)
                if isinstance(response, m.Measurement):
                    self._accountant.charge_many(response.charges, plan_only=True, work=work)
                    exact = response.exact(work)
                    work.step(0)  # the last moment a deadline can stop it: nothing is charged yet
                    self._accountant.charge_many(response.charges, record=request.op)
                    response = response.release(exact, self._noise)
            except BudgetExceeded as error:
                response = p.ErrorInfo(error="budget_exceeded", message=str(error))
            except UnknownSource as error:
                response = p.ErrorInfo(error="unknown_source", message=str(error.args[0]))
            except Timeout as error:
                response = p.ErrorInfo(error="timeout", message=str(error))
            except (ValueError, TypeError, NotImplementedError) as error:
                response = p.ErrorInfo(error="invalid_request", message=str(error))
            except Exception as error:  # never let a request take the kernel down; say nothing private
                message = f"the kernel could not carry out this request ({type(error).__name__})"
                response = p.ErrorInfo(error="invalid_request", message=message)
            self._record(_entry(request, response, work))
            try:
                return encode(response)
            finally:
                self._sources.settle()

    def _record(self, entry: dict[str, Any]) -> None:
        """Keep ``entry`` in the transcript (its newest TRANSCRIPT_BYTES) and pass it to the journal."""
        entry.update(seq=next(self._requests), time=time.time(), seeded=self.seeded)
        size = len(json.dumps(entry)) + 2  # and its separator in the reply
        self._transcript.append((entry, size))
        self._transcript_bytes += size
        while self._transcript_bytes > TRANSCRIPT_BYTES:
            self._transcript_bytes -= self._transcript.popleft()[1]
        if self._journal is not None:
            self._journal(entry)

    # ---- public state ------------------------------------------------------------------------------------------
    def _page(self, cursor: int, work: Work) -> tuple[list[str], int | None]:
        """Up to PAGE sources from position ``cursor`` on, in the order they were made, and the next page's cursor;
        their work checked and counted first, from the public number of sources."""
        graph = self._sources.graph
        count = max(0, min(PAGE, len(graph) - cursor))
        cost = Cost(SKIP_STEPS * min(cursor, len(graph)) + SOURCE_STEPS * count)  # its reply's bytes: bounded by PAGE
        self._limits.check("this page", cost, self._sources.memory)
        work.step(cost.steps)
        after = cursor + count
        return list(itertools.islice(graph, cursor, after)), after if after < len(graph) else None

    def _budget(self, request: p.BudgetStatus, work: Work) -> p.BudgetInfo:
        names, after = self._page(request.cursor, work)
        a = self._accountant
        spent = a.spent()
        return p.BudgetInfo(
            total=a.total,
            spent=a.as_budget(spent),
            remaining=a.as_budget(a.total.value - spent),
            per_source={name: a.as_budget(value) for name, value in a.per_source(names).items()},
            seeded=self.seeded,
            next=after,
        )

    def _lineage(self, request: p.LineageGraph, work: Work) -> p.LineageInfo:
        names, after = self._page(request.cursor, work)
        graph = self._sources.graph
        page = nx.DiGraph(list(graph.in_edges(names, data=True)))
        page.add_nodes_from((name, {**graph.nodes[name], "spent": str(self._accountant.spent(name))}) for name in names)
        return p.LineageInfo(graph=nx.node_link_data(page, edges="links"), next=after)

    def _transcript_log(self, request: p.TranscriptLog, work: Work) -> p.TranscriptInfo:
        """The entries from number ``cursor`` (or the oldest kept) on, up to TRANSCRIPT_PAGE bytes; their work
        checked and counted from their known lengths before the reply is built."""
        kept = self._transcript
        start = min(max(0, request.cursor - kept[0][0]["seq"]), len(kept)) if kept else 0
        entries, size, after = [], 0, None
        for entry, length in itertools.islice(kept, start, None):
            if entries and size + length > TRANSCRIPT_PAGE:
                after = entry["seq"]
                break
            entries.append(entry)
            size += length
        cost = Cost(SKIP_STEPS * start + BYTE_STEPS * size)  # its bytes are bounded by TRANSCRIPT_PAGE
        self._limits.check("this page", cost, self._sources.memory)
        work.step(cost.steps)
        return p.TranscriptInfo(seeded=self.seeded, entries=entries, next=after)


def _on_sources(operation: Callable) -> Callable[[Kernel, Any, Work], Any]:
    return lambda kernel, request, work: operation(kernel._sources, request, work)


OPERATIONS: dict[type, Callable[[Kernel, Any, Work], Any]] = {
    p.Root: _on_sources(t.root),
    p.Describe: _on_sources(t.describe),
    p.Where: _on_sources(t.where),
    p.Project: _on_sources(t.project),
    p.Vectorize: _on_sources(t.vectorize),
    p.VectorizeMany: _on_sources(t.vectorize_many),
    p.Transform: _on_sources(t.transform),
    p.ReduceByPartition: _on_sources(t.reduce_by_partition),
    p.SplitByPartition: _on_sources(t.split_by_partition),
    p.Release: _on_sources(t.release),
    p.Laplace: _on_sources(m.laplace_answers),
    p.Gaussian: _on_sources(m.gaussian_answers),
    p.GaussianBatch: _on_sources(m.gaussian_batch),
    p.NoisyCount: _on_sources(m.noisy_count),
    p.WorstApprox: _on_sources(m.worst_approx),
    p.DyadicDeviations: _on_sources(m.dyadic_deviations),
    p.SplitPoints: _on_sources(m.split_points),
    p.ChoosePartition: _on_sources(m.choose_partition),
    p.FourierSelect: _on_sources(m.fourier_select),
    p.StructureFirst: _on_sources(m.structure_first_boundaries),
    p.PrivBayesSelect: _on_sources(m.privbayes_select),
    p.MarginalSelect: _on_sources(m.marginal_select),
    p.BudgetStatus: Kernel._budget,
    p.LineageGraph: Kernel._lineage,
    p.TranscriptLog: Kernel._transcript_log,
}
"""Every request type and the one function that answers it (a test checks it covers the protocol)."""


ENTRY_VALUES = 256
"""Values an accepted request's transcript entry keeps (scalars first); a refused one keeps its top-level scalars."""


def _entry(request, response, work: Work) -> dict[str, Any]:
    """What was asked and what came of it, without data or bulky payloads (arrays by their shape, long lists by
    their length, past ``ENTRY_VALUES`` values "..."): an entry stays small, a refused one smaller still."""
    charges = response.answers if isinstance(response, p.Answers) else [response] * hasattr(response, "charge")
    outcome = response.error if isinstance(response, p.ErrorInfo) else "ok"
    summary = (
        _summary(request)
        if outcome == "ok"
        else {k: v for k, v in _summary(request).items() if not isinstance(v, (dict, list))}
    )
    return {
        **summary,
        "charge": str(sum(a.charge.value for a in charges)) if charges else None,
        "outcome": outcome,
        "work": work.steps,
    }


def _summary(request) -> dict[str, Any]:
    left = ENTRY_VALUES

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
    problems = [
        f"{'.'.join(str(x) for x in e['loc']) or 'request'}: {e['msg']}"
        for e in error.errors(include_url=False, include_input=False)[:5]
    ]
    return "malformed request: " + "; ".join(problems)
