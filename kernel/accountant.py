"""The privacy accountant: ektelo's Algorithm 2 in exact arithmetic, for pure DP or zCDP. A charge adds to its
source's spend and walks up the lineage, scaled by each derivation's stability (c eps, or c^2 rho), a partition
node spending the max over its parts; rounded up onto the grid, planned first and applied only if the root
accepts, durable in the ledger before its answer leaves (docs/privacy/accountant.md, numbers.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

from .limits import Work
from .privacy import MAX_AMOUNT, PureDP, ZCDP, on_grid

PLAN_STEPS = 1 << 12
"""The work of planning a charge one level up the lineage (its exact fractions: about 3.3 us measured)."""


class BudgetExceeded(Exception):
    """A request would spend more than the session's total budget."""


class Ledger(Protocol):
    def commit(self, increment: Fraction, record: str) -> Fraction:
        """Durably add ``increment`` to the stored spend (refusing overspend); return the new total spent."""

    def spent(self) -> Fraction: ...


@dataclass
class _Node:
    parent: str | None
    stability: Fraction
    is_partition: bool = False
    spent: Fraction = field(default_factory=Fraction)
    depth: int = 0


class Accountant:
    """Tracks spend per source and decides every charge."""

    def __init__(self, total: PureDP | ZCDP, root: str, ledger: Ledger | None = None):
        self.total = total
        self.kind = type(total)
        self.ledger = ledger
        self.root = root
        spent = ledger.spent() if ledger is not None else Fraction(0)  # a ledger's stored spend is never refunded
        self._nodes: dict[str, _Node] = {root: _Node(parent=None, stability=Fraction(1), spent=spent)}

    # ---- lineage -----------------------------------------------------------------------
    def add(self, node: str, parent: str, stability: Fraction, is_partition: bool = False) -> None:
        if parent not in self._nodes:
            raise KeyError(parent)
        if stability < 0:
            raise ValueError(f"stability must be non-negative, got {stability}")
        depth = self._nodes[parent].depth + 1
        self._nodes[node] = _Node(parent=parent, stability=Fraction(stability), is_partition=is_partition, depth=depth)

    def walk(self, node: str) -> int:
        """The levels a charge at ``node`` walks to the root (public: the lineage's shape), for its cost."""
        return self._nodes[node].depth + 1

    def remove(self, nodes: list[str]) -> None:
        """Forget released sources: their charges were propagated to their ancestors when made, and no charge can
        reach them again (their descendants are released with them)."""
        for node in nodes:
            del self._nodes[node]

    def scale(self, cost: Fraction, stability: Fraction) -> Fraction:
        """Privacy loss on the parent of a c-stable derivation: c * eps (pure) or c^2 * rho (zCDP), rounded up."""
        loss = cost * stability if self.kind is PureDP else cost * stability * stability
        return on_grid(loss, self.kind.grid, up=True)

    # ---- charging ----------------------------------------------------------------------
    def plan(
        self, node: str, cost: Fraction, planned: dict[str, Fraction] | None = None, work: Work | None = None
    ) -> dict[str, Fraction]:
        """New spends along the path if ``cost`` were charged at ``node``, or BudgetExceeded. ``planned``: spends
        planned by a batch's earlier charges, read in place of the stored ones (as if made one after another);
        ``work``: counts ``PLAN_STEPS`` a level."""
        if cost < 0:
            raise ValueError(f"a charge cannot be negative, got {cost}")
        planned, cost = planned or {}, on_grid(cost, self.kind.grid, up=True)

        def spent(name: str) -> Fraction:
            return planned.get(name, self._nodes[name].spent)

        updates: dict[str, Fraction] = {}
        while True:
            if work is not None:
                work.step(PLAN_STEPS)
            if cost > MAX_AMOUNT:
                raise BudgetExceeded(
                    f"this request would cost {_show(cost)} at source {node}, above the limit of "
                    f"{MAX_AMOUNT:.0e} at any source; nothing was measured or charged"
                )
            current = self._nodes[node]
            updates[node] = spent(node) + cost
            if current.parent is None:
                break
            parent = self._nodes[current.parent]
            if parent.is_partition:
                increase = max(spent(node) + cost - spent(current.parent), Fraction(0))
                updates[current.parent] = spent(current.parent) + increase
                node, cost = parent.parent, self.scale(increase, parent.stability)
            else:
                node, cost = current.parent, self.scale(cost, current.stability)
        if updates[self.root] > self.total.value:
            raise BudgetExceeded(
                f"this request needs {_show(updates[self.root] - self._nodes[self.root].spent)} of the budget at the "
                f"root but only {_show(self.total.value - self._nodes[self.root].spent)} of "
                f"{_show(self.total.value)} remains; nothing was measured or charged"
            )
        return updates

    def charge(self, node: str, cost: Fraction, record: str = "") -> None:
        """Charge ``cost`` at ``node`` or raise BudgetExceeded having changed nothing."""
        self._apply(self.plan(node, cost), record)

    def charge_many(
        self, charges: list[tuple[str, Fraction]], record: str = "", plan_only: bool = False, work: Work | None = None
    ) -> None:
        """Charge each ``(node, cost)`` in order, as that many ``charge`` calls would, or raise BudgetExceeded
        having changed nothing (the root spend only grows, so every step fits iff each planned step does);
        ``plan_only``: check that they fit, changing nothing; ``work``: counts the walks."""
        updates: dict[str, Fraction] = {}
        for node, cost in charges:
            updates.update(self.plan(node, cost, updates, work))
        if updates and not plan_only:
            self._apply(updates, record)

    def _apply(self, updates: dict[str, Fraction], record: str) -> None:
        increment = updates[self.root] - self._nodes[self.root].spent
        if self.ledger is not None and increment > 0:
            updates[self.root] = self.ledger.commit(increment, record)
        for name, value in updates.items():
            self._nodes[name].spent = value

    # ---- public state ------------------------------------------------------------------
    def spent(self, node: str | None = None) -> Fraction:
        return self._nodes[node or self.root].spent

    def per_source(self, names: list[str] | None = None) -> dict[str, Fraction]:
        """The spend of each source (of ``names``, if given) but partition nodes."""
        nodes = self._nodes if names is None else {name: self._nodes[name] for name in names}
        return {name: n.spent for name, n in nodes.items() if not n.is_partition}

    def as_budget(self, value: Fraction) -> PureDP | ZCDP:
        """``value`` as a budget of the session's kind, rounded up onto its grid (as a charge of it is)."""
        return self.kind.model_validate({self.kind._field: on_grid(value, self.kind.grid, up=True)})


def _show(value: Fraction) -> str:
    return f"{float(value):.6g}"
