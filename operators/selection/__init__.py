"""Strategy selection: which linear queries to measure (no data, no budget).

Classic selectors return matrices; the optimizing selectors (HDMM, ResidualPlanner,
QuerySmasher) return a Strategy with its expected error and a reconstruction.
"""

from .classic import (
    adaptive_grid_level1,
    adaptive_grid_level2,
    greedy_h,
    h2,
    hb,
    hb_branching,
    identity,
    mwem_h2_augmentation,
    prefix,
    privelet,
    quadtree,
    stripe,
    total,
    uniform_grid,
)
from .hdmm import hdmm
from .query_smasher import QuerySmasherStrategy, query_class_workload, query_smasher
from .residual_planner import ResidualPlannerStrategy, residual_planner
from .strategy import Noise, Strategy

__all__ = [
    "Noise", "QuerySmasherStrategy", "ResidualPlannerStrategy", "Strategy", "adaptive_grid_level1", "adaptive_grid_level2", "greedy_h", "h2",
    "hb", "hb_branching", "hdmm", "identity", "mwem_h2_augmentation", "prefix", "privelet", "quadtree",
    "query_class_workload", "query_smasher", "residual_planner", "stripe", "total", "uniform_grid",
]
