"""``ektelo-ng advise`` as a user runs it: shorthand and file workloads, JSON, the plot, and a saved pick that
``ektelo-ng run`` measures."""

from __future__ import annotations

import ektelo_ng as ek

import importlib.util
import json

import numpy as np
import pytest

from ektelo_ng.cli import build_parser, main


def test_advise_explains_itself(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["advise", "--help"])
    text = capsys.readouterr().out
    assert all(word in text for word in ("--time-limit", "--out", "--records", "sqrt(2 rho)", "YAML"))


def test_json_output_ranks_and_names_the_pick(capsys):
    assert main(["advise", "--workload", "allrange:64", "--budget", "epsilon=1", "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    ranked = [r for r in advice["rows"] if r["status"] == "ok"]
    assert advice["pick"] == ranked[0]["name"] and ranked[0]["name"].startswith("HDMM")
    assert ranked[0]["rmse"] == pytest.approx(5.56, abs=0.02) and advice["svd_bound_rmse"]["laplace"] > 3.2
    assert all(r["reason"] for r in advice["rows"] if r["status"] == "skipped")


def _write_spec(folder, suffix="json"):
    spec = {"domain": {"age": 16, "sex": 2},
            "workload": [{"marginals": "upto:1"}, {"attributes": ["age", "sex"], "queries": {"age": "prefix"},
                                                    "weight": 2}]}
    path = folder / f"workload.{suffix}"
    if suffix == "json":
        path.write_text(json.dumps(spec))
    else:
        yaml = pytest.importorskip("yaml")
        path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_a_workload_file_is_read_with_its_weights(tmp_path, capsys, suffix):
    path = _write_spec(tmp_path, suffix)
    assert main(["advise", "--workload", str(path), "--budget", "rho=0.5", "--json", "--time-limit", "30"]) == 0
    advice = json.loads(capsys.readouterr().out)
    assert "4 query sets on marginals" in advice["workload"] and "51 queries" in advice["workload"]


@pytest.mark.parametrize("item, message", [
    ({"attributes": ["age"], "queries": {"age": "median"}}, "item 1 .*unknown query kind 'median'"),
    ({"attributes": ["height"], "queries": "prefix"}, "item 1 .*height"),
    ({"marginals": "kway:3"}, "item 1 .*kway:K needs"),
    ({"attributes": ["age"], "matrix": [[1, 2]]}, "item 1 .*16 columns"),
])
def test_a_bad_workload_item_is_named(tmp_path, capsys, item, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"domain": {"age": 16, "sex": 2}, "workload": [item]}))
    assert main(["advise", "--workload", str(path), "--time-limit", "10"]) == 2
    assert capsys.readouterr().err.startswith("ektelo-ng advise: error:")
    path.write_text(json.dumps({"domain": {"age": 16, "sex": 2}, "workload": [item]}))
    with pytest.raises(ValueError, match=message):
        from ektelo_ng.workload_spec import read_workload_file

        read_workload_file(path)


def test_a_domain_that_does_not_fit_the_shorthand_is_refused(capsys):
    assert main(["advise", "--workload", "prefix:16", "--domain", "age=10"]) == 2
    assert "sizes (10,) but the workload prefix:16 is over (16,)" in capsys.readouterr().err


def test_the_saved_pick_is_what_run_measures(tmp_path, capsys):
    ages = np.random.default_rng(0).integers(0, 16, 300)
    table = tmp_path / "ages.csv"
    table.write_text("age\n" + "\n".join(map(str, ages)) + "\n")
    advice_file = tmp_path / "advice.json"
    assert main(["advise", "--workload", "prefix:16", "--domain", "age=16", "--budget", "epsilon=0.5",
                 "--out", str(advice_file), "--no-progress"]) == 0
    assert f"saved {advice_file}" in capsys.readouterr().out
    out = tmp_path / "answers.json"
    assert main(["run", str(advice_file), "--table", str(table), "--domain", "age=16", "--budget", "epsilon=0.5",
                 "--in-process", "--seed", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert len(report["answers"]) == 16 and "advised: HDMM" in report["note"]
    assert report["budget_spent"] == report["budget_total"] == "1/2"


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs the [plot] extra")
def test_plot_draws_error_against_budget(tmp_path, capsys):
    figure = tmp_path / "advice.png"
    assert main(["advise", "--workload", "prefix:64", "--budget", "rho=0.5", "--records", "10000",
                 "--plot", str(figure), "--no-progress"]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 10_000


def test_ctrl_c_ends_a_command_in_one_line(monkeypatch, capsys):
    from ektelo_ng.commands import advise_command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(advise_command, "advise", interrupted)
    assert main(["advise", "--workload", "prefix:8"]) == 130
    assert capsys.readouterr().err == "ektelo-ng advise: interrupted\n"


def test_a_saved_advice_asking_for_endless_restarts_is_refused(tmp_path):
    from ektelo_ng.operators.advice import advise, load
    from ektelo_ng.operators import workload as wl

    path = tmp_path / "advice.json"
    advise([16], wl.Prefix(16), ek.PureDP(1.0), time_limit=30).save(path)
    document = json.loads(path.read_text())
    document["pick"]["restarts"] = 10**9
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="restarts must be at most 100"):
        load(path)
    with pytest.raises(ValueError, match="restarts must be at most 100"):
        advise([16], wl.Prefix(16), ek.PureDP(1.0), restarts=101)
