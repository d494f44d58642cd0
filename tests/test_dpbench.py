"""The DPBench replay harness: data, metric, workloads, grid, runner (budget, resumption) and report."""

from __future__ import annotations

import csv
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from ektelo_ng.cli import main
from ektelo_ng.dpbench import data, report, workloads
from ektelo_ng.dpbench.grid import Grid, Setting, parse_domain
from ektelo_ng.dpbench.metrics import scaled_errors
from ektelo_ng.dpbench.runner import RESULTS, read_results, run_grid, run_setting
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.plans import info

SHARED = Path(__file__).resolve().parents[2] / "shared" / "dpbench"
needs_files = pytest.mark.skipif(not (SHARED / "NOTICE.md").exists(), reason="DPBench data files not beside the repo")


# ---- data -------------------------------------------------------------------------------
def test_names_and_aliases_resolve_in_any_case():
    assert data.dataset("search").name == "SEARCHLOGS"
    assert data.dataset("bj-cabs-e").name == "BEIJING-CABS-E"
    assert len(data.datasets(builtin=False)) == 28
    assert len(data.datasets(1, builtin=False)) == 18 and len(data.datasets(2, builtin=False)) == 10
    with pytest.raises(ValueError, match="unknown dataset 'NOPE'"):
        data.dataset("NOPE")


def test_coarsen_sums_contiguous_blocks_like_a_loop():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 9, (8, 12))
    expected = np.array([[x[2 * i:2 * i + 2, 4 * j:4 * j + 4].sum() for j in range(3)] for i in range(4)])
    np.testing.assert_array_equal(data.coarsen(x, (4, 3)), expected)
    np.testing.assert_array_equal(data.coarsen(np.arange(8), 2), [6, 22])
    with pytest.raises(ValueError, match="does not divide"):
        data.coarsen(np.zeros(4096), 1000)


def test_sample_draws_exactly_scale_records_reproducibly():
    shape = data.load_shape("SYN-STEPS")
    a, b = data.sample(shape, 12345, 7), data.sample(shape, 12345, 7)
    assert a.sum() == 12345 and a.shape == (4096,) and a.dtype.kind == "i"
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, data.sample(shape, 12345, 8))
    assert np.all(a[shape == 0] == 0)  # no record where the shape has no mass
    with pytest.raises(ValueError, match="positive number of records"):
        data.sample(shape, 0, 0)


def test_records_count_back_to_the_histogram():
    x = np.array([[0, 2, 1], [3, 0, 1]])
    cols = data.records(x)
    back = np.zeros_like(x)
    np.add.at(back, (cols["a0"], cols["a1"]), 1)
    np.testing.assert_array_equal(back, x)


def test_a_data_file_needs_a_directory_and_a_missing_one_says_where_it_looked(tmp_path):
    with pytest.raises(ValueError, match="--data-dir"):
        data.load_shape("HEPTH")
    with pytest.raises(FileNotFoundError, match=r"1D/HEPTH\.n4096\.npy"):
        data.load_shape("HEPTH", tmp_path)


@needs_files
def test_registry_matches_the_notice_and_every_file_loads():
    notice = (SHARED / "NOTICE.md").read_text()
    table = re.findall(r"^\| ([A-Z0-9-]+) \|([^|]*)\| (\S+) \| ([\d,]+) \|", notice, re.M)
    assert len(table) == 28
    for name, aliases, file, scale in table:
        entry = data.dataset(name)
        assert entry.file == file
        assert set(entry.aliases) == {a.strip() for a in aliases.split(",") if a.strip()}
        counts = np.load(SHARED / file)
        assert counts.sum() == int(scale.replace(",", ""))
        shape = data.load_shape(name, SHARED)
        assert shape.shape == data.FULL_SHAPE[entry.dimensions] and math.isclose(shape.sum(), 1.0)


# ---- metric and workloads -----------------------------------------------------------------
def test_scaled_errors_by_hand():
    x, estimate = np.array([3.0, 1.0, 0.0, 4.0]), np.array([2.0, 1.0, 1.0, 4.0])
    # Prefix diff = cumsum(x - estimate) = [1, 1, 0, 0]; q = 4, s = 8
    errors = scaled_errors(Prefix(4), x, estimate)
    assert errors == pytest.approx({"L1": 2 / 32, "L2": math.sqrt(2) / 32, "Linf": 1 / 8})
    with pytest.raises(ValueError, match="empty"):
        scaled_errors(Prefix(4), np.zeros(4), estimate)


def test_workloads_have_dpbench_sizes():
    assert workloads.build("RandomRange", (32, 32), 1).shape == (2000, 1024)
    assert workloads.build("Prefix", (64,), 1).shape == (64, 64)
    assert workloads.build("AllRange", (4, 4), 1).shape == (100, 16)
    with pytest.raises(ValueError, match="Prefix workload is 1-D"):
        workloads.build("Prefix", (8, 8), 0)


# ---- grid ---------------------------------------------------------------------------------
def test_grid_refuses_bad_settings_up_front():
    ok = dict(algorithms=("Identity",), datasets=("SYN-STEPS",), scales=(1000,), domains=(256,))
    Grid(**ok)
    with pytest.raises(ValueError, match="unknown algorithm"):
        Grid(**{**ok, "algorithms": ("Nope",)})
    with pytest.raises(ValueError, match="does not divide"):
        Grid(**{**ok, "domains": (1000,)})
    with pytest.raises(ValueError, match="QuadTree runs on"):
        Grid(**{**ok, "algorithms": ("QuadTree",)})
    with pytest.raises(ValueError, match="epsilon must be a positive number"):
        Grid(**{**ok, "epsilons": ("-1",)})
    with pytest.raises(ValueError, match="no domain of the grid fits"):
        Grid(**{**ok, "domains": ((16, 16),)})
    assert parse_domain("32x64") == (32, 64) and parse_domain("256") == 256


def test_seeds_depend_on_the_run_not_on_the_process():
    s = Setting("SYN-STEPS", 1000, (256,), 0, "Prefix", 0)
    assert s.data_seed == Setting("SYN-STEPS", 1000, (256,), 0, "Prefix", 0).data_seed
    assert s.data_seed == zlib.crc32(b"('data', 0, 'SYN-STEPS', 1000, 0)")  # pinned: results files stay comparable
    assert s.data_seed != Setting("SYN-STEPS", 1000, (256,), 1, "Prefix", 0).data_seed
    assert s.noise_seed("HB", "0.1") != s.noise_seed("DAWA", "0.1")


# ---- runner -------------------------------------------------------------------------------
@pytest.mark.parametrize("dims, domain", [(1, (256,)), (2, (16, 16))])
def test_every_algorithm_spends_exactly_its_budget_and_returns_a_finite_estimate(dims, domain):
    dataset = data.datasets(dims, builtin=True)[0]
    algorithms = [a for a, entry in info.items() if dims in entry.dimensions]
    setting = Setting(dataset, 5000, domain, 0, workloads.default_workload(dims), 0)
    for public in (False, True):
        rows = run_setting(setting, [(a, "1/2") for a in algorithms], None, public, False, {})
        assert [r["algorithm"] for r in rows] == algorithms
        for row in rows:
            assert row["error"] == "", (row["algorithm"], row["error"])
            assert row["spent"] == "1/2", row["algorithm"]
            assert all(math.isfinite(float(row[k])) for k in ("L1", "L2", "Linf"))


def test_a_failing_run_is_recorded_and_the_grid_goes_on(monkeypatch):
    setting = Setting("SYN-STEPS", 1000, (64,), 0, "Prefix", 0)
    rows = run_setting(setting, [("MWEM", "0.1"), ("Identity", "0.1")], None, False, False, {"MWEM": {"rounds": 0}})
    assert "rounds must be a positive number" in rows[0]["error"] and rows[0]["L2"] == ""
    assert rows[1]["error"] == "" and rows[1]["spent"] == "1/10"


def test_an_interrupted_replay_resumes_to_the_same_results(tmp_path):
    grid = Grid(("Identity", "HB", "DAWA"), ("SYN-STEPS", "SYN-SPIKES"), (1000, 100000), (128,), ("0.1",), 2)
    full = run_grid(grid, tmp_path / "full", jobs=2, progress=False)
    assert len(full) == grid.size() == 24
    partial = tmp_path / "partial"
    partial.mkdir()
    lines = (tmp_path / "full" / RESULTS).read_text().splitlines(keepends=True)
    (partial / RESULTS).write_text("".join(lines[:10]))  # header + 9 runs survived the interruption
    resumed = run_grid(grid, partial, jobs=1, progress=False)
    key = lambda r: (r["algorithm"], r["dataset"], r["scale"], r["trial"])  # noqa: E731
    assert len(resumed) == 24 and len({key(r) for r in resumed}) == 24
    drop = ("seconds",)
    assert sorted(({k: v for k, v in r.items() if k not in drop} for r in resumed), key=key) == \
        sorted(({k: v for k, v in r.items() if k not in drop} for r in full), key=key)
    again = run_grid(grid, partial, jobs=1, progress=False)
    assert len(again) == 24  # nothing ran twice


def test_a_foreign_results_file_is_refused(tmp_path):
    (tmp_path / RESULTS).write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a results file"):
        read_results(tmp_path)


# ---- report -------------------------------------------------------------------------------
def _row(algorithm, dataset, scale, value, trial=0):
    return {"algorithm": algorithm, "dataset": dataset, "scale": str(scale), "domain": "64", "epsilon": "0.1",
            "workload": "Prefix", "trial": str(trial), "L2": str(value), "seconds": "0.1", "error": ""}


def test_report_ranks_within_settings_and_compares_with_identity():
    rows = [
        _row("Identity", "A", 10, 4.0), _row("Identity", "A", 10, 6.0, 1), _row("DAWA", "A", 10, 1.0),
        _row("DAWA", "A", 10, 1.5, 1), _row("Identity", "B", 10, 2.0), _row("DAWA", "B", 10, 8.0),
        {**_row("HB", "B", 10, ""), "error": "ValueError: boom"},
    ]
    cells = {(c.algorithm, c.dataset): c for c in report.cells(rows)}
    assert cells["DAWA", "A"].mean == 1.25 and cells["DAWA", "A"].rank == 1 and cells["Identity", "A"].rank == 2
    assert cells["Identity", "A"].std == pytest.approx(math.sqrt(2)) and cells["Identity", "A"].low == 4.0
    assert cells["DAWA", "B"].rank == 2 and ("HB", "B") not in cells
    standing = {s.algorithm: s for s in report.standings(list(cells.values()))}
    assert standing["DAWA"].relative_to_identity == pytest.approx(math.sqrt(1.25 / 5 * 8 / 2))
    assert standing["DAWA"].mean_rank == 1.5 and standing["DAWA"].wins == 1
    text = report.text(list(cells.values()), list(standing.values()), rows)
    assert "1 run(s) failed" in text and "boom" in text


def test_the_replay_shows_dpbench_s_known_behaviour(tmp_path):
    """eps = 0.1, 1-D Prefix: data-dependent plans beat Identity at scale 1e3; Identity or HB beat
    them at scale 1e7 (DPBench's main finding), on every built-in 1-D shape on average."""
    algorithms = ("Identity", "HB", "DAWA", "AHP", "MWEM")
    grid = Grid(algorithms, tuple(data.datasets(1, builtin=True)), (1000, 10_000_000), (1024,), ("0.1",), 3)
    overview = report.standings(report.cells(run_grid(grid, tmp_path, progress=False)))
    ratio = {(s.algorithm, s.scale): s.relative_to_identity for s in overview}
    for algorithm in ("DAWA", "AHP", "MWEM"):
        assert ratio[algorithm, 1000] < 1.0, algorithm
        assert min(1.0, ratio["HB", 10_000_000]) < ratio[algorithm, 10_000_000], algorithm


def test_command_line_writes_results_summary_and_figures(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    code = main(["dpbench", "--algorithms", "Identity,HB", "--datasets", "SYN-BUMPS", "--scales", "1e3", "1e5",
                 "--domains", "64", "--trials", "2", "--out", str(out), "--plots", "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "8 runs" in printed and "HB" in printed
    with open(out / RESULTS) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8 and set(rows[0]) >= {"algorithm", "dataset", "scale", "domain", "epsilon", "trial", "seed",
                                               "L1", "L2", "Linf", "seconds"}
    assert (out / "results.json").exists() and (out / "summary.json").exists()
    assert {p.name for p in out.glob("*.png")} == {"overview_64_eps0.1.png", "error_vs_scale_64_eps0.1.png"}
    assert main(["dpbench", "--domains", "1000", "--datasets", "SYN-BUMPS", "--out", str(out)]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_random_range_draws_side_lengths_then_placements_as_dpbench_defines():
    from scipy import stats

    from ektelo_ng.operators.workload import RandomRange

    W = RandomRange(8, 16_000, seed=4)
    lengths = W.hi - W.lo + 1
    counts = np.bincount(lengths, minlength=9)[1:]
    assert stats.chisquare(counts).pvalue > 1e-4  # every length 1..8 equally likely
    for length in (1, 5, 7):
        starts = np.bincount(W.lo[lengths == length], minlength=9 - length)
        assert starts.size == 9 - length and stats.chisquare(starts).pvalue > 1e-4  # every fitting placement
    assert np.all(W.lo[lengths == 8] == 0)
    assert W.hi.max() == 7 and W.lo.min() == 0
    boxes = RandomRange((32, 32), 2000, seed=1)
    assert boxes.dense().sum(axis=1).mean() / 1024 == pytest.approx((33 / 64) ** 2, rel=0.05)  # about a quarter
    assert np.array_equal(RandomRange((32, 32), 50, seed=7).dense(), RandomRange((32, 32), 50, seed=7).dense())
