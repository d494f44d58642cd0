"""The Census Bureau's SF1 person tables as workloads (re-exported from operators.census): ``SF1()``, ``SF1Plus()``."""

from ektelo_ng.operators.census import *  # noqa: F401,F403
from ektelo_ng.operators.census import __all__  # noqa: F401
