"""The README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_example_runs(capsys):
    text = (Path(__file__).parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    assert "epsilon=Fraction(1, 1)" in capsys.readouterr().out
