"""The gatekeeper of a served kernel: one ``Kernel`` per analyst over the shared table, reached only with a
valid credential, at a bounded rate, with every request in the audit log.

Each analyst's kernel has its own sources, lineage, transcript and handles (another analyst's handles are
simply unknown to it) and charges that analyst's ``Account``, whose share the ledger keeps within the total.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.audit import AuditLog
from gateway.credentials import matches
from kernel import protocol as p
from kernel.ledger import SqliteLedger
from kernel.service import Kernel
from kernel.table import TableBackend


@dataclass
class Rate:
    """A token bucket per analyst: ``per_second`` requests on average, bursts of up to ``burst``."""

    per_second: float = 200.0
    burst: int = 400
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allow(self, analyst: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(analyst, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.per_second)
            allowed = tokens >= 1.0
            self._buckets[analyst] = (tokens - allowed, now)
        return allowed


class _Serialized(TableBackend):
    """The shared table, one engine call at a time: analysts' kernels run in parallel threads, and engine
    connections (DuckDB's) are not safe to share between threads."""

    def __init__(self, table: TableBackend):
        self._table, self._lock = table, threading.Lock()

    @property
    def domain(self):
        return self._table.domain

    def histogram(self, attributes: Sequence[int], predicate=None) -> np.ndarray:
        with self._lock:
            return self._table.histogram(attributes, predicate)


class Gatekeeper:
    """Who may ask what of one table. ``options`` go to every analyst's ``Kernel`` (seed, max_rows, limits)."""

    def __init__(self, table: TableBackend, ledger: SqliteLedger, *, audit: AuditLog | None = None,
                 rate: Rate | None = None, **options: Any):
        self.ledger, self._audit, self._rate, self._options = ledger, audit, rate or Rate(), options
        self._table = _Serialized(table)
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()

    def authenticate(self, analyst: str, token: str, peer: str) -> p.ErrorInfo | None:
        """None if ``token`` is ``analyst``'s credential and the analyst is active, else the refusal (audited).
        Hellos count against the peer's rate: guessing tokens or filling the audit log is as slow as asking."""
        if not self._rate.allow(f"hello from {peer}"):
            return p.ErrorInfo(error="rate_limited", message="too many hellos from your address; wait and retry")
        if not matches(token, self.ledger.credential(analyst)):
            self._record(analyst, "hello", "unauthenticated")
            return p.ErrorInfo(error="unauthenticated", message="unknown analyst, wrong token, or revoked: nothing "
                               "was done")
        return None

    def handle(self, analyst: str, text: str | bytes) -> str:
        """Answer one request of an authenticated ``analyst`` (as JSON), unless revoked or over its rate, or the
        audit log cannot be written (nothing is done unaudited)."""
        if self._audit is not None and self._audit.failure is not None:
            return p.ErrorInfo(error="busy", message=f"the kernel cannot write its audit log ({self._audit.failure}); "
                               "nothing was done: tell the data owner").model_dump_json()
        if self.ledger.credential(analyst) is None:
            return self._refuse(analyst, "unauthenticated", f"analyst {analyst!r} was revoked; nothing was done")
        if not self._rate.allow(analyst):
            return self._refuse(analyst, "rate_limited", f"more than {self._rate.per_second:g} requests a second "
                                f"(bursts of {self._rate.burst}); nothing was done: wait and retry")
        return self._kernel(analyst).handle_json(text)

    def _kernel(self, analyst: str) -> Kernel:
        with self._lock:
            if analyst not in self._kernels:
                account = self.ledger.account(analyst)
                share = type(self.ledger.total)(self.ledger.shares(analyst)[0].share)
                journal = None if self._audit is None else lambda entry: self._audit.record(analyst, entry)
                self._kernels[analyst] = Kernel(self._table, share, ledger=account, journal=journal, **self._options)
            return self._kernels[analyst]

    def _refuse(self, analyst: str | None, error: str, message: str) -> str:
        self._record(analyst, None, error)
        return p.ErrorInfo(error=error, message=message).model_dump_json()

    def _record(self, analyst: str | None, op: str | None, outcome: str) -> None:
        if self._audit is not None:
            self._audit.record(analyst, {"op": op, "charge": None, "outcome": outcome})
