"""Strategy selection: which linear queries to measure (no data, no budget)."""

from operators.selection.strategy import Noise, Strategy

__all__ = ["Noise", "Strategy"]
