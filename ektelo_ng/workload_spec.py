"""Workloads named on the command line, e.g. ``prefix:1024``, ``allrange:256``, ``kway:10x10x10:2``."""

from __future__ import annotations

from collections.abc import Callable

from ektelo_ng.kernel.matrix import Matrix
from ektelo_ng.operators import workload as wl


def _sizes(text: str) -> list[int]:
    return [int(s) for s in text.split("x")]


_FORMS: dict[str, tuple[str, Callable[..., Matrix]]] = {
    "prefix": ("prefix:N", lambda n: wl.Prefix(int(n))),
    "allrange": ("allrange:N", lambda n: wl.AllRange(int(n))),
    "identity": ("identity:N", lambda n: wl.Identity(int(n))),
    "width": ("width:N:W", lambda n, w: wl.WidthRange(int(n), int(w))),
    "randomrange": ("randomrange:N[xM]:COUNT[:SEED]", lambda s, c, seed=0: wl.RandomRange(_sizes(s), int(c), int(seed))),
    "kway": ("kway:N1xN2x...:K", lambda s, k: wl.AllKway(_sizes(s), int(k))),
}

HELP = "workload: " + ", ".join(form for form, _ in _FORMS.values())


def parse_workload(text: str) -> Matrix:
    """Build a workload from its command-line form; a clear error lists the forms."""
    kind, *args = text.strip().lower().split(":")
    if kind not in _FORMS:
        raise ValueError(f"unknown workload {kind!r}; {HELP}")
    form, build = _FORMS[kind]
    try:
        return build(*args)
    except (TypeError, ValueError) as error:
        raise ValueError(f"cannot read workload {text!r} (expected {form}): {error}") from None
