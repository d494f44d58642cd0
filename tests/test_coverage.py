"""Error bars cover at their level: many runs of plans through the kernel, 90% and 95% intervals.

Runs are independent (a fresh kernel and noise seed each); a run's coverage is the fraction of its
answers inside their intervals, and the mean over runs must lie within 4 standard errors of the level.
The same runs with intervals made 0.7x and 1.3x as wide must fail that test: it has the power to see
intervals that are too narrow or too wide.
"""

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.operators.selection import hb, hdmm, identity, query_smasher, residual_planner
from ektelo_ng.operators.workload import Prefix

RUNS = 300
LEVELS = (0.9, 0.95)
SCALES = (0.7, 1.0, 1.3)


def table(sizes, rows=400, seed=0):
    rng = np.random.default_rng(seed)
    columns = {f"a{i}": rng.integers(0, n, rows) % n for i, n in enumerate(sizes)}
    return columns, ek.Domain.from_sizes(sizes)


def histogram(columns, domain):
    codes = np.ravel_multi_index([columns[name] for name in domain.names], domain.sizes)
    return np.bincount(codes, minlength=int(np.prod(domain.sizes))).astype(float)


def vector_case(make_strategy, budget, sizes=(32,)):
    columns, domain = table(sizes)
    W = Prefix(int(np.prod(sizes)))
    truth = W @ histogram(columns, domain)
    strategy = make_strategy(W)

    def run(seed):
        session = ek.protect(columns, domain, budget, seed=seed)
        estimate = strategy.reconstruct(strategy.measure(session.source, budget))
        return estimate, W, truth

    return run


def marginal_case(select, budget):
    columns, domain = table([3, 4, 2])
    cube = histogram(columns, domain).reshape(domain.sizes)
    strategy = select(domain)

    def run(seed):
        session = ek.protect(columns, domain, budget, seed=seed)
        estimate = strategy.reconstruct(strategy.measure(session.source, budget))
        truth = np.concatenate([cube.sum(axis=tuple(i for i in range(3) if i not in a)).ravel()
                                for a in estimate.default_workload()])
        return estimate, None, truth

    return run


def query_case(budget):
    columns, domain = table([3, 4, 2])
    cube = histogram(columns, domain).reshape(domain.sizes)
    queries = [((0, 1), Prefix(12)), ((2,), np.array([[1.0, -1.0]])), ((1, 0), np.eye(12)[:5])]
    strategy = query_smasher(domain, queries)
    truth = np.concatenate([Prefix(12) @ cube.sum(axis=2).ravel(), [cube.sum(axis=(0, 1)) @ [1.0, -1.0]],
                            cube.sum(axis=2).T.ravel()[:5]])

    def run(seed):
        session = ek.protect(columns, domain, budget, seed=seed)
        return strategy.reconstruct(strategy.measure(session.source, budget)), None, truth

    return run


CASES = {
    "Identity-laplace": vector_case(lambda W: identity(32), ek.PureDP(1)),
    "HB-laplace": vector_case(lambda W: hb(256), ek.PureDP(1), sizes=(256,)),  # a tree: up to 128 cells HB is Identity
    "HB-gaussian": vector_case(lambda W: hb(256).with_noise("gaussian"), ek.ZCDP(0.5), sizes=(256,)),
    "HDMM-laplace": vector_case(lambda W: hdmm(W, noise="laplace", seed=0), ek.PureDP(1)),
    "HDMM-gaussian-2d": vector_case(lambda W: hdmm(W, noise="gaussian", seed=0), ek.ZCDP(0.5), sizes=(4, 8)),
    "ResidualPlanner": marginal_case(lambda d: residual_planner(d, [(0, 1), (1, 2), (0, 2)]), ek.ZCDP(0.5)),
    "QuerySmasher": query_case(ek.ZCDP(0.5)),
}


def coverages(run) -> dict[tuple[float, float], np.ndarray]:
    """Per run, the fraction of answers covered, for every (level, width factor)."""
    out = {(level, scale): np.empty(RUNS) for level in LEVELS for scale in SCALES}
    for r in range(RUNS):
        estimate, W, truth = run(1000 + r)
        for level in LEVELS:
            found = estimate.intervals(W, level)
            half = found.halfwidths
            for scale in SCALES:
                inside = np.abs(truth - found.answers) <= scale * half
                out[level, scale][r] = inside.mean()
    return out


def covers_at(fractions: np.ndarray, level: float) -> bool:
    """Is the mean coverage within 4 standard errors of ``level``?"""
    error = max(fractions.std(ddof=1), 1e-3) / np.sqrt(fractions.size)
    return abs(fractions.mean() - level) <= 4 * error


@pytest.mark.parametrize("name", list(CASES))
def test_intervals_cover_at_their_level_and_the_test_rejects_wrong_widths(name):
    found = coverages(CASES[name])
    for level in LEVELS:
        assert covers_at(found[level, 1.0], level), (name, level, found[level, 1.0].mean())
        assert not covers_at(found[level, 0.7], level), (name, level, "0.7x", found[level, 0.7].mean())
        assert not covers_at(found[level, 1.3], level), (name, level, "1.3x", found[level, 1.3].mean())


def test_sound_bound_intervals_cover_at_least_their_level():
    run = CASES["HB-laplace"]
    covered = []
    for r in range(60):
        estimate, W, truth = run(5000 + r)
        found = estimate.intervals(W, 0.9, method="bound")
        assert found.method.startswith("sound bound")
        covered.append(found.covers(truth).mean())
    assert np.mean(covered) >= 0.9
