"""OpenDP's answers to a batch of group-by queries, as an OpenDP user writes them: one Context over the table, the
budget split evenly over the queries, each query answered with its own noise (``dp.len``, ``.dp.sum``,
``.dp.mean``, ``.dp.quantile``, released over the schema's public keys).

Runs in a scratch venv with OpenDP (``pip install opendp polars==1.36.1 pyarrow``: OpenDP checks polars' version),
never in the project's: bench_queries.py starts it as a subprocess and reads one JSON object from its stdout.

    python opendp_queries.py --data adult.parquet --spec spec.json --epsilon 1 --trials 5
"""

from __future__ import annotations

import itertools
import time
import warnings
from importlib.metadata import version

import opendp.prelude as dp
import polars as pl
from protocol import arguments, reply

dp.enable_features("contrib")
warnings.filterwarnings("ignore", category=FutureWarning)  # dp.len's signed default, announced for a later release


def expression(query: dict, bounds: dict):
    """The OpenDP expression of one query: a count, a bounded sum or mean, or the quantiles of a column."""
    if query["aggregate"] == "count":
        return [dp.len()]
    column = query["column"]
    low, high = bounds[column]
    values = pl.col(column).fill_null(low)
    if query["aggregate"] == "sum":
        return [values.dp.sum(bounds=(low, high))]
    if query["aggregate"] == "mean":
        return [values.dp.mean(bounds=(low, high))]
    candidates = list(range(int(low), int(high) + 1))
    return [values.dp.quantile(p, candidates=candidates).alias(f"q{i}") for i, p in enumerate(query["probabilities"])]


def answers(context, query: dict, spec: dict) -> list:
    """The query's released values, one per group in the order of the groups' labels' product (a list of
    quantiles per group for a quantile query)."""
    labels = [spec["labels"][c] for c in query["groupby"]]
    keys = list(itertools.product(*labels))
    exprs = expression(query, spec["bounds"])
    names = [e.meta.output_name() for e in exprs]
    plan = context.query()
    if query["groupby"]:
        frame = plan.group_by(*query["groupby"]).agg(*exprs).with_keys(
            pl.DataFrame(keys, schema=query["groupby"], orient="row")).release().collect()
        found = {tuple(row[:len(query["groupby"])]): row[len(query["groupby"]):] for row in frame.iter_rows()}
    else:
        frame = plan.select(*exprs).release().collect()
        found = {(): frame.row(0)}
    rows = [found[k] for k in keys]
    return [list(map(float, r)) if len(names) > 1 or query["aggregate"] == "quantile" else float(r[0]) for r in rows]


def main() -> None:
    args, spec = arguments(__doc__.splitlines()[0])
    data = pl.scan_parquet(args.data)
    rows = data.select(pl.len()).collect().item()
    start, trials = time.perf_counter(), []
    for _ in range(args.trials):
        context = dp.Context.compositor(
            data=data, privacy_unit=dp.unit_of(contributions=1), privacy_loss=dp.loss_of(epsilon=args.epsilon),
            split_evenly_over=len(spec["queries"]), margins=[dp.polars.Margin(max_length=rows)])
        trials.append({q["name"]: answers(context, q, spec) for q in spec["queries"]})
    reply("opendp", version("opendp"), (time.perf_counter() - start) / args.trials, trials)


if __name__ == "__main__":
    main()
