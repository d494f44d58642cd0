"""ektelo-ng: differentially private query answering with plans over a protected kernel.

The front door. Typical use::

    import ektelo_ng as ek
    W = ek.workload.Prefix(1024)
    ek.error.rmse(W, ek.matrix.Identity(1024))
"""

from ektelo_ng import error, matrix, workload
from ektelo_ng.session import connect, protect
from operators.client import AccessDeniedError, BudgetExceededError, Handle, KernelError, NoisyAnswer, Session
from kernel.domain import Attribute, Domain
from operators.predicates import attr
from kernel.privacy import PureDP, ZCDP

__all__ = [
    "AccessDeniedError", "Attribute", "BudgetExceededError", "Domain", "Handle", "KernelError", "NoisyAnswer",
    "PureDP", "Session", "ZCDP", "attr", "connect", "error", "matrix", "protect", "workload",
]
