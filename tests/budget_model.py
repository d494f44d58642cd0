"""An independent model of ektelo's composition rules, for checking the kernel's accounting.

The loss at a node is what was measured there, plus each ordinary child's loss scaled by its
stability (c for pure DP, c^2 for zCDP), plus for each partition the max over its parts.
"""

from __future__ import annotations

from fractions import Fraction


class BudgetModel:
    def __init__(self, quadratic: bool):
        self.quadratic = quadratic
        self.children: dict[str, list[tuple[str, Fraction]]] = {"root": []}
        self.partitions: dict[str, list[str]] = {}
        self.measured: dict[str, Fraction] = {"root": Fraction(0)}

    def add(self, name: str, parent: str, stability: Fraction) -> None:
        self.children[parent].append((name, Fraction(stability)))
        self.children[name] = []
        self.measured[name] = Fraction(0)

    def split(self, name: str, parent: str, parts: list[str]) -> None:
        self.add(name, parent, Fraction(1))
        self.partitions[name] = list(parts)
        for part in parts:
            self.add(part, name, Fraction(1))

    def sources(self) -> list[str]:
        return sorted(n for n in self.children if n not in self.partitions)

    def loss(self, node: str = "root") -> Fraction:
        total = self.measured[node]
        for child, c in self.children[node]:
            factor = c * c if self.quadratic else c
            if child in self.partitions:
                total += factor * max(self.loss(part) for part in self.partitions[child])
            else:
                total += factor * self.loss(child)
        return total
