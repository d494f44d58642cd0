"""The advisor's measured evidence: DPBench replay results condensed to the table the advice ships
(operators/advice/dpbench_evidence.json, written by benchmarks/build_evidence.py; read by
operators.advice.evidence).

Data-independent strategies have exact error formulas; data-dependent plans (DAWA, AHP, MWEM, ...) do not,
so the advisor quotes what the replay measured. For every setting (dimensions, domain, workload, epsilon,
scale, dataset) and algorithm the table keeps the algorithm's L2 error relative to Identity's and the number
of trials it rests on. The ratio is the geometric mean over trials of the per-trial ratio: in a trial every
algorithm answers the same data sample (the replay's data seed depends on the setting and trial only), so the
pairing removes the sample's own difficulty; and a geometric mean, unlike an arithmetic one, is not pulled
by one wild trial (DPCube at large scales) and reads the same whichever plan is the numerator. Over the trials
both succeeded it equals the ratio of the two geometric means. (The replay's own summary divides mean errors
instead, so its ratios differ somewhat from these.)

Each dataset also gets a public shape descriptor at each domain it was run on, computed from its DPBench file
coarsened to that domain (not from a sample): ``share90``, the smallest share of cells holding 90% of the
mass (0.9 for uniform data, 1 / cells for a single spike). A dataset is ``skewed`` when share90 is below
SKEWED_BELOW = 0.25, else ``smooth``: the nine DPBench files replayed, at 256 and 4,096 cells (1-D) and
128 x 128 (2-D), fall either under 0.1 or above 0.4 (HEPTH), so the line sits in the gap. The header names
each replay's results folder, when it finished (the file's modification date), the code commit it ran on
and the command.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

import numpy as np

from ektelo_ng.dpbench import data
from ektelo_ng.dpbench.grid import parse_domain
from ektelo_ng.dpbench.report import BASELINE
from ektelo_ng.dpbench.runner import RESULTS, Row, read_results
from ektelo_ng.plans import info

METRIC = "L2"
SKEWED_BELOW = 0.25
#: One setting of a replay and the algorithm run in it: (dims, domain, workload, epsilon, scale, dataset, algorithm).
Key = tuple[int, str, str, str, int, str, str]


def ratios(rows: Iterable[Row], metric: str = METRIC) -> dict[Key, tuple[float, int]]:
    """(geometric mean over trials of error / Identity's error in the same trial, trials) per setting and algorithm.

    Failed runs and trials without a successful Identity run are left out; a setting without Identity gives none.
    """
    errors: dict[tuple, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row.get("error") or row.get(metric, "") == "":
            continue
        sides = parse_domain(row["domain"])
        dims = 1 if isinstance(sides, int) else len(sides)
        setting = (dims, row["domain"], row["workload"], row["epsilon"], int(row["scale"]), row["dataset"])
        errors[(*setting, row["trial"])][row["algorithm"]] = float(row[metric])
    logs: dict[Key, list[float]] = defaultdict(list)
    for (*setting, _trial), by_algorithm in errors.items():
        baseline = by_algorithm.get(BASELINE, 0.0)
        for algorithm, error in by_algorithm.items():
            if baseline > 0 and error > 0:
                logs[(*setting, algorithm)].append(math.log(error / baseline))
    return {key: (math.exp(sum(values) / len(values)), len(values)) for key, values in logs.items()}


def share90(counts: np.ndarray) -> float:
    """The smallest share of cells that holds 90% of the mass."""
    mass = np.sort(np.asarray(counts, dtype=np.float64).ravel())[::-1]
    cells = int(np.searchsorted(np.cumsum(mass), 0.9 * mass.sum())) + 1
    return cells / mass.size


def shapes(keys: Iterable[Key], data_dir: str | None) -> dict[str, dict[str, list]]:
    """dataset -> domain -> [share90, label] for every dataset and domain the replays ran."""
    out: dict[str, dict[str, list]] = defaultdict(dict)
    for dataset, domain in sorted({(key[5], key[1]) for key in keys}):
        value = share90(data.coarsen(data.load_shape(dataset, data_dir), parse_domain(domain)))
        out[dataset][domain] = [round(value, 5), "skewed" if value < SKEWED_BELOW else "smooth"]
    return dict(out)


def build(replays: Sequence[tuple[str, str, str]], data_dir: str | None) -> dict:
    """The evidence table from replays given as (output folder or its results.csv, code commit, command)."""
    rows, sources = [], []
    for path, commit, command in replays:
        folder = Path(path).parent if Path(path).name == RESULTS else Path(path)
        if not (folder / RESULTS).is_file():
            raise FileNotFoundError(f"no replay results at {folder / RESULTS}")
        found = read_results(folder)
        finished = datetime.fromtimestamp((folder / RESULTS).stat().st_mtime, timezone.utc).strftime("%Y-%m-%d")
        sources.append({"results": folder.name, "runs": len(found), "finished": finished, "commit": commit,
                        "command": command})
        rows.extend(found)
    table = ratios(rows)
    workloads: dict[int, set[str]] = defaultdict(set)
    for key in table:
        workloads[key[0]].add(key[2])
    mixed = {dims: sorted(names) for dims, names in workloads.items() if len(names) > 1}
    if mixed:
        raise ValueError(f"one workload per dimensionality, so that the advice compares like with like; got {mixed}")
    settings: dict[tuple, dict[str, list]] = defaultdict(dict)
    for (*setting, algorithm), (ratio, trials) in sorted(table.items()):
        settings[tuple(setting)][algorithm] = [float(f"{ratio:.4g}"), trials]
    return {
        "about": "DPBench replay: each algorithm's L2 error relative to Identity's (geometric mean over trials of "
                 "the per-trial ratio) per setting; built by benchmarks/build_evidence.py",
        "replays": sources,
        "shape": {"descriptor": "share90: the smallest share of cells holding 90% of the mass (DPBench file "
                                "coarsened to the domain)", "skewed_below": SKEWED_BELOW},
        "data_dependent": {name: info[name].data_dependent for name in sorted({key[-1] for key in table})},
        "datasets": shapes(table, data_dir),
        "settings": [
            {"dims": dims, "domain": list(np.atleast_1d(parse_domain(domain)).tolist()), "workload": workload,
             "epsilon": epsilon, "scale": scale, "n_eps": float(scale * Fraction(epsilon)), "dataset": dataset,
             "ratios": by_algorithm}
            for (dims, domain, workload, epsilon, scale, dataset), by_algorithm in settings.items()
        ],
    }


def dumps(table: dict) -> str:
    """The table as JSON with one setting a line: small, and a rebuild's diff shows what moved."""
    head = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in table.items() if k != "settings")
    settings = ",\n".join(f"  {json.dumps(s)}" for s in table["settings"])
    return "{\n" + head + ',\n "settings": [\n' + settings + "\n ]\n}\n"
