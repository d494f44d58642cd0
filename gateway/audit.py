"""The audit log: append-only JSON lines of who asked what, what was charged and what was refused.

Entries are the kernels' transcript entries (requests without their array payloads, never data) with the
analyst's name, plus the gateway's own refusals. The file is opened for appending only, mode 0600.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class AuditLog:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(descriptor, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self.failure: OSError | None = None
        """The first write that failed (disk full...): the gatekeeper then refuses every request."""

    def record(self, analyst: str | None, entry: dict[str, Any]) -> None:
        """Append one entry, flushed to the file before the answer is sent. A failed write is kept, not raised:
        the request it records was already charged (the ledger has it), so its answer still goes out."""
        line = json.dumps({"time": time.time(), **entry, "analyst": analyst}, separators=(",", ":"), default=str)
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError as error:
                self.failure = self.failure or error

    def close(self) -> None:
        self._file.close()


def read_audit(path: str | Path) -> Iterator[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)
