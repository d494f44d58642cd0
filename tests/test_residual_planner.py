"""ResidualPlanner selection: paper tables, closed forms, optimality certificates, Strategy API."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.privacy import ZCDP
from ektelo_ng.operators.residual import (
    ResidualReconstruction,
    SubsetFamily,
    dense_marginal,
    dense_residual,
    dense_residual_noise,
    residual_answers,
)
from ektelo_ng.operators.selection.residual_planner import (
    ResidualProblem,
    residual_planner,
    solve_max_variance,
)


def upto(d: int, k: int, empty: bool = True) -> list[tuple[int, ...]]:
    return ([()] if empty else []) + [c for j in range(1, k + 1) for c in itertools.combinations(range(d), j)]


def kway(d: int, k: int) -> list[tuple[int, ...]]:
    return list(itertools.combinations(range(d), k))


# ---------------------------------------------------------------------------------------
# Brute force, written from the formulas and independent of the implementation
# ---------------------------------------------------------------------------------------
def brute_closure(workload):
    return sorted({c for w in workload for r in range(len(w) + 1) for c in itertools.combinations(w, r)})


def brute_p(sizes, a):
    return math.prod((sizes[i] - 1) / sizes[i] for i in a)


def brute_coefficients(sizes, workload, closure):
    """C[W, A] = p_A prod_{j in W \\ A} n_j^-2 for A subset W."""
    c = np.zeros((len(workload), len(closure)))
    for k, w in enumerate(workload):
        for j, a in enumerate(closure):
            if set(a) <= set(w):
                c[k, j] = brute_p(sizes, a) * math.prod(sizes[i] ** -2.0 for i in w if i not in a)
    return c


def brute_max_dual(sizes, workload, bounds):
    """max_{mu >= 0} 2 sum_A sqrt(p_A (C^T mu)_A) - b^T mu: the optimal pcost (weak duality)."""
    closure = brute_closure(workload)
    c = brute_coefficients(sizes, workload, closure)
    p = np.array([brute_p(sizes, a) for a in closure])

    def dual(mu):
        return 2 * np.sum(np.sqrt(p * (c.T @ mu))) - bounds @ mu

    def negative(theta):  # mu = exp(theta) keeps mu > 0 and the dual smooth
        mu = np.exp(theta)
        g = c.T @ mu
        grad_mu = c @ np.sqrt(p / g) - bounds
        return -dual(mu), -grad_mu * mu

    best = -np.inf
    for start in (np.zeros(len(workload)), np.full(len(workload), -3.0)):
        res = scipy.optimize.minimize(negative, start, jac=True, method="BFGS", options={"gtol": 1e-12, "maxiter": 5000})
        best = max(best, dual(np.exp(res.x)))
    return best


def brute_variances(strategy, sizes, workload):
    scales = strategy.noise_scales()
    return np.array(
        [
            sum(
                scales[a] * brute_p(sizes, a) * math.prod(sizes[i] ** -2.0 for i in w if i not in a)
                for r in range(len(w) + 1)
                for a in itertools.combinations(w, r)
            )
            for w in workload
        ]
    )


# ---------------------------------------------------------------------------------------
# Reference numbers from the paper (pcost 1; the paper rounds to 3 decimals)
# ---------------------------------------------------------------------------------------
SYNTHETIC = {  # d: (RMSE, max variance), n = 10, all <= 3-way marginals incl. the empty set
    2: (1.379, 3.306),
    6: (4.275, 26.904),
    10: (9.348, 105.031),
    15: (17.378, 332.769),
    20: (26.916, 768.941),
    30: (49.713, 2540.440),
    50: (107.258, 11597.037),
    100: (303.216, 91960.917),
}


@pytest.mark.parametrize("d", sorted(SYNTHETIC))
def test_synthetic_tables_9_to_12(d):
    rmse, max_var = SYNTHETIC[d]
    workload = upto(d, 3)
    assert residual_planner([10] * d, workload, loss="sum").rmse() == pytest.approx(rmse, abs=1e-3)
    assert residual_planner([10] * d, workload, loss="max").max_variance() == pytest.approx(max_var, abs=1e-3)


@pytest.mark.slow
def test_synthetic_d200_rmse():
    assert residual_planner([10] * 200, upto(200, 3)).rmse() == pytest.approx(855.330, abs=1e-3)


@pytest.mark.parametrize(
    "n, rmse, max_var", [(2, 1.890, 4.148), (8, 3.156, 15.643), (64, 3.407, 24.345), (1024, 3.251, 25.893)]
)
def test_d5_tables_9_and_10(n, rmse, max_var):
    assert residual_planner([n] * 5, upto(5, 3)).rmse() == pytest.approx(rmse, abs=1e-3)
    assert residual_planner([n] * 5, upto(5, 3), loss="max").max_variance() == pytest.approx(max_var, abs=1e-3)


REAL = {
    "cps": [100, 50, 7, 4, 2],
    "adult": [100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2],
    "loans": [101, 101, 101, 101, 3, 8, 36, 6, 51, 4, 5, 15],
}
# workload: 1..5-way marginals, then all <= 3-way; (RMSE table 15-17, max variance table 19-21 Gurobi)
REAL_TABLES = {
    "cps": (
        [1.744, 2.035, 2.048, 1.627, 1.000, 2.276],
        [4.346, 7.897, 7.706, 4.141, 1.000, 13.216],
    ),
    "adult": (
        [3.047, 6.359, 10.515, 14.656, 17.844, 10.665],
        [12.047, 67.802, 236.843, 575.213, 1030.948, 253.605],
    ),
    "loans": (
        [2.875, 5.634, 8.702, 11.267, 12.678, 8.876],
        [10.640, 52.217, 156.638, 320.778, 474.243, 180.817],
    ),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_dataset_tables_15_to_21(name):
    sizes = REAL[name]
    d = len(sizes)
    workloads = [kway(d, k) for k in (1, 2, 3, 4, 5)] + [upto(d, 3)]
    rmses, max_vars = REAL_TABLES[name]
    for workload, rmse, max_var in zip(workloads, rmses, max_vars):
        assert residual_planner(sizes, workload).rmse() == pytest.approx(rmse, abs=1e-3)
        assert residual_planner(sizes, workload, loss="max").max_variance() == pytest.approx(max_var, abs=1e-3)


def test_appendix_c1_all_marginals_of_five_ternary_attributes():
    strategy = residual_planner([3] * 5, upto(5, 5), loss="max")
    np.testing.assert_allclose(strategy.workload_variances(), 7.59375, rtol=1e-9)
    expected = [7.594, 10.125, 13.5, 18, 24, 32]
    for a, s in strategy.noise_scales().items():
        assert s == pytest.approx(expected[len(a)], abs=1e-3)


def test_appendix_c2_weighted_max_variance():
    """Weight 3 on the 5-way marginal: minimise max_W w_W Var(W) (weights multiply)."""
    workload = upto(5, 5)
    weights = [3.0 if len(w) == 5 else 1.0 for w in workload]
    strategy = residual_planner([3] * 5, workload, loss="max", weights=weights)
    expected_var = {5: 2.718, 4: 5.528}
    for w, v in zip(workload, strategy.workload_variances()):
        assert v == pytest.approx(expected_var.get(len(w), 8.154), abs=1e-3)
    assert strategy.objective() == pytest.approx(8.154, abs=1e-3)
    # the paper's list mislabels the sizes; by |A| = 0..5 the scales are:
    expected_scale = [8.154, 10.871, 14.495, 19.327, 12.477, 4.159]
    for a, s in strategy.noise_scales().items():
        assert s == pytest.approx(expected_scale[len(a)], abs=1e-3)


# ---------------------------------------------------------------------------------------
# Optimality beyond the tables
# ---------------------------------------------------------------------------------------
def test_max_variance_closed_form_for_downward_closed_workloads():
    """s_A = t prod_{i in A} (n_i + 1)/n_i with t = sum_closure prod (n_i - 1)/(n_i + 1)."""
    rng = np.random.default_rng(0)
    for _ in range(5):
        d = int(rng.integers(2, 7))
        sizes = [int(n) for n in rng.integers(2, 30, size=d)]
        tops = [tuple(sorted(rng.choice(d, size=int(rng.integers(1, d + 1)), replace=False))) for _ in range(3)]
        workload = brute_closure(tops)
        t = sum(math.prod((sizes[i] - 1) / (sizes[i] + 1) for i in a) for a in workload)
        strategy = residual_planner(sizes, workload, loss="max")
        for a, s in strategy.noise_scales().items():
            assert s == pytest.approx(t * math.prod((sizes[i] + 1) / sizes[i] for i in a), rel=1e-9)
        np.testing.assert_allclose(strategy.workload_variances(), t, rtol=1e-9)


def test_max_variance_matches_independent_dual_on_random_workloads():
    """Weak duality: the dual optimum (solved independently) is <= the optimum <= our value."""
    rng = np.random.default_rng(1)
    for _ in range(12):
        d = int(rng.integers(2, 6))
        sizes = [int(n) for n in rng.integers(2, 9, size=d)]
        candidates = [c for c in upto(d, d) if c]
        workload = [candidates[i] for i in rng.choice(len(candidates), size=min(5, len(candidates)), replace=False)]
        weights = np.exp(rng.normal(size=len(workload)))
        strategy = residual_planner(sizes, workload, loss="max", weights=weights)
        value = strategy.objective()
        dual = brute_max_dual(sizes, workload, 1.0 / weights)
        assert dual <= value * (1 + 1e-9)
        assert value <= dual * (1 + 1e-6)
        # the reported figures agree with the brute-force variance formula
        np.testing.assert_allclose(strategy.workload_variances(), brute_variances(strategy, sizes, workload))
        assert value == pytest.approx(np.max(weights * brute_variances(strategy, sizes, workload)))
        assert strategy.pcost() == pytest.approx(1.0)


def test_max_solver_certificate_on_larger_random_problems():
    rng = np.random.default_rng(2)
    d = 25
    sizes = [int(n) for n in rng.integers(2, 20, size=d)]
    pool = kway(d, 3) + kway(d, 2)
    workload = [pool[i] for i in rng.choice(len(pool), size=400, replace=False)]
    weights = np.exp(2 * rng.normal(size=len(workload)))
    problem = ResidualProblem(Domain.from_sizes(sizes), workload)
    solution = solve_max_variance(problem, problem.workload_ids, 1.0 / weights)
    assert solution.value - solution.lower_bound <= 1e-9 * solution.value
    assert np.all(solution.multipliers >= 0)
    variances = problem.variances(solution.scales, problem.workload_ids)
    assert np.max(weights * variances) == pytest.approx(solution.value, rel=1e-9)
    assert np.sum(problem.p / solution.scales) == pytest.approx(1.0)


def test_max_solver_with_weights_over_many_orders_of_magnitude():
    rng = np.random.default_rng(6)
    sizes = [int(n) for n in rng.integers(2, 40, size=12)]
    workload = upto(12, 3)
    problem = ResidualProblem(Domain.from_sizes(sizes), workload)
    for spread in (4.0, 8.0):
        weights = np.exp(spread * rng.normal(size=len(workload)))
        solution = solve_max_variance(problem, problem.workload_ids, 1.0 / weights)
        assert solution.value - solution.lower_bound <= 1e-9 * solution.value
        assert solution.iterations <= 30
        variances = problem.variances(solution.scales, problem.workload_ids)
        assert np.max(weights * variances) == pytest.approx(solution.value, rel=1e-9)


def test_raise_to_bounds_stays_feasible_and_improves():
    from ektelo_ng.operators.selection.residual_planner import _raise_to_bounds

    rng = np.random.default_rng(7)
    problem = ResidualProblem(Domain.from_sizes([3, 4, 5, 6]), upto(4, 2))
    zeta = problem.incidence.zeta()
    ids = problem.workload_ids
    beta = rng.uniform(1.0, 100.0, size=len(ids))
    a = rng.uniform(0.5, 2.0, size=len(problem.family))
    t = rng.uniform(0.1, 1.0, size=len(problem.family))
    t *= np.min(beta / (zeta @ t)[ids])
    raised = _raise_to_bounds(t, zeta, zeta.T.tocsr(), ids, beta)
    assert np.all((zeta @ raised)[ids] <= beta * (1 + 1e-12))
    assert np.all(raised >= t)
    assert np.sum(a / raised) < np.sum(a / t)


def test_max_solver_rejects_unbounded_programs():
    problem = ResidualProblem(Domain.from_sizes([3, 4]), [(0, 1), (0,)])
    only_one_way = problem.workload_ids[1:]
    with pytest.raises(ValueError, match="unbounded"):
        solve_max_variance(problem, only_one_way, np.ones(1))
    with pytest.raises(ValueError, match="positive"):
        solve_max_variance(problem, problem.workload_ids, np.array([1.0, 0.0]))


def test_sum_closed_form_is_optimal():
    rng = np.random.default_rng(3)
    sizes = [3, 4, 2, 5]
    workload = [(0, 1), (1, 2, 3), (0,), (2, 3)]
    weights = np.array([1.0, 0.5, 4.0, 2.0])
    strategy = residual_planner(sizes, workload, weights=weights)
    cells = np.array([math.prod(sizes[i] for i in w) for w in workload])
    best = strategy.expected_error()
    assert best == pytest.approx(np.sum(weights * cells * brute_variances(strategy, sizes, workload)))
    closure = brute_closure(workload)
    c = brute_coefficients(sizes, workload, closure)
    p = np.array([brute_p(sizes, a) for a in closure])
    s_opt = np.array([strategy.noise_scales()[a] for a in closure])
    for _ in range(200):
        s = s_opt * np.exp(0.3 * rng.normal(size=len(closure)))
        s *= np.sum(p / s)  # back to pcost 1
        assert np.sum(weights * cells * (c @ s)) >= best * (1 - 1e-12)
    # closed form: loss = S^2 with S = sum_A sqrt(v_A p_A)
    v = (weights * cells) @ c
    assert best == pytest.approx(np.sum(np.sqrt(v * p)) ** 2)


def test_weights_multiply_the_variance():
    workload = [(0,), (1,)]
    plain = residual_planner([4, 4], workload, loss="sum")
    heavy = residual_planner([4, 4], workload, loss="sum", weights=[10.0, 1.0])
    assert heavy.variance((0,)) < plain.variance((0,)) < plain.variance((1,)) * (1 + 1e-12) < heavy.variance((1,))
    heavy_max = residual_planner([4, 4], workload, loss="max", weights=[4.0, 1.0])
    v0, v1 = heavy_max.variance((0,)), heavy_max.variance((1,))
    assert 4.0 * v0 == pytest.approx(v1)
    assert heavy_max.objective() == pytest.approx(v1)


# ---------------------------------------------------------------------------------------
# General convex losses
# ---------------------------------------------------------------------------------------
def test_callable_linear_loss_reproduces_the_closed_form():
    sizes = [3, 4, 2, 5]
    workload = [(0, 1), (1, 2, 3), (0,), (2, 3)]
    cells = np.array([math.prod(sizes[i] for i in w) for w in workload], dtype=float)
    closed = residual_planner(sizes, workload, loss="sum")
    general = residual_planner(sizes, workload, loss=lambda v: (float(cells @ v), cells))
    assert general.expected_error() == pytest.approx(closed.expected_error(), rel=1e-6)
    assert general.pcost() == pytest.approx(1.0)


def test_callable_quadratic_loss_satisfies_kkt():
    """min sum_W (#cells Var_W)^2 at pcost 1: stationarity C^T grad = nu p / s^2 for all A."""
    sizes = [3, 4, 2, 5]
    workload = [(0, 1), (1, 2, 3), (0,), (2, 3), (0, 3)]
    cells = np.array([math.prod(sizes[i] for i in w) for w in workload], dtype=float)

    def loss(v):
        return float(np.sum((cells * v) ** 2)), 2 * cells**2 * v

    strategy = residual_planner(sizes, workload, loss=loss)
    closure = brute_closure(workload)
    c = brute_coefficients(sizes, workload, closure)
    p = np.array([brute_p(sizes, a) for a in closure])
    s = np.array([strategy.noise_scales()[a] for a in closure])
    ratio = (c.T @ loss(c @ s)[1]) * s**2 / p
    assert np.ptp(ratio) <= 1e-5 * np.mean(ratio)
    assert strategy.objective() <= float(loss(residual_planner(sizes, workload).workload_variances())[0])


# ---------------------------------------------------------------------------------------
# Strategy API
# ---------------------------------------------------------------------------------------
def test_strategy_figures_and_scaling():
    domain = Domain.from_sizes([3, 4, 5], names=["a", "b", "c"])
    strategy = residual_planner(domain, [("a", "b"), ("c",), ("b", "c")])
    assert strategy.noise == "gaussian"
    assert strategy.workload == ((0, 1), (2,), (1, 2))
    assert strategy.num_queries == 12 + 5 + 20
    variances = strategy.workload_variances()
    assert strategy.expected_error() == pytest.approx(12 * variances[0] + 5 * variances[1] + 20 * variances[2])
    assert strategy.rmse() == pytest.approx(math.sqrt(strategy.expected_error() / 37))
    assert strategy.max_variance() == pytest.approx(variances.max())
    assert strategy.objective() == pytest.approx(strategy.expected_error())
    assert strategy.pcost() == pytest.approx(1.0)
    assert set(strategy.residual_sets) == set(brute_closure([(0, 1), (2,), (1, 2)]))
    assert strategy.variance(("b", "a")) == pytest.approx(variances[0])
    assert strategy.variance("b") > 0  # in the closure, not in the workload
    with pytest.raises(KeyError):
        strategy.variance(("a", "c"))

    four = strategy.at(ZCDP(2))  # pcost 4
    np.testing.assert_allclose(four.variances(), strategy.variances() / 4)
    assert four.expected_error() == pytest.approx(strategy.expected_error() / 4)
    assert four.max_variance() == pytest.approx(strategy.max_variance() / 4)


def test_budgets_at_which_the_strategy_is_read():
    from ektelo_ng.kernel.privacy import ZCDP, PureDP
    from ektelo_ng.operators.budget import ApproxDP
    from ektelo_ng.operators.privacy import zcdp_for_approx_dp

    strategy = residual_planner([3, 3], [(0, 1)])
    assert strategy.at(ZCDP(0.25)).factor == pytest.approx(2.0)  # pcost 0.5
    rho = float(zcdp_for_approx_dp(1.0, 1e-6).rho)
    assert strategy.at(ApproxDP(1.0, 1e-6)).factor == pytest.approx(1 / (2 * rho))
    for bad in (0.3, 1, (1.0, 1e-6), "1", True):
        with pytest.raises(ValueError, match="not a budget|bare pair"):
            strategy.at(bad)
    with pytest.raises(ValueError, match="pure"):
        strategy.at(PureDP(1))


def reconstruction(strategy, omegas):
    """Algorithm 2 on hand-made residual answers ``{A: omega_A}`` (names or positions), over the closure."""
    family = SubsetFamily.closure(strategy.residual_sets, len(strategy.domain))
    return ResidualReconstruction(strategy.domain, family, omegas)


def test_covariance_and_reconstruction_against_dense_gls():
    rng = np.random.default_rng(4)
    sizes = (2, 3, 4)
    workload = [(0, 1), (1, 2)]
    strategy = residual_planner(sizes, workload, loss="max", weights=[1.0, 2.0])
    scales = strategy.noise_scales()
    sets = list(scales)
    b = np.vstack([dense_residual(sizes, a) for a in sets])
    sigma = scipy.linalg.block_diag(*[scales[a] * dense_residual_noise(sizes, a) for a in sets])
    precision = np.linalg.inv(sigma)
    info_pinv = np.linalg.pinv(b.T @ precision @ b)
    omegas = {a: rng.normal(size=math.prod(sizes[i] - 1 for i in a)) for a in sets}
    recon = reconstruction(strategy, omegas)
    stacked = np.concatenate([omegas[a] for a in sets])
    for a in sets:
        q = dense_marginal(sizes, a)
        np.testing.assert_allclose(strategy.covariance(a), q @ info_pinv @ q.T, atol=1e-10)
        assert strategy.variance(a) == pytest.approx(np.diag(q @ info_pinv @ q.T)[0])
        blue = q @ info_pinv @ b.T @ precision @ stacked
        np.testing.assert_allclose(recon.marginal(a).ravel(), blue, atol=1e-10)


def test_noiseless_reconstruction_and_size_one_attributes():
    rng = np.random.default_rng(5)
    domain = Domain.from_sizes([3, 1, 4], names=["a", "one", "c"])
    strategy = residual_planner(domain, [("a", "one"), ("one", "c"), ("a", "c")])
    assert strategy.workload == ((0,), (2,), (0, 2))
    x = rng.integers(0, 10, size=domain.size).astype(float)
    omegas = {}
    for a in strategy.residual_sets:
        marginal = dense_marginal(domain.sizes, a) @ x
        omegas[tuple(domain.names[i] for i in a)] = residual_answers(marginal, [domain.sizes[i] for i in a])
    recon = reconstruction(strategy, omegas)
    both = recon.marginal(("one", "a"))
    assert both.shape == (1, 3)  # axes in the order asked for
    np.testing.assert_allclose(both.ravel(), dense_marginal(domain.sizes, (0,)) @ x)
    np.testing.assert_allclose(recon[("a", "c")].ravel(), dense_marginal(domain.sizes, (0, 2)) @ x)
    assert strategy.covariance(("a", "one")).shape == (3, 3)
    assert strategy.variance(("a", "one")) == pytest.approx(strategy.variance("a"))


def test_input_validation():
    with pytest.raises(ValueError, match="at least one"):
        residual_planner([3, 3], [])
    with pytest.raises(ValueError, match="out of range"):
        residual_planner([3, 3], [(0, 2)])
    with pytest.raises(ValueError, match="repeated"):
        residual_planner([3, 3], [(1, 1)])
    with pytest.raises(ValueError, match="weights"):
        residual_planner([3, 3], [(0,), (1,)], weights=[1.0])
    with pytest.raises(ValueError, match="positive"):
        residual_planner([3, 3], [(0,), (1,)], weights=[1.0, 0.0])
    with pytest.raises(ValueError, match="loss"):
        residual_planner([3, 3], [(0,)], loss="mean")
    with pytest.raises(ValueError, match="callable"):
        residual_planner([3, 3], [(0,)], loss=lambda v: (float(v.sum()), np.ones_like(v)), weights=[2.0])
    with pytest.raises(ValueError):
        residual_planner(Domain.from_sizes([3, 3], names=["a", "b"]), [("a", "z")])


def test_duplicate_marginals_count_twice_in_sum_and_once_in_max():
    once = residual_planner([3, 4], [(0, 1), (0,)])
    twice = residual_planner([3, 4], [(0, 1), (1, 0), (0,)])
    assert twice.num_queries == once.num_queries + 12
    assert twice.expected_error() > once.expected_error()
    assert residual_planner([3, 4], [(0, 1), (1, 0)], loss="max", weights=[1.0, 2.0]).objective() == pytest.approx(
        residual_planner([3, 4], [(0, 1)], loss="max", weights=[2.0]).objective()
    )
