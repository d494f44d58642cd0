"""Strategy advice: which selector to run for a workload, with its predicted error, cost and the evidence.

``advise(domain, workload, budget)`` runs every applicable selector (classic, HDMM's templates,
ResidualPlanner under sum and max loss, QuerySmasher) within a time limit and ranks them at the budget;
``load(path)`` rebuilds a saved pick (docs/advice.md).
"""

from .advise import Advice, Row, advise
from .candidates import Candidate, Cost
from .recipe import load
from .workload import QueryWorkload

__all__ = ["Advice", "Candidate", "Cost", "QueryWorkload", "Row", "advise", "load"]
