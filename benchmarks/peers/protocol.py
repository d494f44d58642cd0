"""What every peer script shares with bench_queries.py: its arguments (the table, the queries' JSON, the budget,
the trials) and its reply, one JSON object on stdout. Imported by the peers from their own folder."""

from __future__ import annotations

import argparse
import json


def arguments(description: str) -> tuple[argparse.Namespace, dict]:
    """The parsed arguments and the queries' specification (queries, labels and bounds)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True, help="the table, a Parquet file")
    parser.add_argument("--spec", required=True, help="JSON: queries, labels and bounds (bench_queries.py writes it)")
    parser.add_argument("--epsilon", type=float, required=True, help="the batch's pure-DP budget")
    parser.add_argument("--trials", type=int, default=1, help="independent runs of the whole batch")
    args = parser.parse_args()
    with open(args.spec) as file:
        return args, json.load(file)


def reply(system: str, version: str, seconds: float, trials: list[dict]) -> None:
    """The answers of every trial ({query name: values per group}) and the seconds per trial, as one line."""
    print(json.dumps({"system": system, "version": version, "seconds": seconds, "trials": trials}), flush=True)
