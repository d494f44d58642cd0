"""Workload builders (re-exported from operators.workload)."""

from ektelo_ng.operators.workload import *  # noqa: F401,F403
from ektelo_ng.operators.workload import __all__  # noqa: F401
