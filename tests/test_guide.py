"""The user guide's blocks run, in order, in one folder, as a reader would paste them (``tests.doc_commands``)."""

from __future__ import annotations

from tests.doc_commands import ROOT, Page, run_page

GUIDE = Page(
    ROOT / "docs" / "guide.md",
    substitutions=[
        (r"kernel\.example\.org", "localhost", "the test's own machine, named alike by the certificate and address"),
        (r":7373\b", ":{port}", "a free port"),
    ],
)


def test_every_block_of_the_guide_runs(tmp_path):
    ran = run_page(GUIDE, tmp_path)
    blocks = GUIDE.blocks()
    assert sum(kind == "python" for kind, _ in blocks) >= 5 and sum(kind == "bash" for kind, _ in blocks) >= 2
    out = ran.out
    assert "spent rho = 0.5 of 0.5" in out and "exact (Gaussian)" in out
    assert (tmp_path / "sex_by_region.csv").read_text().startswith("query,answer,variance")
    total = [line for line in out.splitlines() if "spent epsilon = 1 of 1" in line][0]
    assert abs(float(total.split()[0]) - 20_000) < 300  # the CDF's last answer: every record
    assert (tmp_path / "my_plan.py").exists() and (tmp_path / "cdf.csv").read_text().startswith("query,answer")
