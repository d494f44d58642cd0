"""The advice's measured evidence: the shipped DPBench table, the builder that writes it, and the lookups over it."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from ektelo_ng.dpbench import condense
from ektelo_ng.dpbench.runner import COLUMNS
from ektelo_ng.operators.advice import evidence as ev

ROOT = Path(__file__).resolve().parents[1]


def _by_name(rows: list[ev.Evidence]) -> dict[str, ev.Evidence]:
    return {r.algorithm: r for r in rows}


def test_the_table_is_small_names_its_replays_and_covers_1d_and_2d():
    path = ROOT / "operators" / "advice" / ev.TABLE
    assert path.stat().st_size < 50_000
    table = ev.table()
    assert {s["dims"] for s in table["settings"]} == {1, 2}
    assert all(r["commit"] and r["command"] and r["finished"] and r["runs"] > 0 for r in table["replays"])
    assert table["data_dependent"]["DAWA"] and not table["data_dependent"]["HB"]


def _write(folder: Path, runs: list[tuple[str, int, float, str]], workload: str = "Prefix") -> Path:
    folder.mkdir()
    with open(folder / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for algorithm, trial, l2, error in runs:
            writer.writerow({"algorithm": algorithm, "dataset": "SYN-STEPS", "scale": 1000, "domain": "256",
                             "epsilon": "0.1", "trial": trial, "seed": 0, "L1": "", "L2": "" if error else l2,
                             "Linf": "", "seconds": 0.1, "workload": workload, "data_seed": trial, "spent": "1/10",
                             "error": error})
    return folder


def test_the_builder_pairs_trials_and_takes_the_geometric_mean_of_the_ratios(tmp_path):
    # Per-trial ratios 2, 1/2, 1/8: geometric mean 1/2 (the ratio of arithmetic means would be 4.25 / 7);
    # DAWA's failed fourth trial and HB's trial without an Identity run are left out.
    runs = [("Identity", 0, 1.0, ""), ("Identity", 1, 4.0, ""), ("Identity", 2, 2.0, ""), ("Identity", 3, 3.0, ""),
            ("DAWA", 0, 2.0, ""), ("DAWA", 1, 2.0, ""), ("DAWA", 2, 0.25, ""), ("DAWA", 3, 0.0, "ValueError: x"),
            ("HB", 0, 0.5, ""), ("HB", 4, 9.0, "")]
    table = condense.build([(str(_write(tmp_path / "out", runs)), "abc1234", "ektelo-ng dpbench ...")], None)
    (setting,) = table["settings"]
    assert setting["dims"] == 1 and setting["domain"] == [256] and setting["n_eps"] == 100.0
    assert setting["ratios"]["DAWA"] == [pytest.approx(0.5, rel=1e-12), 3]
    assert setting["ratios"]["HB"] == [0.5, 1] and setting["ratios"]["Identity"] == [1.0, 4]
    assert table["replays"][0]["commit"] == "abc1234" and table["replays"][0]["runs"] == len(runs)
    assert table["datasets"]["SYN-STEPS"]["256"][1] in ("skewed", "smooth")
    assert json.loads(condense.dumps(table)) == table


def test_the_builder_refuses_two_workloads_in_one_dimensionality(tmp_path):
    one = _write(tmp_path / "a", [("Identity", 0, 1.0, ""), ("DAWA", 0, 0.5, "")])
    other = _write(tmp_path / "b", [("Identity", 0, 1.0, "")], workload="AllRange")
    with pytest.raises(ValueError, match="one workload per dimensionality"):
        condense.build([(str(one), "c", "x"), (str(other), "c", "y")], None)


def test_share90_is_the_share_of_cells_holding_nine_tenths_of_the_mass():
    assert condense.share90([1.0] * 10) == 0.9
    assert condense.share90([97.0, 1.0, 1.0, 1.0] + [0.0] * 96) == 0.01


def test_identity_is_exactly_one_everywhere():
    assert all(s["ratios"]["Identity"][0] == 1.0 for s in ev.table()["settings"])
    for dims, cells in ((1, 4096), (2, 128 * 128)):
        assert _by_name(ev.evidence(dims, cells, 100.0))["Identity"].typical == 1.0


def test_dpbench_finding_data_dependent_plans_win_at_small_n_eps_and_lose_their_edge_at_large():
    small, large = _by_name(ev.evidence(1, 4096, 1e2)), _by_name(ev.evidence(1, 4096, 1e6))
    best_independent = {n: min(r.typical for r in rows.values() if not r.data_dependent)
                        for n, rows in (("small", small), ("large", large))}
    assert small["DAWA"].typical < 1 and small["MWEM*"].typical < best_independent["small"] / 2
    assert best_independent["large"] < large["DAWA"].typical and large["MWEM*"].typical > 1
    plane_small, plane_large = _by_name(ev.evidence(2, 128 * 128, 1e2)), _by_name(ev.evidence(2, 128 * 128, 1e6))
    assert plane_small["AGrid"].typical < 1
    assert plane_small["MWEM"].typical < 1 < plane_large["MWEM"].typical


def test_the_nearest_setting_is_chosen_in_log_with_ties_to_the_larger():
    assert {r.n_eps_used for r in ev.evidence(1, 4096, 3e3)} == {1e4}
    assert {r.n_eps_used for r in ev.evidence(1, 4096, 900)} == {1e2}
    assert {r.n_eps_used for r in ev.evidence(1, 4096, 1e3)} == {1e4}
    assert {r.n_eps_used for r in ev.evidence(1, 4096, 1e9)} == {1e6}
    assert {r.domain for r in ev.evidence(1, 300, 1e2)} == {(256,)}
    assert {r.domain for r in ev.evidence(1, 1024, 1e2)} == {(4096,)}
    assert {r.domain for r in ev.evidence(2, 50, 1e2)} == {(128, 128)}
    assert {(r.n_eps, r.cells) for r in ev.evidence(1, 300, 3e3)} == {(3e3, 300)}


def test_the_shape_filter_keeps_only_datasets_of_that_label():
    every = _by_name(ev.evidence(1, 4096, 1e2))["DAWA"]
    skewed = _by_name(ev.evidence(1, 4096, 1e2, "skewed"))["DAWA"]
    smooth = _by_name(ev.evidence(1, 4096, 1e2, "smooth"))["DAWA"]
    assert set(skewed.datasets) | set(smooth.datasets) == set(every.datasets)
    assert skewed.datasets and smooth.datasets and not set(skewed.datasets) & set(smooth.datasets)
    assert skewed.shape == "skewed" and every.shape is None
    assert smooth.typical == smooth.by_dataset[0] == smooth.low == smooth.high  # one dataset: its own ratio
    assert ev.evidence(2, 128 * 128, 1e2, "smooth") == []  # every 2-D dataset of the replay is skewed


def test_the_sentence_quotes_the_table():
    rows = ev.evidence(1, 4096, 1e2)
    dependent = min((r for r in rows if r.data_dependent), key=lambda r: r.typical)
    independent = min((r for r in rows if not r.data_dependent), key=lambda r: r.typical)
    text = ev.sentence(rows)
    assert text.startswith("At N x epsilon ~ 1e2 (DPBench replay: 1-D Prefix on 4,096 cells, 5 datasets)")
    assert f"{dependent.algorithm}'s error is typically {dependent.typical:.2g}x" in text
    assert f"the best data-independent plan {independent.algorithm} ({independent.typical:.2g}x" in text
    assert f"{independent.typical / dependent.typical:.2g}x below" in text
    assert "4,096 cells, 5 datasets; the replay setting nearest to N x epsilon 3e3)" in ev.sentence(ev.evidence(
        1, 4096, 3e3))
    assert "128x128 cells, 4 datasets; the replay setting nearest to 65,536 cells)" in ev.sentence(ev.evidence(
        2, 256 * 256, 1e4))
    assert "above the best data-independent plan" in ev.sentence(ev.evidence(1, 4096, 1e6))


@pytest.mark.parametrize(("call", "words"), [
    (lambda: ev.evidence(3, 4096, 1e2), ("1-D and 2-D range workloads", "dims=3")),
    (lambda: ev.evidence(1, 0, 1e2), ("cells", "0")),
    (lambda: ev.evidence(1, 4096, 0.0), ("n_eps", "0.0")),
    (lambda: ev.evidence(1, 4096, -5), ("n_eps", "-5")),
    (lambda: ev.evidence(1, 4096, math.nan), ("n_eps", "nan")),
    (lambda: ev.evidence(1, 4096, True), ("n_eps", "True")),
    (lambda: ev.evidence(1, 4096, 1e2, "bumpy"), ("'bumpy'", "skewed, smooth")),
    (lambda: ev.sentence([]), ("no evidence",)),
])
def test_bad_requests_are_refused_by_name(call, words):
    with pytest.raises(ValueError) as raised:
        call()
    assert all(word in str(raised.value) for word in words)
