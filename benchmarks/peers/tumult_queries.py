"""Tumult Analytics' answers to a batch of group-by queries, as a Tumult user writes them: one Session over the
table (add-or-remove-one-row neighbours, pure DP), the budget split evenly over the queries, each query answered
with its own noise (``count``, ``sum``, ``average``, ``quantile`` over a KeySet of the schema's public labels; a
query of several quantiles is one evaluation per probability, its share split evenly).

Runs in a scratch venv with Tumult Analytics (``pip install tmlt.analytics``: pyspark, which needs Java), never in
the project's: bench_queries.py starts it as a subprocess and reads one JSON object from its stdout.

    python tumult_queries.py --data adult.parquet --spec spec.json --epsilon 1 --trials 1
"""

from __future__ import annotations

import itertools
import os
import sys
import time
import warnings
from importlib.metadata import version

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers need this venv's Python (tmlt in it)
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from protocol import arguments, reply  # noqa: E402
from tmlt.analytics import AddOneRow, KeySet, PureDPBudget, QueryBuilder, Session  # noqa: E402


def evaluations(query: dict, spec: dict) -> list[tuple[QueryBuilder, str]]:
    """The Tumult queries of one query (several for several quantiles), each with the column it outputs."""
    grouped = QueryBuilder("adult")
    if query["groupby"]:
        grouped = grouped.groupby(KeySet.from_dict({c: spec["labels"][c] for c in query["groupby"]}))
    if query["aggregate"] == "count":
        return [(grouped.count(), "count")]
    column = query["column"]
    low, high = spec["bounds"][column]
    if query["aggregate"] == "sum":
        return [(grouped.sum(column, low, high, name="value"), "value")]
    if query["aggregate"] == "mean":
        return [(grouped.average(column, low, high, name="value"), "value")]
    return [(grouped.quantile(column, p, low, high, name="value"), "value") for p in query["probabilities"]]


def answers(session: Session, query: dict, spec: dict, epsilon: float) -> list:
    """One query's released values in the order of the groups' labels' product (a list per group for quantiles)."""
    keys = list(itertools.product(*[spec["labels"][c] for c in query["groupby"]]))
    parts = evaluations(query, spec)
    columns = []
    for built, output in parts:
        frame = session.evaluate(built, PureDPBudget(epsilon / len(parts))).toPandas()
        found = {tuple(row[c] for c in query["groupby"]): float(row[output]) for _, row in frame.iterrows()}
        columns.append([found[k] for k in keys])
    return [list(values) for values in zip(*columns)] if query["aggregate"] == "quantile" else columns[0]


def main() -> None:
    args, spec = arguments(__doc__.splitlines()[0])
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    dataframe = spark.createDataFrame(pd.read_parquet(args.data)).cache()
    start, trials = time.perf_counter(), []
    share = args.epsilon / len(spec["queries"])
    for _ in range(args.trials):
        session = Session.from_dataframe(privacy_budget=PureDPBudget(args.epsilon), source_id="adult",
                                         dataframe=dataframe, protected_change=AddOneRow())
        trials.append({q["name"]: answers(session, q, spec, share) for q in spec["queries"]})
    reply("tumult", version("tmlt.analytics"), (time.perf_counter() - start) / args.trials, trials)


if __name__ == "__main__":
    main()
