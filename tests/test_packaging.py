"""The library takes no top-level name from its user: a user's own operators.py, plans.py, kernel.py or gateway.py
beside a plan script neither breaks ``import ektelo_ng`` nor is shadowed by it, and ``ektelo_ng`` is the only
import a plan script needs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("kernel", "operators", "plans", "gateway")


def test_a_users_modules_named_like_the_layers_break_nothing(tmp_path):
    for name in LAYERS:
        (tmp_path / f"{name}.py").write_text(f'WHO = "the user\'s {name}"\n')
    (tmp_path / "plan.py").write_text(textwrap.dedent("""
        import numpy as np
        import ektelo_ng as ek
        import operators, plans, kernel, gateway

        ages = np.random.default_rng(0).integers(0, 64, 2000)
        session = ek.protect({"age": ages}, {"age": 64}, ek.PureDP(2), seed=0)
        estimate = ek.catalog["HB"](session.source, ek.workload.Prefix(64), ek.PureDP(1))
        vector, _ = ek.measure.data_vector(session.source)
        x_hat = ek.least_squares([ek.measure.laplace(vector, ek.selection.identity((64,)), "0.5")], size=64)
        print(round(float(np.asarray(estimate).sum())), x_hat.shape, session.budget.spent.epsilon)
        print(operators.WHO, plans.WHO, kernel.WHO, gateway.WHO, sep="|")
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout, after the script's own folder as for any user
    done = subprocess.run([sys.executable, "plan.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    total, shape, spent = first.split(" ", 1)[0], first.split(" ", 1)[1].rsplit(" ", 1)[0], first.rsplit(" ", 1)[1]
    assert abs(int(total) - 2000) < 200 and shape == "(64,)" and spent == "3/2"
    assert second == "|".join(f"the user's {name}" for name in ("operators", "plans", "kernel", "gateway"))


def test_the_installed_packages_are_every_folder_of_the_layers_under_ektelo_ng():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        ".".join(("ektelo_ng", *path.parent.relative_to(ROOT).parts)).replace("ektelo_ng.ektelo_ng", "ektelo_ng")
        for top in ("ektelo_ng", *LAYERS) for path in (ROOT / top).rglob("__init__.py")
    }
    assert set(config["packages"]) == folders
    assert config["package-dir"] == {f"ektelo_ng.{name}": name for name in LAYERS}


def test_importing_the_kernel_loads_no_layer_above_it():
    code = ("import sys, ektelo_ng.kernel.service; "
            "print(sorted(m for m in sys.modules if m.startswith(('ektelo_ng.operators', 'ektelo_ng.plans'))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
