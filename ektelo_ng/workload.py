"""Workload builders (re-exported from operators.workload)."""

from operators.workload import *  # noqa: F401,F403
from operators.workload import __all__  # noqa: F401
