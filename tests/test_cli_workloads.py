"""``ektelo-ng run --workload`` reads marginals against the table's domain (``kway:K``, ``upto:K``, attribute sets) in
the shared grammar, refuses a malformed one naming the option with an example, and prints what the plan derived as a
tree with identical siblings counted, not as one chain. The CLI runs as a user runs it: a subprocess on files."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from ektelo_ng.commands.run_command import lineage_tree

ROOT = Path(__file__).resolve().parents[1]
DOMAIN = {"age": 5, "sex": 2, "zone": 3, "job": 4}
ROWS = 300

SIBLINGS = textwrap.dedent("""
    import numpy as np
    import ektelo_ng as ek


    def plan(source, workload, budget):
        vectors = [source.vectorize() for _ in range(5)]
        vectors[0].reduce_by_partition(np.arange(vectors[0].size) % 2)
        return vectors[1].laplace(ek.matrix.Identity(vectors[1].size), 1).values
""")


@pytest.fixture
def table(tmp_path) -> np.ndarray:
    """A 300-record table over four attributes (120 cells), with its domain file, in ``tmp_path``."""
    rng = np.random.default_rng(0)
    rows = np.column_stack([rng.integers(0, size, ROWS) for size in DOMAIN.values()])
    lines = [",".join(DOMAIN)] + [",".join(map(str, row)) for row in rows]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "d.json").write_text(json.dumps(DOMAIN))
    return rows


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "ektelo_ng.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def run(plan: str, workload: str | None, budget: str, cwd: Path) -> subprocess.CompletedProcess:
    """``ektelo-ng run PLAN`` on the fixture's table, seeded, answers saved to ``o.json``."""
    chosen = ["--workload", workload] if workload else []
    return cli("run", plan, "--table", "t.csv", "--domain", "d.json", "--budget", budget, *chosen, "--seed", "1",
               "--out", "o.json", cwd=cwd)


def true_marginals(rows: np.ndarray, subsets: list[tuple[int, ...]]) -> np.ndarray:
    """The exact counts of each marginal, cells in C order over its attributes in domain order."""
    sizes = list(DOMAIN.values())
    counts = []
    for subset in subsets:
        shape = [sizes[a] for a in subset]
        cells = np.ravel_multi_index(tuple(rows[:, a] for a in subset), shape) if subset else np.zeros(len(rows), int)
        counts.append(np.bincount(cells, minlength=int(np.prod(shape))))
    return np.concatenate(counts)


def kernel_report(output: str) -> list[str]:
    """The lines the parent printed from the kernel's record, after the plan's output."""
    marker = "-- from the kernel, not the plan --"
    assert marker in output, output
    return output.split(marker, 1)[1].splitlines()


PAIRS = list(itertools.combinations(range(4), 2))
UP_TO_PAIRS = [s for k in range(3) for s in itertools.combinations(range(4), k)]


@pytest.mark.parametrize(("plan", "budget", "workload", "subsets"), [
    ("ResidualPlanner", "rho=0.5", "kway:2", PAIRS),
    ("HB", "epsilon=1", "kway:2", PAIRS),
    ("QuerySmasher", "rho=0.5", "upto:2", UP_TO_PAIRS),
    ("ResidualPlanner", "rho=0.5", "age,sex;sex,zone", [(0, 1), (1, 2)]),
    ("HB", "epsilon=1", "0,3", [(0, 3)]),
    ("ResidualPlanner", "rho=0.5", "kway:5x2x3x4:1", [(0,), (1,), (2,), (3,)]),  # the sizes typed out still work
])
@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_marginal_workloads_are_read_against_the_domain(tmp_path, table, plan, budget, workload, subsets):
    done = run(plan, workload, budget, tmp_path)
    assert done.returncode == 0, done.stderr
    truth = true_marginals(table, subsets)
    assert f"{plan}: {truth.size} answers:" in done.stdout
    answers = json.loads((tmp_path / "o.json").read_text())["answers"]
    estimate = np.array([a["answer"] for a in answers])
    std = np.array([a["std"] for a in answers])
    assert estimate.shape == truth.shape and np.all(std > 0)
    assert np.all(np.abs(estimate - truth) <= 6 * std), np.abs(estimate - truth) / std  # the counts, up to noise


@pytest.mark.parametrize(("workload", "wrong"), [
    ("kway:x", "kway:K needs 0 <= K <= 4"),
    ("upto:9", "upto:K needs 0 <= K <= 4"),
    ("age,salary", "unknown attribute 'salary'"),
    ("prefix:x", "cannot read workload 'prefix:x' (expected prefix:N)"),
])
def test_a_malformed_workload_names_the_option_and_shows_an_example(tmp_path, table, workload, wrong):
    done = run("ResidualPlanner", workload, "rho=0.5", tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr and "lambda" not in done.stderr, done.stderr
    assert lines[0].startswith(f"ektelo-ng run: error: --workload '{workload}': ")
    assert wrong in lines[0] and "for example --workload kway:2" in lines[0], lines[0]
    assert "from the kernel" not in done.stdout  # refused before the table was read


def test_kway_without_a_domain_says_what_it_needs(tmp_path):
    done = cli("error", "--workload", "kway:2", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "lambda" not in done.stderr, done.stderr
    assert "expected kway:N1xN2x...:K" in done.stderr and "need the table's domain" in done.stderr


@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_the_lineage_counts_identical_sibling_vectorizations(tmp_path, table):
    done = run("ResidualPlanner", "kway:2", "rho=0.5", tmp_path)
    assert done.returncode == 0, done.stderr
    report = kernel_report(done.stdout)
    start = report.index("lineage: table")
    assert report[start + 1:start + 2] == ["  vectorize(x1) x3"], report  # three host marginals, one line
    assert not any(" -> " in line for line in report)
    lineage = json.loads((tmp_path / "o.json").read_text())["lineage"]
    assert len(lineage["derivations"]) == 3 and lineage["sources"] == 4
    assert lineage["tree"] == [{"depth": 1, "op": "vectorize", "stability": "1", "count": 3}]


@pytest.mark.usefixtures("sandboxed")  # ektelo-ng run runs the plan in its sandbox
def test_the_lineage_is_a_tree_with_children_under_their_parent(tmp_path, table):
    (tmp_path / "siblings.py").write_text(SIBLINGS)
    done = run("siblings.py", None, "epsilon=1", tmp_path)
    assert done.returncode == 0, done.stderr
    report = kernel_report(done.stdout)
    start = report.index("lineage: table")
    assert report[start + 1:start + 4] == ["  vectorize(x1)", "    reduce_by_partition(x1)", "  vectorize(x1) x4"]


def test_a_deep_lineage_is_walked_without_recursion():
    """A plan may derive a chain thousands deep: its report still comes, one line per derivation."""
    graph = nx.DiGraph()
    graph.add_node("root", kind="table")
    nx.add_path(graph, ["root", *range(5000)], op="transform", stability="1")
    tree = lineage_tree(graph)
    assert len(tree) == 5000 and tree[-1]["depth"] == 5000 and {g["count"] for g in tree} == {1}
