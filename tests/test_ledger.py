"""The ledger's shares: whatever sequence of adds, revocations and charges, the analysts' spends together stay
within the table's total, each within its share, and a refused step changes nothing (issue 16)."""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.kernel.accountant import BudgetExceeded
from ektelo_ng.kernel.ledger import SqliteLedger
from ektelo_ng.kernel.privacy import PureDP, ZCDP

NAMES = ["a", "b", "c"]
AMOUNTS = st.fractions(min_value=0, max_value=1, max_denominator=16)
STEPS = st.lists(st.tuples(st.sampled_from(["add", "revoke", "commit"]), st.sampled_from(NAMES), AMOUNTS),
                 max_size=25)


@settings(max_examples=60, deadline=None)
@given(total=st.sampled_from([PureDP("3/2"), ZCDP("1/2")]), steps=STEPS)
def test_any_sequence_keeps_spends_within_shares_and_shares_within_the_total(total, steps):
    with tempfile.TemporaryDirectory() as folder:
        ledger = SqliteLedger(Path(folder) / "l.sqlite", total)
        model: dict[str, list] = {}  # name -> [share, spent, revoked]
        for op, name, amount in steps:
            before = ledger.shares()
            allocated = sum((spent if revoked else share for share, spent, revoked in model.values()), Fraction(0))
            if op == "add":
                fits = name not in model and allocated + amount <= total.value
                if fits:
                    ledger.add(name, amount)
                    model[name] = [amount, Fraction(0), False]
                else:
                    with pytest.raises(ValueError):
                        ledger.add(name, amount)
            elif op == "revoke":
                if name in model:
                    ledger.revoke(name)
                    model[name][2] = True
                else:
                    with pytest.raises(KeyError):
                        ledger.revoke(name)
            else:
                row = model.get(name)
                if row and not row[2] and row[1] + amount <= row[0]:
                    assert ledger.commit(name, amount, "test") == row[1] + amount
                    row[1] += amount
                else:
                    with pytest.raises(BudgetExceeded):
                        ledger.commit(name, amount, "test")
                    assert ledger.shares() == before  # refused: nothing changed
            shares = ledger.shares()
            assert {s.analyst: [s.share, s.spent, s.revoked] for s in shares} == model
            assert sum(s.spent for s in shares) <= total.value
            assert sum(s.spent if s.revoked else s.share for s in shares) <= total.value
            assert all(s.spent <= s.share for s in shares)
        ledger.close()


def test_a_reopened_ledger_keeps_its_total_shares_and_spends(tmp_path):
    ledger = SqliteLedger(tmp_path / "l.sqlite", ZCDP("1/2"))
    ledger.add("a", Fraction(1, 4), "digest")
    ledger.commit("a", Fraction(1, 8), "gaussian")
    ledger.close()
    reopened = SqliteLedger(tmp_path / "l.sqlite")
    assert reopened.total == ZCDP("1/2") and reopened.credential("a") == "digest"
    assert reopened.account("a").spent() == Fraction(1, 8)
    with pytest.raises(ValueError, match="was created for"):
        SqliteLedger(tmp_path / "l.sqlite", PureDP("1/2"))
    with pytest.raises(FileNotFoundError, match="kernel init"):
        SqliteLedger(tmp_path / "missing.sqlite")
    with pytest.raises(ValueError, match="exists already"):
        reopened.add("a", Fraction(0))
