"""ektelo-ng: differentially private query answering with plans over a protected kernel.

The front door, and the only import a plan script needs (this example runs in the tests):

>>> import numpy as np
>>> import ektelo_ng as ek
>>> columns = {"age": np.arange(1000) % 37}
>>> session = ek.protect(columns, ek.Domain.from_dict({"age": 100}), ek.PureDP(1))
>>> W = ek.workload.Prefix(100)
>>> estimate = ek.catalog["HB"](session.source, W, ek.PureDP("1/2"))    # a plan of the catalog, or your own:
>>> vector, _ = ek.measure.data_vector(session.source)
>>> x_hat = ek.least_squares([ek.measure.laplace(vector, ek.selection.hb((100,)).matrix, "1/2")], size=100)
>>> estimate.answer(W).shape, x_hat.shape
((100,), (100,))
>>> print(session.budget)
spent epsilon = 1 of 1 (0 left, on 3 sources)

The layers live in the repository's top-level folders (``kernel/``, ``operators/``, ``plans/``, ``gateway/``)
and are imported as ``ektelo_ng.kernel`` and so on, so that a user's own ``operators.py`` or ``plans.py``
never shadows the library; inside them, imports are relative (``kernel/`` imports only itself, and no layer
names the front door). Names are loaded on first use: importing ``ektelo_ng.kernel`` (as the served kernel
does) loads nothing above it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if not (Path(__file__).resolve().parent / "kernel").is_dir() and (_ROOT / "kernel" / "__init__.py").is_file():
    __path__.append(str(_ROOT))  # a source checkout or an editable install: the layers sit beside this folder

#: Public name -> (module, attribute or None for the module itself).
_EXPORTS: dict[str, tuple[str, str | None]] = {
    **{name: (f"ektelo_ng.{name}", None) for name in ("error", "matrix", "workload", "plans")},
    "measure": ("ektelo_ng.operators.measure", None),
    "selection": ("ektelo_ng.operators.selection", None),
    "advise": ("ektelo_ng.operators.advice", "advise"),
    "partition": ("ektelo_ng.operators.partition", None),
    "inference": ("ektelo_ng.operators.inference", None),
    "VectorEstimate": ("ektelo_ng.operators.estimate", "VectorEstimate"),
    "catalog": ("ektelo_ng.plans", "catalog"),
    "least_squares": ("ektelo_ng.operators.inference", "least_squares"),
    "nnls": ("ektelo_ng.operators.inference", "nnls"),
    "connect": ("ektelo_ng.session", "connect"),
    "protect": ("ektelo_ng.session", "protect"),
    **{name: ("ektelo_ng.operators.client", name) for name in (
        "AccessDeniedError", "BudgetExceededError", "Handle", "KernelError", "NoisyAnswer", "Session")},
    "Attribute": ("ektelo_ng.kernel.domain", "Attribute"),
    "Domain": ("ektelo_ng.kernel.domain", "Domain"),
    "attr": ("ektelo_ng.operators.predicates", "attr"),
    "PureDP": ("ektelo_ng.kernel.privacy", "PureDP"),
    "ZCDP": ("ektelo_ng.kernel.privacy", "ZCDP"),
    "ApproxDP": ("ektelo_ng.operators.budget", "ApproxDP"),
    **{name: ("ektelo_ng.operators.queries.schema", name) for name in ("Schema", "Categorical", "Integer", "Numeric")},
    "query": ("ektelo_ng.queries", "query"),
    "answer": ("ektelo_ng.queries", "answer"),
    "sql": ("ektelo_ng.operators.queries.sql", "sql"),
    "Results": ("ektelo_ng.operators.queries.results", "Results"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'ektelo_ng' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    value = value if attribute is None else getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
