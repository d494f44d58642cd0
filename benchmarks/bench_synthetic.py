"""Synthetic records from MST and AIM (plans/mst.py, plans/aim.py), side by side with mbi's MST and AIM run on the same
machine in the same run.

For each table, epsilon and seed: the mean L1 distance between the real and the synthetic records' normalized
marginals over every 2-way and every 3-way marginal, and the time, for ours and (with ``--peer``) for the peer,
whose command line must print one JSON object with ``seconds``, ``l1_2way`` and ``l1_3way``; the ratios are
ours / theirs. Tables are read from ``--data-dir`` as ``NAME.csv`` (integer codes, a header) and
``NAME-domain.json`` (``{attribute: size}``), as mbi's repository and the AIM authors' collection ship them.

    python benchmarks/bench_synthetic.py --data-dir DIR --tables adult titanic --epsilons 0.3 1 3 --seeds 5 \\
        [--mechanisms MST AIM] [--peer "PYTHON run_mbi.py"]
    python benchmarks/bench_synthetic.py --plot RESULTS.jsonl FIGURE.png   # error against epsilon, per table
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import shlex
import subprocess
import time
from pathlib import Path

import numpy as np

import ektelo_ng as ek
from ektelo_ng.plans import catalog, info

DELTA = 1e-9


def load(directory: Path, name: str) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    sizes = json.loads((directory / f"{name}-domain.json").read_text())
    with open(directory / f"{name}.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {a: np.array([int(float(r[a])) for r in rows]) for a in sizes}, sizes


def marginal_errors(real: dict, synthetic: dict, sizes: dict[str, int]) -> dict[str, float]:
    """Mean L1 distance of normalized marginals over every 2-way and every 3-way attribute set."""
    out = {}
    names = list(sizes)
    shape = [sizes[a] for a in names]
    real_codes = np.ravel_multi_index([real[a] for a in names], shape)
    fake_codes = np.ravel_multi_index([np.asarray(synthetic[a]) for a in names], shape)
    for k in (2, 3):
        errors = []
        for subset in itertools.combinations(range(len(names)), k):
            sub_shape = [shape[i] for i in subset]

            def counts(codes):
                cells = np.unravel_index(codes, shape)
                flat = np.ravel_multi_index([cells[i] for i in subset], sub_shape)
                return np.bincount(flat, minlength=int(np.prod(sub_shape))) / max(codes.size, 1)

            errors.append(np.abs(counts(real_codes) - counts(fake_codes)).sum())
        out[f"l1_{k}way"] = float(np.mean(errors))
    return out


def ours(mechanism: str, columns, sizes, epsilon: float, seed: int) -> dict:
    session = ek.protect(columns, sizes, ek.ApproxDP(epsilon, DELTA), seed=seed)
    start = time.perf_counter()
    model = catalog[mechanism](session.source, None, ek.ApproxDP(epsilon, DELTA), **info[mechanism].defaults)
    records = model.synthetic(seed=seed)
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 2), **marginal_errors(columns, records, sizes),
            "converged": bool(getattr(getattr(model, "inner", model), "converged", True))}


def peer(command: str, table: str, mechanism: str, epsilon: float, seed: int) -> dict:
    args = shlex.split(command) + ["--data", table, "--mechanism", mechanism.lower(), "--epsilon", str(epsilon),
                                   "--delta", str(DELTA), "--seed", str(seed)]
    reply = subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    found = json.loads(reply)
    return {key: found[key] for key in ("seconds", "l1_2way", "l1_3way")}


def plot(results: Path, figure: Path) -> None:
    """Mean 2-way and 3-way L1 error against epsilon, one panel per table, a line per mechanism (and peer)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    series: dict = {}
    for row in rows:
        mechanism, table, epsilon, _ = row["name"].split()
        epsilon = float(epsilon.split("=")[1])
        peers = [("mbi", row["peer"])] if isinstance(row.get("peer"), dict) else []  # a --peer run's own figures
        for label, found in [(mechanism if mechanism.startswith("mbi") else f"{mechanism} (ektelo-ng)", row)] + [
                (f"{mechanism} ({who})", theirs) for who, theirs in peers]:
            for k in ("l1_2way", "l1_3way"):
                series.setdefault(table, {}).setdefault((label, k), {}).setdefault(epsilon, []).append(found[k])
    figure_, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 4), squeeze=False)
    for axis, (table, lines) in zip(axes[0], sorted(series.items())):
        for (label, k), points in sorted(lines.items()):
            xs = sorted(points)
            axis.plot(xs, [np.mean(points[x]) for x in xs], marker="o", linestyle="-" if k == "l1_2way" else "--",
                      label=f"{label}, {k[3]}-way")
        axis.set(xscale="log", xlabel="epsilon (delta = 1e-9)", ylabel="mean L1 error of the records' marginals",
                 title=table)
        ticks = sorted({x for points in lines.values() for x in points})
        axis.set_xticks(ticks, [f"{x:g}" for x in ticks], minor=False)
        axis.minorticks_off()
        axis.legend(fontsize=7)
    figure_.tight_layout()
    figure_.savefig(figure, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot", nargs=2, type=Path, metavar=("RESULTS", "FIGURE"),
                        help="draw RESULTS.jsonl (this script's output) as FIGURE.png and stop")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--tables", nargs="+", default=["adult"])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.3, 1.0, 3.0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--mechanisms", nargs="+", default=["MST", "AIM"], choices=["MST", "AIM"])
    parser.add_argument("--peer", help="the peer's command line (it gets --data, --mechanism, --epsilon, --delta, "
                                       "--seed) printing one JSON object")
    args = parser.parse_args()
    if args.plot:
        plot(*args.plot)
        return
    if args.data_dir is None:
        parser.error("--data-dir is needed (a directory of NAME.csv and NAME-domain.json)")
    for table in args.tables:
        columns, sizes = load(args.data_dir, table)
        for mechanism, epsilon, seed in itertools.product(args.mechanisms, args.epsilons, range(args.seeds)):
            row = {"name": f"{mechanism} {table} eps={epsilon:g} seed={seed}",
                   **ours(mechanism, columns, sizes, epsilon, seed)}
            if args.peer:
                theirs = peer(args.peer, table, mechanism, epsilon, seed)
                row["peer"] = theirs
                row["ratios"] = {key: round(row[key] / theirs[key], 3) for key in ("seconds", "l1_2way", "l1_3way")}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
