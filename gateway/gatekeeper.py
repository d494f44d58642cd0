"""The gatekeeper of a served kernel: one ``Kernel`` per analyst over the shared table, reached only with a
valid credential, at a bounded rate, with every request in the audit log.

Each analyst's kernel has its own sources, lineage, transcript and handles (another analyst's handles are
simply unknown to it) and charges that analyst's ``Account``, whose share the ledger keeps within the total. Their
memory is drawn from one budget for the whole server (``server_memory``), so together they hold no more than it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .audit import AuditLog
from .credentials import matches
from .server import SessionEnded
from ..kernel import protocol as p
from ..kernel.ledger import SqliteLedger
from ..kernel.limits import Memory
from ..kernel.service import Kernel
from ..kernel.table import TableBackend


def half_of_this_machine() -> int:
    """Half this machine's physical memory, in bytes: the default memory of a served table's kernels together."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


@dataclass
class Rate:
    """A token bucket per analyst: ``per_second`` requests on average, bursts of up to ``burst``."""

    per_second: float = 200.0
    burst: int = 400
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.per_second)
            allowed = tokens >= 1.0
            self._buckets[key] = (tokens - allowed, now)
            if len(self._buckets) > 4096:  # forget buckets that have refilled: they are as good as new
                full = self.burst / self.per_second
                self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full}
        return allowed


class _Serialized(TableBackend):
    """The shared table, one engine call at a time: analysts' kernels run in parallel threads, and engine
    connections (DuckDB's) are not safe to share between threads. The row count, which every new analyst's
    kernel checks against its public bound, is counted once."""

    def __init__(self, table: TableBackend):
        self._table, self._lock = table, threading.Lock()
        self._rows = table.count()

    def count(self, predicate=None) -> int:
        return self._rows if predicate is None else super().count(predicate)

    @property
    def domain(self):
        return self._table.domain

    def histogram(self, attributes: Sequence[int], predicate=None) -> np.ndarray:
        with self._lock:
            return self._table.histogram(attributes, predicate)


class Gatekeeper:
    """Who may ask what of one table. ``server_memory``: the bytes all analysts' kernels may hold together (each
    also within its own ``limits.memory``); ``options`` go to every analyst's ``Kernel`` (seed, max_rows, limits)."""

    def __init__(self, table: TableBackend, ledger: SqliteLedger, *, audit: AuditLog | None = None,
                 rate: Rate | None = None, server_memory: int | None = None, **options: Any):
        self.ledger, self.audit, self._rate, self._options = ledger, audit, rate or Rate(), options
        self.memory = Memory(half_of_this_machine() if server_memory is None else server_memory,
                             holder="the server (all its analysts' kernels together)",
                             advice="the data owner can raise it with `ektelo-ng kernel serve --server-memory`")
        self._table = _Serialized(table)
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()
        self._throttled: set[str] = set()

    def authenticate(self, analyst: str, token: str, peer: str) -> p.ErrorInfo | None:
        """None if ``token`` is ``analyst``'s credential and the analyst is active, else the refusal. Failed
        hellos are audited at the peer's rate only, so a guesser cannot fill the disk (nor lock others out)."""
        if matches(token, self.ledger.credential(analyst)):
            return None
        if self._rate.allow(f"failed hellos from {peer}"):
            self._record(analyst, "hello", "unauthenticated")
        return p.ErrorInfo(error="unauthenticated", message="unknown analyst, wrong token, or revoked: nothing was "
                           "done")

    def handle(self, analyst: str, text: str | bytes, deadline: float | None = None) -> str:
        """Answer one request of an authenticated ``analyst`` (as JSON) by ``deadline`` (``time.monotonic()``),
        unless revoked, over its rate or its share of the audit log, or the audit log cannot be written (nothing is
        done unaudited)."""
        if self.audit is not None and self.audit.failure is not None:
            return p.ErrorInfo(error="busy", message=f"the kernel cannot write its audit log ({self.audit.failure}); "
                               "nothing was done: tell the data owner").model_dump_json()
        if self.audit is not None and self.audit.over_quota(analyst):
            self._record(analyst, None, "audit_quota")
            return p.ErrorInfo(error="busy", message=f"your share of the audit log ({self.audit.quota} bytes) is used "
                               "up: nothing was done; ask the data owner to raise it").model_dump_json()
        if self.ledger.credential(analyst) is None:
            self._record(analyst, None, "unauthenticated")
            raise SessionEnded(p.ErrorInfo(error="unauthenticated", message=f"analyst {analyst!r} was revoked; "
                                           "nothing was done, and the connection is closed"))
        if not self._rate.allow(analyst):
            if analyst not in self._throttled:  # one audit entry per stretch of refusals
                self._throttled.add(analyst)
                self._record(analyst, None, "rate_limited")
            return p.ErrorInfo(error="rate_limited", message=f"more than {self._rate.per_second:g} requests a second "
                               f"(bursts of {self._rate.burst}); nothing was done: wait and retry").model_dump_json()
        self._throttled.discard(analyst)
        try:
            kernel = self._kernel(analyst)
        except ValueError as full:  # the server's memory has no room for the analyst's first source
            return p.ErrorInfo(error="busy", message=f"nothing was done: {full}").model_dump_json()
        return kernel.handle_json(text, deadline)

    def _kernel(self, analyst: str) -> Kernel:
        """The analyst's kernel, built on its first request, once (under the lock: a second one built by a racing
        first request would hold the server's memory for nothing; a build takes milliseconds, the table's row count
        being counted once)."""
        kernel = self._kernels.get(analyst)
        if kernel is None:
            share = type(self.ledger.total)(self.ledger.shares(analyst)[0].share)
            journal = None if self.audit is None else lambda entry: self.audit.record(analyst, entry)
            with self._lock:
                if analyst not in self._kernels:
                    self._kernels[analyst] = Kernel(self._table, share, ledger=self.ledger.account(analyst),
                                                    journal=journal, memory=self.memory, **self._options)
                kernel = self._kernels[analyst]
        return kernel

    def _record(self, analyst: str | None, op: str | None, outcome: str) -> None:
        if self.audit is not None:
            self.audit.record(analyst, {"op": op, "charge": None, "outcome": outcome})
