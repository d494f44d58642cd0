"""The README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_example_runs(capsys):
    text = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    assert "epsilon=Fraction(1, 1)" in capsys.readouterr().out


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
