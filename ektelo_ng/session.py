"""Opening a session with a kernel: in-process (``protect``) or out-of-process (``connect``)."""

from __future__ import annotations

from pathlib import Path

from kernel.client import Session
from kernel.domain import DomainLike, as_domain
from kernel.privacy import PureDP, ZCDP
from kernel.server import socket_transport
from kernel.service import Kernel
from kernel.table import load_table


def protect(
    table,
    domain: DomainLike,
    budget: PureDP | ZCDP,
    *,
    seed: int | None = None,
    ledger: str | Path | None = None,
) -> Session:
    """Load ``table`` into an in-process kernel and return a session; ``session.source`` is the root handle.

    ``table``: a dict of columns, a numpy structured or 2-D array, a pandas DataFrame or a CSV path,
    validated against ``domain``. Noise is cryptographically secure unless ``seed`` is given, which
    makes answers reproducible and flags every one of them as seeded. ``ledger`` names a file that
    keeps the spent budget across restarts. In-process mode shares the analyst's Python process, so
    it protects against mistakes, not against a hostile analyst: use ``connect`` for isolation.
    """
    kernel = Kernel(load_table(table, as_domain(domain)), budget, seed=seed, ledger=ledger)
    return Session(kernel.handle_json)


def connect(address: str, timeout: float | None = None) -> Session:
    """A session with a kernel served by another process (``ektelo-ng kernel serve``); this process holds no data."""
    return Session(socket_transport(address, timeout))
