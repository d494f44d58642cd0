"""Building ``where`` predicates in Python: ``attr("age") >= 30``, combined with ``&``, ``|`` and ``~``.

The builder only writes the kernel's predicate models (``kernel.predicate``), which are what
crosses the trust boundary; it needs no trust itself, so it lives on the client side.

>>> p = (attr("age") >= 30) & ~attr("sex").isin(["M"])
>>> p.kind, [t.kind for t in p.terms]
('and', ['compare', 'not'])
"""

from __future__ import annotations

from ..kernel.predicate import Between, Compare, In, Value


class attr:
    """Builder: ``attr("age") >= 30``, ``attr("sex") == "F"``, ``attr("age").between(20, 29)``."""

    def __init__(self, name: str):
        self.name = name

    def _compare(self, op: str, value: Value) -> Compare:
        return Compare(attribute=self.name, op=op, value=value)

    def __eq__(self, value):  # type: ignore[override]
        return self._compare("==", value)

    def __ne__(self, value):  # type: ignore[override]
        return self._compare("!=", value)

    def __lt__(self, value):
        return self._compare("<", value)

    def __le__(self, value):
        return self._compare("<=", value)

    def __gt__(self, value):
        return self._compare(">", value)

    def __ge__(self, value):
        return self._compare(">=", value)

    __hash__ = None  # type: ignore[assignment]

    def between(self, low: Value, high: Value) -> Between:
        return Between(attribute=self.name, low=low, high=high)

    def isin(self, values) -> In:
        return In(attribute=self.name, values=list(values))
