"""Domains as clients may give them: a kernel ``Domain``, a list of attribute sizes, a mapping of
names to sizes (or to value labels), or one size.

The kernel only ever receives ``Domain`` models; accepting the shorthands is client convenience.

>>> as_domain([2, 3]).names
('a0', 'a1')
>>> as_domain({"age": 100, "sex": 2}).sizes
(100, 2)
>>> shape_sizes(5), shape_sizes([4, 4])
((5,), (4, 4))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Union

from ..kernel.domain import Domain

DomainLike = Union[Domain, Sequence[int], Mapping[str, int]]
Shape = Union[int, DomainLike]


def as_domain(domain: DomainLike) -> Domain:
    """Accept a Domain, a query Schema (its domain), a list of attribute sizes, or a mapping of names to sizes (or
    value labels)."""
    from .queries.schema import Schema

    if isinstance(domain, Domain):
        return domain
    if isinstance(domain, Schema):
        return domain.domain()
    if isinstance(domain, Mapping):
        return Domain.from_dict(dict(domain))
    if isinstance(domain, (str, bytes)) or not isinstance(domain, Iterable):
        raise TypeError(
            f"expected a Domain, a list of attribute sizes or a mapping of names to sizes, got {type(domain).__name__}"
        )
    return Domain.from_sizes(list(domain))


def shape_sizes(shape: Shape) -> tuple[int, ...]:
    """The attribute sizes of a domain, a list of sizes, or a single size (one attribute)."""
    if hasattr(shape, "__index__") and not isinstance(shape, bool):
        return as_domain([int(shape)]).sizes
    return as_domain(shape).sizes
