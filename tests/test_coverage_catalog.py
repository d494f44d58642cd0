"""Every claimed interval holds at its level: catalog plans on Prefix queries over 256 cells, 40 fresh kernels
each, 90% and 95%. A claimed level may be missed by at most three standard errors (over the runs); withheld
intervals are counted, with their reasons. The exact intervals narrowed to 0.7x must fail (power: H2 covers
0.72 at 90%); the partition plans' sound bounds are conservative and still cover at 0.7x."""

from __future__ import annotations

import pytest

from ektelo_ng.coverage import LEVELS, coverage
from ektelo_ng.plans import info

RUNS = 40
#: The 1-D plans that claim intervals (the rest withhold them, tested in test_error_bars_partition.py; Identity,
#: HB and HDMM over 300 runs in test_coverage.py).
CLAIMING = ["Privelet", "H2", "GreedyH", "DAWA", "AHP", "PHP", "PHP+", "DPCube"]
#: Exact intervals, whose 0.7x narrowing the check must catch (the partition plans' bounds are conservative).
EXACT = {"Privelet", "H2", "GreedyH"}
ALL_1D = sorted(name for name, entry in info.items() if 1 in entry.dimensions)


def _check(name: str, shape: str, cells: int) -> None:
    found = coverage(name, shape, cells, RUNS)
    for level in LEVELS:
        if found.covered[level]:
            assert found.mean(level) >= level - 3 * found.standard_error(level) - 1e-9, (
                name, shape, level, found.mean(level), found.standard_error(level))
    assert found.withheld == 0 or found.reasons, name
    if name in EXACT:  # power: the same intervals at 0.7x miss by more than three standard errors
        assert any(found.mean(level, True) < level - 3 * found.standard_error(level, True) for level in LEVELS), (
            name, [found.mean(level, True) for level in LEVELS])


@pytest.mark.parametrize("name", CLAIMING)
def test_claimed_intervals_cover_on_skewed_data(name):
    _check(name, "skewed", 256)


@pytest.mark.slow
@pytest.mark.parametrize("cells", [256, 4096])
@pytest.mark.parametrize("shape", ["flat", "skewed", "steps"])
@pytest.mark.parametrize("name", ALL_1D)
def test_every_plan_on_every_shape_and_size(name, shape, cells):
    _check(name, shape, cells)
