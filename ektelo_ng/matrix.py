"""Implicit matrices (re-exported from operators.matrix), the named classes (from operators.matrices: Prefix, Suffix,
WidthRange, Hierarchical, Haar, MarginalStack), the algebra over them (from operators.algebra: Grams, pseudo-inverses,
traces, sums, rows), ``to_spec`` (operators.specs: a matrix as data) and ``normal_form`` (operators.normal_form: a
matrix in the kernel's sealed language, as a measurement sends it)."""

from ektelo_ng.operators.matrix import *  # noqa: F401,F403
from ektelo_ng.operators.matrix import __all__ as _general_all
from ektelo_ng.operators.algebra import IntervalGram, Sum, frobenius_squared, gram, pinv, rows, trace  # noqa: F401
from ektelo_ng.operators.matrices import *  # noqa: F401,F403
from ektelo_ng.operators.matrices import __all__ as _named_all
from ektelo_ng.operators.normal_form import normal_form  # noqa: F401
from ektelo_ng.operators.specs import to_spec  # noqa: F401

__all__ = [
    *_general_all, *_named_all, "IntervalGram", "Sum", "frobenius_squared", "gram", "normal_form", "pinv", "rows",
    "to_spec", "trace",
]
