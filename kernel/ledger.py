"""A durable budget ledger in SQLite: a charge is committed before its answer leaves the kernel.

It stores the total budget and the root spend; each charge re-reads the spend in a write-locked transaction,
so kernels sharing a file cannot overspend together and a restart never refunds (docs/privacy/accountant.md).
"""

from __future__ import annotations

import sqlite3
import time
from fractions import Fraction
from pathlib import Path

from kernel.accountant import BudgetExceeded
from kernel.privacy import PureDP, ZCDP

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budget (id INTEGER PRIMARY KEY CHECK (id = 1), kind TEXT NOT NULL,
                                   total TEXT NOT NULL, spent TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL,
                                    increment TEXT NOT NULL, spent TEXT NOT NULL, record TEXT NOT NULL);
"""


class SqliteLedger:
    """The root spend of one protected table, kept in a file."""

    def __init__(self, path: str | Path, total: PureDP | ZCDP):
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT kind, total FROM budget WHERE id = 1").fetchone()
            if row is None:
                self._db.execute("INSERT INTO budget VALUES (1, ?, ?, '0')", (total.kind, str(total.value)))
            elif (row[0], Fraction(row[1])) != (total.kind, total.value):
                raise ValueError(
                    f"ledger {self.path} was created for a {row[0]} budget of {row[1]}, not {total.kind} "
                    f"{total.value}; use that budget or a new ledger file"
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self.total = total.value

    def spent(self) -> Fraction:
        return Fraction(self._db.execute("SELECT spent FROM budget WHERE id = 1").fetchone()[0])

    def commit(self, increment: Fraction, record: str) -> Fraction:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            spent = Fraction(self._db.execute("SELECT spent FROM budget WHERE id = 1").fetchone()[0]) + increment
            if spent > self.total:
                raise BudgetExceeded(f"the ledger {self.path} has only {float(self.total - spent + increment):.6g} "
                                     "left; nothing was measured or charged")
            self._db.execute("UPDATE budget SET spent = ? WHERE id = 1", (str(spent),))
            self._db.execute(
                "INSERT INTO charges (at, increment, spent, record) VALUES (?, ?, ?, ?)",
                (time.time(), str(increment), str(spent), record),
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return spent

    def close(self) -> None:
        self._db.close()
