"""The advisor under a demanding and a hostile user: scripts without a main guard, interruptions, huge and
malformed workloads, tampered advice files, and numbers checked against what the strategies deliver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(folder: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` saved as a script and run as a user would (``python script.py``), with this checkout."""
    script = folder / "script.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)


# ---- the worker process ------------------------------------------------------------------------------------
def test_a_script_without_a_main_guard_is_not_run_again_by_the_worker(tmp_path):
    """Spawn re-runs an unguarded script in each worker: its releases would repeat, unaccounted, and the advice
    would find no selector."""
    done = run_script(tmp_path, (
        "import ektelo_ng as ek\n"
        "with open('runs.txt', 'a') as runs:\n"
        "    runs.write('x')\n"
        "advice = ek.advise([8], ek.workload.Prefix(8), 1.0, time_limit=20)\n"
        "print(advice.pick.name)\n"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "runs.txt").read_text() == "x"
    assert "Traceback" not in done.stderr


def test_a_worker_starts_under_an_address_space_limit_lower_than_its_own(tmp_path):
    """A hard ``ulimit -v`` below three quarters of the machine: the worker keeps the lower limit instead of
    failing to start (every selector was then 'no time left for it')."""
    done = run_script(tmp_path, (
        "import resource\n"
        "from ektelo_ng.operators.advice.deadline import Worker\n"
        "resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))\n"
        "with Worker(memory_limit=64 * 2**30) as worker:\n"
        "    print(worker.run(sum, ([1, 2],), 60))\n"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "status='ok', value=3" in done.stdout


def test_a_worker_that_cannot_start_says_so_and_none_starts_without_time():
    from ektelo_ng.operators.advice.deadline import Worker

    with Worker(preload=("no_such_module_anywhere",)) as worker:
        outcome = worker.run(sum, ([1],), 60)
        assert outcome.status == "error" and "could not start" in outcome.reason
        assert not worker.start(0) and worker._process is None
        assert worker.run(sum, ([1],), 0).reason == "no time left for it"


# ---- saved advice through the kernel --------------------------------------------------------------------------
def test_a_data_dependent_pick_under_zcdp_runs_at_the_advised_epsilon(tmp_path):
    """Evidence rows are priced at epsilon = sqrt(2 rho) (Laplace); the plan got the ZCDP budget and failed."""
    from fractions import Fraction

    import numpy as np

    import ektelo_ng as ek
    from ektelo_ng.operators import workload as wl
    from ektelo_ng.operators.privacy import epsilon_within_zcdp
    from ektelo_ng.plans import catalog

    budget = ek.ZCDP("0.005")
    advice = ek.advise([32, 32], wl.RandomRange((32, 32), 50, seed=0), budget, scale=1000, time_limit=5)
    assert advice.pick.status == "evidence"
    path = tmp_path / "advice.json"
    advice.save(path)
    rng = np.random.default_rng(0)
    columns = {"a0": rng.integers(0, 8, 1000), "a1": rng.integers(0, 32, 1000)}
    session = ek.protect(columns, {"a0": 32, "a1": 32}, budget, seed=0)
    estimate = catalog["Advised"](session.source, None, budget, advice=path)
    assert estimate.answer(advice.workload.answers).shape == (50,)
    assert 0 < session.budget.spent.value <= epsilon_within_zcdp(Fraction(1, 200)) ** 2 / 2  # its stages' eps^2/2
