"""Strategy selection: which linear queries to measure (no data, no budget)."""

from operators.selection.residual_planner import ResidualPlannerStrategy, residual_planner
from operators.selection.strategy import Noise, Strategy

__all__ = ["Noise", "ResidualPlannerStrategy", "Strategy", "residual_planner"]
