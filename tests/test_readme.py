"""The README runs as written: its Python example and every command of its shell blocks (``tests.doc_commands``), on the
files its own commands create, at the sizes below."""

from __future__ import annotations

import re
from pathlib import Path

import dataclasses

import pytest

from tests.doc_commands import ROOT, Page, run_page

README = Page(
    ROOT / "README.md",
    substitutions=[
        (r"--rows 10000000", "--rows 2000", "10^7 records take a minute to write: the same command on fewer"),
        (r"/srv/census", "census", "a folder of the test's own, not /srv"),
        (r"kernel\.example\.org", "localhost", "the test's own machine, named alike by the certificate and address"),
        (r":7373\b", ":{port}", "a free port"),
        (r"credential='alice\.json'", "credential='census/credentials/alice.json'",
         "alice's copy of the credential the owner hands her"),
    ],
    not_run={
        "ektelo-ng dpbench": "test_readme_main_job_is_the_quick_replay_on_built_in_data (its grid), test_dpbench*",
        "python3 -m pytest": "the suite itself",
    },
)


NATIONAL = [
    (r"census generate (.*)--out", r"census generate \1--national --out", "a national table, for SF1"),
    (r"census release ", "census release --workload sf1 ",
     "SF1+ (25.5 million cells) takes 40 s: the default run releases its national part, SF1 (500,480 cells), by the "
     "same command; test_census measures SF1+ itself, and the slow run releases it as written"),
]


@pytest.mark.parametrize("census", ["sf1", pytest.param("sf1+", marks=pytest.mark.slow)])
def test_every_block_of_the_readme_runs_as_written(tmp_path, census):
    page = README if census == "sf1+" else dataclasses.replace(README, substitutions=README.substitutions + NATIONAL)
    ran = run_page(page, tmp_path)
    print("\n".join(f"{seconds:7.1f} s  {block}" for block, seconds in ran.seconds))  # shown with -s
    assert "epsilon=Fraction(1, 1)" in ran.out  # the Python example's budget line
    assert ran.commands[0] == "ektelo-ng example-data"
    for last in ("ektelo-ng census release", "ektelo-ng kernel audit"):  # run, or skipped for a missing extra
        assert any(c.startswith(last) for c in ran.commands + ran.skipped), last
    for written in ("advice.json", "marginals.csv", "synthetic.csv"):
        assert (tmp_path / written).stat().st_size > 0, written
    assert (tmp_path / "synthetic.csv").read_text().startswith("age,sex,region\n")
    assert set(ran.skipped) >= {"ektelo-ng dpbench", "python3 -m pytest"}
    if any(c.startswith("python3 -c") for c in ran.commands):  # alice's line: her share, seen from her machine
        assert "spent epsilon = 0 of 1" in ran.out and "alice" in ran.out  # (and kernel audit names her)


def test_readme_main_job_is_the_quick_replay_on_built_in_data():
    """Set-up command 1 runs ``ektelo-ng dpbench`` with no options: the quick grid, no data files."""
    from ektelo_ng.cli import build_parser
    from ektelo_ng.commands.dpbench_command import grid_from
    from ektelo_ng.dpbench import data
    from ektelo_ng.dpbench.grid import QUICK

    text = (Path(__file__).parent.parent / "README.md").read_text()
    first = re.search(r"```bash\n.*?\n(.*?)\n", text, re.S).group(1)
    command = first.split("&&")[-1].split()
    assert command[0] == "ektelo-ng"
    grid = grid_from(build_parser().parse_args(command[1:]))
    assert grid.algorithms == QUICK["algorithms"] and grid.scales == QUICK["scales"]
    assert all(data.dataset(name).builtin for name in grid.datasets)
