"""Workloads named on the command line, e.g. ``prefix:1024``, ``allrange:256``, ``kway:10x10x10:2``; given the
table's domain, also its marginals in the shared grammar (``kway:2``, ``upto:3``, ``age,sex;sex,zone``)."""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pydantic import ValidationError

from ektelo_ng.grammar import MARGINALS_HELP, did_you_mean, parse_domain, parse_marginals
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.operators.matrix import Dense, Matrix
from ektelo_ng.operators.matrices import MarginalStack
from ektelo_ng.operators import workload as wl
from ektelo_ng.operators.selection.hdmm.gram import product_terms
from ektelo_ng.operators.selection.query_smasher.classes import CLASSES, circular_ranges, class_queries


#: Most numbers a workload named here may write down (its explicit rows or dense entries): beyond, building it
#: alone would exhaust the memory of the caller's process, before any time limit applies.
MAX_WRITTEN = 10**8


def _written(count: int, what: str) -> int:
    """``count``, the numbers ``what`` writes down, if that is at most :data:`MAX_WRITTEN`."""
    if count > MAX_WRITTEN:
        raise ValueError(f"{what} writes down {count:,} numbers (at most {MAX_WRITTEN:,}): give fewer values or "
                         "queries kept implicit (identity, range, total)")
    return count


def _sizes(text: str) -> list[int]:
    return [int(s) for s in text.split("x")]


_FORMS: dict[str, tuple[str, Callable[..., Matrix]]] = {
    "prefix": ("prefix:N", lambda n: wl.Prefix(_written(int(n), "prefix"))),
    "allrange": ("allrange:N", lambda n: wl.AllRange(int(n))),
    "identity": ("identity:N", lambda n: wl.Identity(int(n))),
    "width": ("width:N:W", lambda n, w: wl.WidthRange(_written(int(n), "width"), int(w))),
    "randomrange": ("randomrange:N[xM]:COUNT[:SEED]",
                    lambda s, c, seed=0: wl.RandomRange(_sizes(s), _written(int(c), "randomrange"), int(seed))),
    "kway": ("kway:N1xN2x...:K", lambda s, k: wl.AllKway(_sizes(s), int(k))),
}

HELP = "workload: " + ", ".join(form for form, _ in _FORMS.values())
OVER_DOMAIN_HELP = f"marginals of the table's domain: {MARGINALS_HELP}; or a shorthand {HELP}"
"""The forms of a workload given with the table's domain (``ektelo-ng run``, ``advise --domain``)."""

_NEEDS_DOMAIN = "kway:K, upto:K and attribute sets need the table's domain: the --domain of run and advise"


def parse_workload(text: str) -> Matrix:
    """Build a workload from its command-line form; a clear error lists the forms."""
    kind, *args = text.strip().lower().split(":")
    if kind not in _FORMS:
        hint = f" ({_NEEDS_DOMAIN})" if kind == "upto" else ""
        raise ValueError(f"unknown workload {kind!r}{hint or did_you_mean(kind, _FORMS)}; {HELP}")
    form, build = _FORMS[kind]
    try:
        inspect.signature(build).bind(*args)
    except TypeError:  # the wrong number of fields: say which form, not which lambda
        hint = f" ({_NEEDS_DOMAIN})" if kind == "kway" else ""
        raise ValueError(f"cannot read workload {text!r}: expected {form}{hint}") from None
    try:
        return build(*args)
    except (TypeError, ValueError) as error:
        raise ValueError(f"cannot read workload {text!r} (expected {form}): {error}") from None


def parse_workload_option(text: str, domain: Domain | None, option: str = "--workload") -> Matrix:
    """The workload ``option`` names: with the table's ``domain``, marginals in the shared grammar as their
    MarginalStack over the domain's data vector, or a shorthand form (:data:`OVER_DOMAIN_HELP`), which names
    its own cells: a plan may answer it over a vector it derives, such as one attribute's; without a domain, a
    shorthand form only. A refusal names the option and shows a correct example, for the user to copy."""
    try:
        return parse_workload(text) if domain is None else _over(text.strip(), domain)
    except ValueError as error:
        raise ValueError(f"{option} {text!r}: {error}; for example {_examples(domain, option)}") from None


def _over(text: str, domain: Domain) -> Matrix:
    """``text`` over ``domain``: marginals (``kway:K``, ``upto:K``, attribute sets: no second ``:``) or a shorthand."""
    kind, _, rest = text.partition(":")
    if (kind in ("kway", "upto") and ":" not in rest) or ":" not in text:
        return MarginalStack(domain.sizes, parse_marginals(text, domain))
    return parse_workload(text)


def _examples(domain: Domain | None, option: str) -> str:
    """Correct values of ``option``: over ``domain``'s own attributes where there is one."""
    if domain is None:
        return f"{option} prefix:1024 or {option} kway:10x10x10:2"
    k, names = min(2, len(domain)), domain.names
    sets = ",".join(names[:2]) + (f";{names[-1]}" if len(names) > 2 else "")
    return f"{option} kway:{k}, {option} upto:{k} or {option} '{sets}'"


# ---- workload files: queries on marginals, for ``ektelo-ng advise`` ------------------------------

FILE_HELP = (
    "a JSON or YAML file {domain: {name: size, ...}, workload: [item, ...]} whose items are "
    "{marginals: kway:K | upto:K | 'a,b;c'}, {attributes: [a, b], queries: CLASS} (CLASS: marginal, prefix, range, "
    "circular, affine or abs on the whole set), {attributes: [a, b], queries: {a: KIND, b: KIND}} (KIND per attribute: "
    "identity, total, prefix, range, circular, width:W) or {attributes: [a], matrix: [[row], ...]} (rows over the "
    "marginal's cells), each with an optional weight on its variance"
)
_PER_ATTRIBUTE: dict[str, Callable[..., Matrix]] = {
    "identity": wl.Identity, "marginal": wl.Identity, "total": wl.Total, "prefix": wl.Prefix, "range": wl.AllRange,
    "circular": circular_ranges, "width": lambda n, w: wl.WidthRange(n, int(w)),
}


def read_workload_file(path: Path) -> tuple[Domain, list, list[float]]:
    """A workload file (:data:`FILE_HELP`) as a domain, ``[(attributes, matrix)]`` items and their weights."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read the workload file {path}: {error}") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ImportError(f"{path} is YAML: install PyYAML (pip install -e \".[yaml]\") or write JSON") from None
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as error:
            reason = " ".join(str(error).split())
            raise ValueError(f"{path} is not YAML ({reason}); a workload file is {FILE_HELP}") from None
    else:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON ({error}); a workload file is {FILE_HELP}") from None
    if not isinstance(spec, dict) or not {"domain", "workload"} <= set(spec) or not isinstance(spec["workload"], list):
        raise ValueError(f"{path}: a workload file is {FILE_HELP}")
    domain = _domain(spec["domain"], path)
    items, weights = [], []
    for number, entry in enumerate(spec["workload"], 1):
        try:
            found = _items(entry, domain)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}: workload item {number} ({entry!r}): {error}") from None
        try:
            weight = float(entry.get("weight", 1.0))
        except (TypeError, ValueError):
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"{path}: workload item {number}: weight must be positive, got {entry.get('weight')!r}")
        items += found
        weights += [weight] * len(found)
    if not items:
        raise ValueError(f"{path}: the workload has no items; a workload file is {FILE_HELP}")
    return domain, items, weights


def _domain(value, path: Path) -> Domain:
    """The file's domain: ``{name: size or [labels]}``, or text in the shared grammar (``age=100,sex=2``)."""
    if not isinstance(value, dict):
        return parse_domain(str(value))
    for name, size in value.items():
        if not isinstance(size, (int, list)) or isinstance(size, bool):
            raise ValueError(f"{path}: the size of {name!r} must be a whole number or a list of labels, got {size!r}")
    try:
        return Domain.from_dict(value)
    except ValidationError as error:
        raise ValueError(f"{path}: the domain: {error.errors()[0]['msg']}") from None
    except ValueError as error:
        raise ValueError(f"{path}: the domain: {error}") from None


def _items(entry: dict, domain: Domain) -> list:
    if not (isinstance(entry, dict) and ("marginals" in entry or {"queries", "matrix"} & set(entry))):
        raise TypeError("each item is an object: {marginals: ...}, {attributes: ..., queries: ...} or "
                        "{attributes: ..., matrix: ...}")
    if "marginals" in entry:
        return [(subset, wl.Identity(math.prod(domain.sizes[a] for a in subset) if subset else 1))
                for subset in parse_marginals(str(entry["marginals"]), domain)]
    attributes = entry["attributes"]
    attributes = [attributes] if isinstance(attributes, (str, int)) else list(attributes)
    sizes = [domain.sizes[i] for i in domain.indices(attributes)]
    if "matrix" in entry:
        rows = np.array(entry["matrix"], dtype=np.float64, ndmin=2)
        if rows.ndim != 2 or rows.shape[1] != math.prod(sizes):
            raise ValueError(f"the matrix's rows need {math.prod(sizes)} columns, one per cell of the marginal on "
                             f"{attributes}; got shape {rows.shape}")
        return [(attributes, Dense(rows))]
    queries = entry["queries"]
    if isinstance(queries, str):
        if queries not in CLASSES or queries == "random":
            raise ValueError(f"unknown query class {queries!r}; use one of {', '.join(c for c in CLASSES if c != 'random')}")
        _written(_class_numbers(queries, sizes), f"the {queries} class on {attributes}")
        return [(attributes, class_queries(queries, tuple(sizes)))]
    unknown = set(queries) - set(attributes)
    if unknown:
        raise ValueError(f"queries name {sorted(unknown)}, which are not among the item's attributes {attributes}")
    blocks = []
    for name, n in zip(attributes, sizes):
        kind, *args = str(queries.get(name, "identity")).split(":")
        if kind not in _PER_ATTRIBUTE:
            raise ValueError(f"unknown query kind {kind!r} for {name}; use one of {', '.join(_PER_ATTRIBUTE)}")
        if len(args) != (kind == "width"):
            raise ValueError("width takes one argument, width:W" if kind == "width" else f"{kind} takes no argument")
        _written(_class_numbers(kind, [n]), f"{kind} on {name}")
        blocks.append(_PER_ATTRIBUTE[kind](n, *args))
    return [(attributes, blocks[0] if len(blocks) == 1 else wl.Kronecker(blocks))]


def _class_numbers(kind: str, sizes: list[int]) -> int:
    """The numbers queries of ``kind`` on attributes of ``sizes`` write down: explicit intervals (prefix, width),
    dense rows (circular ranges: n^2 of n; QuerySmasher's affine and abs classes on two attributes); none for
    the implicit ones (identity, range, total)."""
    if kind in ("affine", "abs") and len(sizes) == 2:
        n1, n2 = sizes
        return (n1 + n2 - 1 if kind == "affine" else max(n1, n2)) * n1 * n2
    per_attribute = {"prefix": 1, "width": 1, "affine": 1, "abs": 1, "circular": 3}.get(kind, 0)
    return sum(n**per_attribute for n in sizes) if per_attribute else 0


def domain_of(W: Matrix) -> Domain:
    """The attribute sizes a shorthand workload's matrix is laid out over (one attribute for a 1-D workload)."""
    terms = product_terms(W)
    return Domain.from_sizes([f.shape[1] for f in terms[0][1]])
