"""Plans as Python code: ``plans.catalog[name](source, workload, budget, *, shape=None, **params) -> Estimate``.

``plans.info[name]`` says which dimensions a plan supports, whether it is data-dependent or treats
the record count as public, and its default parameters (``plans.registry``).
"""

from .registry import PlanInfo, catalog, info

__all__ = ["PlanInfo", "catalog", "info"]
