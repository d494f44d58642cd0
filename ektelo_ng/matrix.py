"""Implicit matrices (re-exported from the kernel, which computes sensitivities with them) and the
client-side algebra over them (re-exported from operators.algebra: Grams, pseudo-inverses, traces, sums, rows)."""

from kernel.matrix import *  # noqa: F401,F403
from kernel.matrix import __all__ as _kernel_all
from operators.algebra import IntervalGram, Sum, frobenius_squared, gram, pinv, rows, trace  # noqa: F401

__all__ = [*_kernel_all, "IntervalGram", "Sum", "frobenius_squared", "gram", "pinv", "rows", "trace"]
