"""Implicit matrices (re-exported from the kernel, which computes sensitivities with them)."""

from kernel.matrix import *  # noqa: F401,F403
from kernel.matrix import __all__  # noqa: F401
