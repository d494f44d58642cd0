"""Every claimed interval holds at its level: catalog plans on Prefix queries over 256 cells, 40 fresh kernels
each, 90% and 95%. A claimed level may be missed by at most three standard errors (over the runs); withheld
intervals are counted, with their reasons. The same intervals narrowed to 0.7x must fail (power)."""

from __future__ import annotations

import pytest

from ektelo_ng.coverage import LEVELS, coverage
from ektelo_ng.plans import info

RUNS = 40
#: The 1-D plans that claim intervals (the rest withhold them, tested in test_error_bars_partition.py).
CLAIMING = ["Identity", "Privelet", "H2", "HB", "GreedyH", "HDMM", "DAWA", "AHP", "PHP", "PHP+", "DPCube"]
ALL_1D = sorted(name for name, entry in info.items() if 1 in entry.dimensions)


def _check(name: str, shape: str, cells: int) -> None:
    found = coverage(name, shape, cells, RUNS)
    for level in LEVELS:
        if found.covered[level]:
            assert found.mean(level) >= level - 3 * found.standard_error(level) - 1e-9, (
                name, shape, level, found.mean(level), found.standard_error(level))
    assert found.withheld == 0 or found.reasons, name


@pytest.mark.parametrize("name", CLAIMING)
def test_claimed_intervals_cover_on_skewed_data(name):
    _check(name, "skewed", 256)


@pytest.mark.slow
@pytest.mark.parametrize("cells", [256, 4096])
@pytest.mark.parametrize("shape", ["flat", "skewed", "steps"])
@pytest.mark.parametrize("name", ALL_1D)
def test_every_plan_on_every_shape_and_size(name, shape, cells):
    _check(name, shape, cells)


def test_intervals_narrowed_to_0_7x_are_caught():
    """Power: the exact intervals of data-independent plans, 0.7x as wide, miss their level by more than three
    standard errors (HB: 0.76 at 90%; H2: 0.72). The sound bounds of the data-dependent plans are conservative
    (DAWA and PHP still cover at 0.7x), which is what a bound costs."""
    for name, shape in (("HB", "flat"), ("H2", "flat")):
        found = coverage(name, shape, 256, RUNS, narrow=0.7)
        for level in LEVELS:
            assert found.mean(level) < level - 3 * found.standard_error(level), (name, level, found.mean(level))
