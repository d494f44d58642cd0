"""A table's durable budget in SQLite: its total, each analyst's share of it, and every charge. Shares compose
sequentially; a charge is committed in a write-locked transaction before its answer leaves the kernel, so
kernels sharing a file cannot overspend together and a restart never refunds (docs/privacy/accountant.md).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from .accountant import BudgetExceeded
from .privacy import PureDP, ZCDP

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budget (id INTEGER PRIMARY KEY CHECK (id = 1), kind TEXT NOT NULL, total TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS analysts (name TEXT PRIMARY KEY, share TEXT NOT NULL, spent TEXT NOT NULL,
                                     credential TEXT NOT NULL, revoked INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS charges (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, analyst TEXT NOT NULL,
                                    increment TEXT NOT NULL, spent TEXT NOT NULL, record TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Share:
    """One analyst's row: its share of the total, what it has spent, whether it was revoked."""

    analyst: str
    share: Fraction
    spent: Fraction
    revoked: bool


class SqliteLedger:
    """The budget of one protected table, kept in a file."""

    def __init__(self, path: str | Path, total: PureDP | ZCDP | None = None):
        """Open the ledger at ``path``; ``total`` creates it if new and must match an existing one's."""
        self.path = Path(path)
        if total is None and not self.path.is_file():
            raise FileNotFoundError(f"no ledger at {self.path}: create it with `ektelo-ng kernel init`")
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
        self._lock = threading.RLock()  # one connection, shared by the threads of a served kernel
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        with self._transaction():
            row = self._db.execute("SELECT kind, total FROM budget WHERE id = 1").fetchone()
            if row is None and total is not None:
                self._db.execute("INSERT INTO budget VALUES (1, ?, ?)", (total.kind, str(total.value)))
                row = (total.kind, str(total.value))
            if row is None:
                raise ValueError(f"{self.path} is not a budget ledger")
            if total is not None and (row[0], Fraction(row[1])) != (total.kind, total.value):
                raise ValueError(
                    f"ledger {self.path} was created for a {row[0]} budget of {row[1]}, not "
                    f"{total.kind} {total.value}; use that budget or a new ledger file"
                )
        self.total: PureDP | ZCDP = (PureDP if row[0] == "pure" else ZCDP)(Fraction(row[1]))

    @contextmanager
    def _transaction(self):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _read(self, query: str, *arguments) -> list[tuple]:
        with self._lock:
            return self._db.execute(query, arguments).fetchall()

    def add(self, analyst: str, share: Fraction, credential: str = "") -> None:
        """Give ``analyst`` a share of the total (and a credential digest), or raise having changed nothing."""
        with self._transaction():
            free = self.total.value - self._allocated()
            if share < 0 or share > free:
                raise ValueError(
                    f"a share of {float(share):.6g} does not fit: {float(free):.6g} of the total "
                    f"{float(self.total.value):.6g} is not yet given to analysts"
                )
            try:
                self._db.execute("INSERT INTO analysts VALUES (?, ?, '0', ?, 0)", (analyst, str(share), credential))
            except sqlite3.IntegrityError:
                raise ValueError(f"analyst {analyst!r} exists already (revoked analysts keep their name)") from None

    def _allocated(self) -> Fraction:
        rows = self._db.execute("SELECT share, spent, revoked FROM analysts").fetchall()
        return sum((Fraction(spent if revoked else share) for share, spent, revoked in rows), Fraction(0))

    def revoke(self, analyst: str) -> None:
        """Stop ``analyst`` at once: its next charge is refused, and the unspent part of its share is freed."""
        with self._transaction():
            if not self._db.execute("UPDATE analysts SET revoked = 1 WHERE name = ?", (analyst,)).rowcount:
                raise KeyError(f"no analyst {analyst!r} in {self.path}")

    def shares(self, analyst: str | None = None) -> list[Share]:
        """Every analyst's row, or only ``analyst``'s."""
        rows = self._read(
            "SELECT name, share, spent, revoked FROM analysts WHERE ? IN (name, '') ORDER BY name", analyst or ""
        )
        return [Share(name, Fraction(share), Fraction(spent), bool(revoked)) for name, share, spent, revoked in rows]

    def credential(self, analyst: str) -> str | None:
        """The stored credential digest of an active analyst; None if unknown or revoked."""
        rows = self._read("SELECT credential FROM analysts WHERE name = ? AND revoked = 0", analyst)
        return rows[0][0] if rows else None

    def account(self, analyst: str, share: Fraction | None = None) -> Account:
        """``analyst``'s account; with ``share``, the analyst is first added if new (an in-process owner)."""
        if share is not None and not self.shares(analyst):
            self.add(analyst, share)
        if not self.shares(analyst):
            raise KeyError(f"no analyst {analyst!r} in {self.path}")
        return Account(self, analyst)

    def commit(self, analyst: str, increment: Fraction, record: str) -> Fraction:
        """Durably add ``increment`` to ``analyst``'s spend, refusing overspend and revoked analysts."""
        with self._transaction():
            row = self._db.execute("SELECT share, spent, revoked FROM analysts WHERE name = ?", (analyst,)).fetchone()
            if row is None or row[2]:
                raise BudgetExceeded(f"analyst {analyst!r} is not active (revoked); nothing was charged")
            share, spent = Fraction(row[0]), Fraction(row[1]) + increment
            if spent > share:
                raise BudgetExceeded(
                    f"only {float(share - spent + increment):.6g} is left of {analyst!r}'s share "
                    "in the ledger; nothing was measured or charged"
                )
            self._db.execute("UPDATE analysts SET spent = ? WHERE name = ?", (str(spent), analyst))
            self._db.execute(
                "INSERT INTO charges (at, analyst, increment, spent, record) VALUES (?, ?, ?, ?, ?)",
                (time.time(), analyst, str(increment), str(spent), record),
            )
        return spent

    def close(self) -> None:
        self._db.close()


@dataclass(frozen=True)
class Account:
    """One analyst's share, as the ledger its kernel's accountant charges (``kernel.accountant.Ledger``)."""

    ledger: SqliteLedger
    analyst: str

    def spent(self) -> Fraction:
        return self.ledger.shares(self.analyst)[0].spent

    def commit(self, increment: Fraction, record: str) -> Fraction:
        return self.ledger.commit(self.analyst, increment, record)
