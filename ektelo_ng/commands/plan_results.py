"""What ``ektelo-ng run`` prints and saves when a plan returns more than one Estimate: query Results (one labelled
table per query, ``ek.answer``), or several estimates (a list, or a dict by name), e.g. one per stage of a budget
split with ``budget.split([...])``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ektelo_ng.operators.estimate import Estimate
from ektelo_ng.operators.queries.results import Results


def several(returned) -> bool:
    """Whether a plan returned query Results or several estimates (not one Estimate or an array)."""
    if isinstance(returned, Results):
        return True
    values = list(returned.values()) if isinstance(returned, Mapping) else returned
    return isinstance(values, Sequence) and bool(values) and all(isinstance(v, Estimate) for v in values)


def report(args: argparse.Namespace, returned) -> int:
    """Print each query's table (Results) or each estimate's answers; ``--out``: a folder of one CSV per query
    (Results; .parquet files if the folder's name ends in .parquet), or JSON of every estimate."""
    if isinstance(returned, Results):
        for name in returned:
            print(f"{name}:\n{returned[name].drop(columns='accounts_for').to_string(index=False)}")
        print(returned.note)
        if args.out:
            out = Path(args.out)
            written = returned.to_dir(out, "parquet" if out.suffix == ".parquet" else "csv")
            print(f"saved {len(written)} tables in {out}")
        return 0
    named = dict(returned) if isinstance(returned, Mapping) else {f"estimate {k}": e for k, e in enumerate(returned)}
    for name, estimate in named.items():
        records = estimate.records(None, args.level)
        print(f"{name}: {len(records)} answers; {estimate.note}")
    if args.out:
        document = {"plan": str(args.plan), "estimates": {
            name: json.loads(estimate.to_json(None, args.level)) for name, estimate in named.items()}}
        Path(args.out).write_text(json.dumps(document))
    return 0
