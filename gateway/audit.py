"""The audit log: append-only JSON lines of who asked what, what was charged and what was refused.

Entries are the kernels' transcript entries (requests without their array payloads, never data) with the
analyst's name, plus the gateway's own refusals. The file is opened for appending only, mode 0600.

It cannot be filled by one analyst at everyone else's expense:

- every accepted request is written, one line each; a run of one analyst's refused requests is written as its
  first line and then one line of counts per ``fold_seconds`` (a refusal changed nothing but the log);
- each analyst may write ``quota`` bytes per server run; past it the gatekeeper refuses that analyst alone;
- ``warn`` is told when free disk space falls below ``warn_free_bytes``, and when an analyst passes 80% of its quota.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

QUOTA = 1 << 28
"""Bytes of the log each analyst may write per server run (256 MiB: about a million charged requests)."""
WARN_SECONDS = 3600.0
"""The owner is warned again about free space at most this often."""


class _Run:
    """Refusals of one analyst, counted since ``since``."""

    def __init__(self) -> None:
        self.since, self.counts = time.time(), Counter()


class AuditLog:
    def __init__(self, path: str | Path, *, quota: int = QUOTA, warn: Callable[[str], None] | None = None,
                 warn_free_bytes: int = 1 << 30, fold_seconds: float = 60.0):
        self.path = Path(path)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(descriptor, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.quota, self._warn, self._warn_free, self._fold_seconds = quota, warn, warn_free_bytes, fold_seconds
        self._written: Counter[str | None] = Counter()
        self._runs: dict[str | None, _Run] = {}
        self._warned: set[str | None] = set()
        self._last_space_check, self._last_space_warning = 0.0, -WARN_SECONDS
        self.failure: OSError | None = None
        """The first write that failed (disk full...): the gatekeeper then refuses every request."""

    def record(self, analyst: str | None, entry: dict[str, Any]) -> None:
        """Append one entry (or count it in its analyst's run of refusals), flushed to the file before the answer is
        sent. A failed write is kept, not raised: the request it records was already charged (the ledger has it), so
        its answer still goes out."""
        with self._lock:
            refused, run = entry.get("outcome") != "ok", self._runs.get(analyst)
            if refused and run is not None and time.time() - run.since < self._fold_seconds:
                run.counts[f"{entry.get('op')}: {entry.get('outcome')}"] += 1
                return
            self._flush(analyst)
            if refused:
                self._runs[analyst] = _Run()
            self._write(analyst, entry)

    def over_quota(self, analyst: str) -> bool:
        """Whether ``analyst`` has written its share of the log in this server run."""
        return self._written[analyst] >= self.quota

    def flush(self) -> None:
        """Write every pending run of refusals (as the server stops, or before the log is read)."""
        with self._lock:
            for analyst in list(self._runs):
                self._flush(analyst)

    def close(self) -> None:
        self.flush()
        self._file.close()

    def _flush(self, analyst: str | None) -> None:
        """Write the counts of ``analyst``'s run of refusals, if it has any beyond its first."""
        run = self._runs.pop(analyst, None)
        if run is not None and run.counts:
            self._write(analyst, {"op": None, "charge": None, "outcome": "repeated", "since": run.since,
                                  "counts": dict(run.counts)})

    def _write(self, analyst: str | None, entry: dict[str, Any]) -> None:
        line = json.dumps({"time": time.time(), **entry, "analyst": analyst}, separators=(",", ":"), default=str)
        try:
            self._file.write(line + "\n")
            self._file.flush()
        except OSError as error:
            self.failure = self.failure or error
            return
        self._written[analyst] += len(line) + 1
        if self._written[analyst] >= 0.8 * self.quota and analyst not in self._warned and self._warn is not None:
            self._warned.add(analyst)
            self._warn(f"analyst {analyst!r} has written {self._written[analyst]} bytes of the audit log, 80% of its "
                       f"share of {self.quota}: past it, its requests are refused (kernel serve --audit-quota)")
        self._check_space()

    def _check_space(self) -> None:
        """Warn the owner, at most once an hour, when the log's disk runs low (checked at most once a minute)."""
        now = time.monotonic()
        if self._warn is None or now - self._last_space_check < 60.0:
            return
        self._last_space_check = now
        free = shutil.disk_usage(self.path.parent).free
        if free < self._warn_free and now - self._last_space_warning >= WARN_SECONDS:
            self._last_space_warning = now
            self._warn(f"the audit log's disk has {free} bytes free, under {self._warn_free}: when it is full every "
                       f"request is refused; free space or move {self.path}")


def read_audit(path: str | Path) -> Iterator[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)
