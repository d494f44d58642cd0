"""The user guide's Python blocks run, in order, in one namespace, as a reader would paste them."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


def test_every_python_block_of_the_guide_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{GUIDE.name} block {number}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "spent rho = 0.5 of 0.5" in out and "exact (Gaussian)" in out
    assert (tmp_path / "sex_by_region.csv").read_text().startswith("query,answer,variance")
    assert abs(float(out.strip().splitlines()[-1].split()[0]) - 20_000) < 300
