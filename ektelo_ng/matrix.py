"""Implicit matrices (re-exported from the kernel, which computes sensitivities with them), the named client
classes (re-exported from operators.matrices: Prefix, Suffix, WidthRange, Hierarchical, Haar, Marginals) and the
client-side algebra over them (re-exported from operators.algebra: Grams, pseudo-inverses, traces, sums, rows),
and ``to_spec`` (from operators.specs: a matrix as the spec the kernel rebuilds)."""

from ektelo_ng.kernel.matrix import *  # noqa: F401,F403
from ektelo_ng.kernel.matrix import __all__ as _kernel_all
from ektelo_ng.operators.algebra import IntervalGram, Sum, frobenius_squared, gram, pinv, rows, trace  # noqa: F401
from ektelo_ng.operators.matrices import *  # noqa: F401,F403
from ektelo_ng.operators.matrices import __all__ as _client_all
from ektelo_ng.operators.specs import to_spec  # noqa: F401

__all__ = [
    *_kernel_all, *_client_all, "IntervalGram", "Sum", "frobenius_squared", "gram", "pinv", "rows", "to_spec", "trace",
]
