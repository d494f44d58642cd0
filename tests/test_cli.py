"""The command line: help everywhere, version, and the selection/error commands' numbers."""

from __future__ import annotations

import json

import pytest

from ektelo_ng.cli import build_parser, main


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and "ektelo-ng" in capsys.readouterr().out
    assert main([]) == 0 and "COMMAND" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [["error"], ["select"], ["select", "hdmm"], ["select", "residual-planner"], ["select", "query-smasher"],
     ["run"], ["kernel"], ["kernel", "serve"], ["kernel", "init"], ["kernel", "analysts", "add"], ["kernel", "audit"]],
)
def test_every_command_explains_itself(command, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([*command, "--help"])
    assert done.value.code == 0 and len(capsys.readouterr().out) > 200


def last_json(capsys):
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_error_command_reproduces_the_identity_column(capsys):
    assert main(["error", "--workload", "allrange:64", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    values = {r["strategy"]: r["rmse"] for r in rows}
    assert values["Identity"] == pytest.approx(6.63, abs=0.005) and values["SVD bound"] == pytest.approx(3.22, abs=0.005)


def test_select_residual_planner_matches_the_paper(capsys):
    # notes: d = 5, n = 8, <= 3-way marginals: RMSE 3.156, max variance 15.643 (sum loss gives the RMSE)
    assert main(["select", "residual-planner", "--domain", "8x8x8x8x8", "--marginals", "upto:3", "--json"]) == 0
    assert last_json(capsys)["rmse"] == pytest.approx(3.156, abs=1e-3)
    assert main(["select", "residual-planner", "--domain", "8x8x8x8x8", "--loss", "max", "--json"]) == 0
    assert last_json(capsys)["max_variance"] == pytest.approx(15.643, abs=1e-3)


def test_select_hdmm_and_query_smasher(capsys):
    assert main(["select", "hdmm", "--workload", "prefix:64", "--restarts", "1", "--json"]) == 0
    result = last_json(capsys)
    assert result["svd_bound_rmse"] <= result["rmse"] <= 5.32 * 1.01  # J Table 4, OPT_0 on prefix 64
    assert main(["select", "query-smasher", "--domain", "10x10x10", "--queries", "marginal", "--json"]) == 0
    assert last_json(capsys)["rmse"] > 0


def test_bad_arguments_exit_2_with_a_message(capsys):
    assert main(["error", "--workload", "nope:3"]) == 2
    assert "unknown workload" in capsys.readouterr().err
    assert main(["select", "residual-planner", "--domain", "10x0"]) == 2
    assert main(["select", "residual-planner", "--budget", "pcost"]) == 2
    assert main(["kernel", "serve", "--table", "missing.csv", "--domain", "missing.json", "--dir", "missing"]) == 2
    assert "kernel init" in capsys.readouterr().err


def test_demo_runs_every_one_dimensional_plan_with_exactly_its_budget(capsys):
    assert main(["demo", "--rows", "2000", "--cells", "64", "--epsilon", "1/2", "--seed", "1", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert {r["plan"] for r in rows} >= {"Identity", "HB", "H2", "Privelet", "GreedyH", "Uniform", "HDMM"}
    assert all(r["spent"] == "1/2" and r["rmse"] == r["rmse"] for r in rows)
    covered = {r["plan"]: r["covered_95"] for r in rows}
    assert covered["MWEM"] is None and all(0 <= covered[p] <= 1 for p in ("Identity", "HB", "DAWA"))
    assert main(["demo", "--cells", "100"]) == 2


def test_demo_draws_answers_with_their_intervals(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    figure = tmp_path / "error-bars.png"
    assert main(["demo", "--rows", "2000", "--cells", "64", "--seed", "1", "--plot", str(figure)]) == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "covered" in capsys.readouterr().out
