"""One command-line grammar for budgets, domains and marginals, shared by every ``ektelo-ng`` command."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

from pydantic import ValidationError

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.privacy import PureDP, ZCDP
from ektelo_ng.operators.budget import ApproxDP, Budget

BUDGET_HELP = ("epsilon=E (pure DP, Laplace noise), rho=R (zCDP, Gaussian noise), epsilon=E,delta=D (spent as the "
               "largest rho whose zCDP is (E, D)-DP), or pcost=P (ResidualPlanner's unit: rho = P / 2); eps is short "
               "for epsilon")
DOMAIN_HELP = ('a JSON file {"name": size or [labels], ...} (or a query schema\'s, with {"integer": [low, high]}, '
               '{"numeric": [low, high], "bins": k} or {"categorical": [labels], "other": label} columns), names and '
               "sizes such as age=100,sex=2, or bare sizes such as 10x10x2 (attributes a0, a1, ...)")
MARGINALS_HELP = ("kway:K (every marginal of exactly K attributes), upto:K (every marginal of at most K), or "
                  "attribute sets by name or position separated by ';', such as age,sex;sex,zone")


def parse_budget(text: str) -> Budget:
    """A budget in the shared grammar (:data:`BUDGET_HELP`)."""
    fields: dict[str, str] = {}
    for part in text.replace(" ", "").split(","):
        name, sep, value = part.partition("=")
        name = "epsilon" if name == "eps" else name
        if not sep or name not in ("epsilon", "delta", "rho", "pcost") or name in fields:
            raise ValueError(f"cannot read the budget {text!r}: give {BUDGET_HELP}")
        fields[name] = value
    try:
        match sorted(fields):
            case ["epsilon"]:
                return PureDP(fields["epsilon"])
            case ["rho"]:
                return ZCDP(fields["rho"])
            case ["pcost"]:
                return ZCDP(Fraction(fields["pcost"]) / 2)
            case ["delta", "epsilon"]:
                budget = ApproxDP(float(fields["epsilon"]), float(fields["delta"]))
                budget.zcdp()  # an (epsilon, delta) leaving too small a rho is refused here, by name
                return budget
    except (ValueError, ZeroDivisionError) as error:
        raise ValueError(f"cannot read the budget {text!r}: {error} (give {BUDGET_HELP})") from None
    raise ValueError(f"cannot read the budget {text!r}: give {BUDGET_HELP}")


def show_budget(budget: Budget) -> str:
    """A budget as people read it: epsilon = 1, rho = 0.5, or (epsilon, delta) = (1, 1e-06) with its rho."""
    if isinstance(budget, ApproxDP):
        return f"{budget} (rho = {float(budget.zcdp().rho):.6g})"
    return f"epsilon = {float(budget.epsilon):.6g}" if isinstance(budget, PureDP) else f"rho = {float(budget.rho):.6g}"


def parse_domain(text: str | Path) -> Domain:
    """A domain in the shared grammar (:data:`DOMAIN_HELP`)."""
    text = str(text).strip()
    if text.endswith(".json") or Path(text).is_file():
        path = Path(text)
        if not path.exists():
            raise FileNotFoundError(f"domain file {path} does not exist ({DOMAIN_HELP})")
        try:
            spec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read the domain file {path}: {error}") from None
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: the domain must be a JSON object of attribute sizes or label lists")
        if "attributes" in spec:
            return Domain.model_validate(spec)
        if any(isinstance(value, dict) for value in spec.values()):  # a query schema: labels, bounds and bins
            from ektelo_ng.operators.queries.schema import Schema

            return Schema.from_dict(spec).domain()
        return Domain.from_dict(spec)
    try:
        if "=" in text:
            pairs = [(name.strip(), int(size)) for name, size in (item.split("=", 1) for item in text.split(","))]
            names = [name for name, _ in pairs]
            if len(set(names)) != len(names) or not all(names):
                raise ValueError("every attribute needs its own non-empty name")
            return Domain.from_dict(dict(pairs))
        return Domain.from_sizes([int(size) for size in text.lower().split("x")])
    except (ValueError, ValidationError) as error:
        detail = error.errors()[0]["msg"] if isinstance(error, ValidationError) else error
        raise ValueError(f"cannot read the domain {text!r} ({detail}); give {DOMAIN_HELP}") from None


def parse_marginals(text: str, domain: Domain) -> list[tuple[int, ...]]:
    """Marginals in the shared grammar (:data:`MARGINALS_HELP`), as sorted attribute positions."""
    kind, _, k = text.strip().partition(":")
    if kind in ("kway", "upto"):
        if not (k.isdigit() and int(k) <= len(domain)):
            raise ValueError(f"{kind}:K needs 0 <= K <= {len(domain)} (the domain's attributes), got {text!r}")
        sizes = range(int(k) + 1) if kind == "upto" else [int(k)]
        return [s for j in sizes for s in itertools.combinations(range(len(domain)), j)]
    sets = []
    for group in text.split(";"):
        names = [a.strip() for a in group.split(",") if a.strip()]
        if not names:
            raise ValueError(f"an empty marginal in {text!r}: give {MARGINALS_HELP} (kway:0 is the total)")
        try:
            sets.append(tuple(sorted(domain.indices([int(a) if a.isdigit() else a for a in names]))))
        except (KeyError, ValueError) as error:
            raise ValueError(f"cannot read the marginal {group!r}: {error.args[0]}; give {MARGINALS_HELP} "
                             f"(attributes: {', '.join(domain.names)})") from None
    return sets
