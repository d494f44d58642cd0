"""A process-wide memo of data-independent strategy selections, keyed by the public workload.

Selecting a strategy reads only the workload and the selector's parameters, so the same inputs
always give the same strategy. A benchmark that runs one plan on many datasets (the DPBench
replay) would otherwise select again on every run: HDMM on Prefix(4096) takes about a minute.
The memo is bounded (least recently used entries go first) and can be copied into worker
processes (:func:`snapshot`, :func:`install`).

>>> from ektelo_ng.operators.matrices import Prefix
>>> calls = []
>>> first = remember("demo", Prefix(4), (), lambda: calls.append(1) or "strategy")
>>> again = remember("demo", Prefix(4), (), lambda: calls.append(1) or "strategy")
>>> len(calls)
1
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

from ..matrix import Matrix
from ..specs import to_spec

MAX_ENTRIES = 32

T = TypeVar("T")
_memo: OrderedDict[str, object] = OrderedDict()


def key(selector: str, workload: Matrix, parameters: Hashable) -> str:
    """A digest of the selector's name, the workload's specification and the parameters."""
    digest = hashlib.sha256(selector.encode())
    digest.update(to_spec(workload).model_dump_json().encode())
    digest.update(repr(parameters).encode())
    return digest.hexdigest()


def remember(selector: str, workload: Matrix, parameters: Hashable, select: Callable[[], T]) -> T:
    """``select()``, or the strategy it returned before for the same selector, workload and parameters."""
    k = key(selector, workload, parameters)
    if k in _memo:
        _memo.move_to_end(k)
        return _memo[k]  # type: ignore[return-value]
    value = select()
    _memo[k] = value
    while len(_memo) > MAX_ENTRIES:
        _memo.popitem(last=False)
    return value


def snapshot() -> dict[str, object]:
    """The memo's entries, to hand to :func:`install` in another process."""
    return dict(_memo)


def install(entries: Mapping[str, object]) -> None:
    """Add entries taken by :func:`snapshot` (e.g. in a worker process's initializer)."""
    _memo.update(entries)
