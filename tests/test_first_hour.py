"""A new user's first hour (issue 45): what the budget report, the outputs, the service and the errors say is in
the user's own terms: the delta and column order asked for, names that exist, no internal units."""

from __future__ import annotations

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.cli import main


def _ages(tmp_path, rows=300):
    path = tmp_path / "ages.csv"
    ages = np.random.default_rng(0).integers(0, 10, rows)
    path.write_text("age\n" + "".join(f"{a}\n" for a in ages))
    return path


# ---- item 3: an (epsilon, delta) budget is reported at its own delta ---------------------------------------------


def test_an_approx_dp_budget_is_reported_at_the_delta_it_was_asked_for():
    session = ek.protect({"age": np.arange(10)}, {"age": 10}, ek.ApproxDP(1, 1e-6))
    text = str(session.budget)
    assert "as (epsilon, delta = 1e-06)-DP: spent epsilon = 0 of 1" in text, text
    vector, _ = ek.measure.data_vector(session.source)
    ek.measure.gaussian(vector, ek.matrix.Identity(10), session.budget.total.rho)
    assert "spent epsilon = 1 of 1" in str(session.budget)  # all of it: the epsilon asked for, at its delta
    assert session.budget.approx_dp(1e-6) == pytest.approx(1, rel=1e-6)


def test_run_reports_an_approx_dp_budget_at_its_own_delta(tmp_path, capsys):
    table = _ages(tmp_path)
    assert main(["run", "Identity", "--table", str(table), "--domain", "age=10", "--budget",
                 "epsilon=1,delta=1e-6"]) == 0
    said = capsys.readouterr().out
    assert "delta = 1e-06)-DP: spent epsilon = 1 of 1" in said, said


# ---- item 4: synthetic records keep the input's column order ------------------------------------------------------


@pytest.mark.parametrize("in_process", [False, True])
def test_synthetic_records_keep_the_tables_column_order_not_the_domain_files(tmp_path, capsys, in_process):
    rng = np.random.default_rng(1)
    table = tmp_path / "pay.csv"
    table.write_text("salary,age\n" + "".join(f"{s},{a}\n" for s, a in zip(rng.integers(0, 4, 200),
                                                                           rng.integers(0, 3, 200))))
    (tmp_path / "domain.json").write_text('{"age": 3, "salary": 4}')
    out = tmp_path / "synthetic.csv"
    assert main(["run", "ResidualPlanner+PGM", "--table", str(table), "--domain", str(tmp_path / "domain.json"),
                 "--budget", "rho=1", "--workload", "kway:2", "--synthetic", str(out), *(["--in-process"] if in_process else [])]) == 0
    capsys.readouterr()
    lines = out.read_text().splitlines()
    assert lines[0] == "salary,age" and 150 < len(lines) < 250  # as many records as the noisy total
    assert all(0 <= int(s) < 4 and 0 <= int(a) < 3 for s, a in (line.split(",") for line in lines[1:]))


# ---- item 6: a credential for an address the certificate does not name -------------------------------------------


def test_a_credential_for_an_address_the_certificate_does_not_name_is_refused_before_anything_is_given(
        tmp_path, capsys):
    pytest.importorskip("cryptography")
    service = str(tmp_path / "service")
    assert main(["kernel", "init", service, "--budget", "epsilon=4", "--host", "localhost"]) == 0
    assert main(["kernel", "analysts", "add", "alice", "--budget", "epsilon=1", "--dir", service,
                 "--address", "127.0.0.1:7373"]) == 2
    said = capsys.readouterr().err
    assert "127.0.0.1" in said and "localhost" in said and "--host 127.0.0.1" in said, said
    assert not (tmp_path / "service" / "credentials" / "alice.json").exists()
    # nothing was given: the name and the share are still free
    assert main(["kernel", "analysts", "add", "alice", "--budget", "epsilon=4", "--dir", service,
                 "--address", "localhost:7373"]) == 0


def test_connecting_where_the_certificate_names_another_host_says_so(tmp_path):
    pytest.importorskip("cryptography")
    import socket
    import threading

    from ektelo_ng.gateway.credentials import Credential
    from ektelo_ng.gateway.owner import ServiceDirectory, init_service
    from ektelo_ng.kernel.privacy import PureDP

    directory = init_service(tmp_path / "service", PureDP(4), hosts=["localhost"])
    context = ServiceDirectory(directory.path).server_context()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_one() -> None:
        connection, _ = listener.accept()
        try:
            context.wrap_socket(connection, server_side=True)
        except OSError:
            pass  # the client refused the certificate
        finally:
            connection.close()

    server = threading.Thread(target=serve_one)
    server.start()
    ca = (directory.path / "tls" / "ca.pem").read_text()
    credential = Credential(analyst="alice", token="t" * 43, address=f"127.0.0.1:{port}", ca=ca)
    try:
        with pytest.raises(ConnectionError, match=r"its certificate does not name 127\.0\.0\.1"):
            ek.connect(credential=credential, timeout=30)
    finally:
        server.join(timeout=30)
        listener.close()


# ---- item 7: no internal units, a "did you mean" for typos, refusals before anything is spent ---------------------


@pytest.mark.parametrize(("budget", "says"), [
    ("epsilon=0", "epsilon must be positive; got '0'"),
    ("epsilom=1", "did you mean epsilon?"),
    ("epsilon=1,detla=1e-6", "did you mean delta?"),
    ("roh=0.5", "did you mean rho?"),
])  # fmt: skip
def test_a_budget_error_speaks_the_users_units(budget, says):
    from ektelo_ng.grammar import parse_budget

    with pytest.raises(ValueError) as refused:
        parse_budget(budget)
    assert says in str(refused.value) and "AMOUNT_GRID" not in str(refused.value)


def test_a_plan_or_workload_typo_gets_a_did_you_mean(tmp_path, capsys):
    table = _ages(tmp_path)
    assert main(["run", "Identiy", "--table", str(table), "--domain", "age=10", "--budget", "epsilon=1"]) == 2
    assert "did you mean Identity?" in capsys.readouterr().err
    assert main(["run", "Identity", "--table", str(table), "--domain", "age=10", "--budget", "epsilon=1",
                 "--workload", "prefx:10"]) == 2
    assert "did you mean prefix?" in capsys.readouterr().err


@pytest.mark.parametrize(("spec", "says"), [
    ('{"age": "100"}', "attribute 'age': give its size as a number (100) or its labels as a list, not the string '100'"),
    ('{"age": true}', "attribute 'age': give its size as a number"),
    ('{"age": ["a", "a"]}', "attribute 'age' has repeated labels"),
])  # fmt: skip
def test_a_bad_value_in_a_domain_file_is_one_plain_sentence(tmp_path, spec, says):
    from ektelo_ng.grammar import parse_domain

    (tmp_path / "d.json").write_text(spec)
    with pytest.raises(ValueError) as refused:
        parse_domain(tmp_path / "d.json")
    text = str(refused.value)
    assert says in text and "pydantic" not in text and "validation error" not in text and "\n" not in text, text


def test_an_output_of_unknown_kind_is_refused_before_anything_is_spent(tmp_path, capsys):
    table = _ages(tmp_path)
    assert main(["run", "Identity", "--table", str(table), "--domain", "age=10", "--budget", "epsilon=1",
                 "--out", str(tmp_path / "r.xlsx")]) == 2
    said = capsys.readouterr()
    assert "--out" in said.err and ".csv or .json" in said.err and "spent" not in said.out
    assert not (tmp_path / "r.xlsx").exists()


def test_a_crumb_of_budget_below_what_can_be_spent_reads_as_none_left():
    from fractions import Fraction

    from ektelo_ng.kernel.privacy import AMOUNT_GRID, ZCDP
    from ektelo_ng.operators.client import BudgetView

    total = ZCDP("0.5")
    crumb = Fraction(1, AMOUNT_GRID) * Fraction(104, 100)
    view = BudgetView(total, ZCDP(total.rho - crumb), ZCDP(crumb), {})
    assert "spent rho = 0.5 of 0.5 (0 left" in str(view) and "e-84" not in str(view)
    assert "(0.25 left" in str(BudgetView(total, ZCDP("0.25"), ZCDP("0.25"), {}))


def test_a_models_answers_say_in_the_file_why_they_have_no_error_bars(tmp_path, capsys):
    import csv
    import json

    table = tmp_path / "people.csv"
    rng = np.random.default_rng(2)
    table.write_text("a,b\n" + "".join(f"{x},{y}\n" for x, y in zip(rng.integers(0, 3, 200), rng.integers(0, 2, 200))))
    for out in ("m.csv", "m.json"):
        assert main(["run", "ResidualPlanner+PGM", "--table", str(table), "--domain", "a=3,b=2", "--budget", "rho=1",
                     "--workload", "kway:2", "--out", str(tmp_path / out)]) == 0
    capsys.readouterr()
    with open(tmp_path / "m.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(r["std"] in ("", "nan") and "no error bars" in r["method"] for r in rows)
    answers = json.loads((tmp_path / "m.json").read_text())["answers"]
    assert all("no error bars" in a["method"] for a in answers)
