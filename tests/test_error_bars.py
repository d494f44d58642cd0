"""Error bars: the least-squares covariance against dense algebra, and the interval laws against closed forms."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.operators.matrix import AllRange, Dense, Identity, Intervals, Kronecker, Total, VStack
from ektelo_ng.operators import covariance
from ektelo_ng.operators.estimate import VectorEstimate
from ektelo_ng.operators.inference import least_squares
from ektelo_ng.operators.confidence import (
    bound_halfwidths, central_probability, chernoff_factor, laplace_halfwidth, normal_halfwidths,
)
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.operators.measurement import Measurement
from ektelo_ng.operators.selection import classic


def dense_variances(measurements, W):
    """diag(W G^+ W^T) with G = sum M^T M / sigma^2, all dense."""
    G = sum(m.matrix.dense().T @ np.diag(np.broadcast_to(m.weights, m.answers.shape) ** 2) @ m.matrix.dense()
            for m in measurements)
    Wd = W.dense()
    return np.einsum("ij,jk,ik->i", Wd, np.linalg.pinv(G), Wd)


def measured(A, sd, noise="laplace", seed=0):
    rng = np.random.default_rng(seed)
    return Measurement(A, rng.normal(size=A.shape[0]), sd, noise)


def test_single_laplace_matches_its_closed_form():
    for x in (0.1, 1.0, 4.0):
        assert central_probability(x, np.array([1.0]), 0.0) == pytest.approx(1 - math.exp(-x), abs=1e-9)
    assert laplace_halfwidth(np.array([2.0]), 0.0, 0.95) == pytest.approx(2.0 * math.log(20), rel=1e-8)


def test_sum_of_two_laplace_matches_its_closed_form():
    # density (1 + |s|) exp(-|s|) / 4, so P(|S| <= x) = 1 - (1 + x / 2) exp(-x)
    for x in (0.5, 2.0, 5.0):
        assert central_probability(x, np.array([1.0, 1.0]), 0.0) == pytest.approx(1 - (1 + x / 2) * math.exp(-x), abs=1e-9)


def test_gaussian_part_alone_is_normal():
    assert central_probability(1.959963984540054, np.array([]), 4.0 / 4.0) == pytest.approx(0.95, abs=1e-9)
    assert normal_halfwidths(np.array([4.0]), 0.95)[0] == pytest.approx(2 * 1.959963984540054)


def test_many_small_laplace_terms_approach_the_normal_quantile():
    q = laplace_halfwidth(np.full(400, 1.0), 0.0, 0.9)
    assert q / math.sqrt(800) == pytest.approx(1.6448536, rel=2e-3)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=12), st.floats(0.0, 5.0), st.sampled_from([0.5, 0.9, 0.95, 0.99]))
def test_chernoff_bound_is_never_narrower_than_the_exact_interval(scales, gaussian, level):
    scales = np.array(scales)
    variance = 2 * float(scales @ scales) + gaussian
    exact = laplace_halfwidth(scales, gaussian, level)
    assert bound_halfwidths(np.array([variance]), level)[0] >= exact
    share = 2 * float(np.max(scales)) ** 2 / variance  # the largest Laplace term's share of the variance
    tightened = bound_halfwidths(np.array([variance]), level, np.array([share]))[0]
    assert exact <= tightened <= bound_halfwidths(np.array([variance]), level)[0] * (1 + 1e-8)
    assert central_probability(exact, scales, gaussian) == pytest.approx(level, abs=1e-7)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.floats(0.01, 10.0), st.sampled_from([0.9, 0.95, 0.99]))
def test_the_bound_tightened_by_the_largest_share_holds_for_many_equal_terms(count, scale, level):
    """The case the share tightens most: many equal Laplace terms (the law nearly normal), against the exact law:
    never narrower, and from 100 terms within 1.6x of exact (the Gaussian Chernoff bound: 1.49x at 90%, 1.39x at 95%)."""
    scales = np.full(count, scale)
    variance = 2 * count * scale**2
    exact = laplace_halfwidth(scales, 0.0, level)
    tightened = bound_halfwidths(np.array([variance]), level, np.array([1 / count]))[0]
    assert exact <= tightened
    assert count < 100 or tightened <= 1.6 * exact


def test_chernoff_factor_solves_its_equation():
    k = chernoff_factor(0.95)
    u = np.linspace(1e-6, 1 - 1e-6, 200001)
    assert 2 * np.exp(np.min(-u * k + u * u / (1 - u * u))) == pytest.approx(0.05, rel=1e-4)


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, "0.9", True])
def test_levels_outside_zero_one_are_refused(level):
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        normal_halfwidths(np.array([1.0]), level)


def test_kronecker_path_matches_dense_on_a_kronecker_workload():
    A = Kronecker([classic.hb((12,)).matrix, Identity(5)]) * 0.5
    W = VStack([Kronecker([Prefix(12), Total(5)]), Kronecker([Identity(12), Prefix(5)]) * 3.0])
    m = [measured(A, 2.0)]
    cov = covariance.LeastSquaresCovariance(m, 60)
    assert cov.method == "kronecker"
    np.testing.assert_allclose(cov.variances(W), dense_variances(m, W), rtol=1e-9)


def test_interval_factors_take_the_cumulative_sum_path_and_match_dense():
    A = classic.hb((40,)).matrix
    lo = np.array([0, 3, 17, 39, 0])
    m = [measured(A, 1.3)]
    for W in (AllRange(40), Intervals(40, lo, np.array([39, 3, 30, 39, 0])), Kronecker([AllRange(40)])):
        np.testing.assert_allclose(covariance.LeastSquaresCovariance(m, 40).variances(W), dense_variances(m, W),
                                   rtol=1e-9)


def test_kronecker_path_with_a_workload_without_that_structure():
    A = Kronecker([classic.hb((12,)).matrix, Identity(5)])
    W = Dense(np.random.default_rng(1).normal(size=(7, 60)))
    m = [measured(A, 1.5)]
    np.testing.assert_allclose(covariance.LeastSquaresCovariance(m, 60).variances(W), dense_variances(m, W), rtol=1e-9)


def test_dense_path_matches_with_several_measurements_and_per_row_noise():
    m = [measured(classic.h2((40,)).matrix, 1.0), measured(Prefix(40), np.linspace(1, 3, 40), "gaussian"),
         measured(Total(40), 0.5)]
    W = VStack([Prefix(40), Identity(40)])
    cov = covariance.LeastSquaresCovariance(m, 40)
    assert cov.method == "dense"
    np.testing.assert_allclose(cov.variances(W), dense_variances(m, W), rtol=1e-8)


def test_iterative_path_matches_dense(monkeypatch):
    monkeypatch.setattr(covariance, "DENSE_LIMIT", 10)
    m = [measured(classic.h2((30,)).matrix, 1.0), measured(Identity(30), 2.0)]
    W = Prefix(30)
    cov = covariance.LeastSquaresCovariance(m, 30)
    assert cov.method == "iterative"
    np.testing.assert_allclose(cov.variances(W), dense_variances(m, W), rtol=1e-6)


@pytest.mark.parametrize("measurements", [
    [measured(classic.hb((20,)).matrix, 2.0)],
    [measured(classic.h2((20,)).matrix, 1.0), measured(Identity(20), 3.0, "gaussian")],
])
def test_noise_coefficients_reproduce_the_estimate_error(measurements):
    """c^T e, with e the unit-variance noise, is exactly the estimate's error on every query."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, 20).astype(float)
    noise = [rng.normal(size=m.answers.size) for m in measurements]
    noisy = [Measurement(m.matrix, m.matrix @ x + e * m.noise_std, m.noise_std, m.noise) for m, e in zip(measurements, noise)]
    W = Prefix(20)
    error = W @ least_squares(noisy) - W @ x
    c = np.vstack(list(covariance.LeastSquaresCovariance(noisy, 20).coefficients(W)))
    np.testing.assert_allclose(c @ np.concatenate(noise), error, atol=1e-8)
    np.testing.assert_allclose(np.sum(c * c, axis=1), dense_variances(noisy, W), rtol=1e-8)


def test_vector_estimate_reports_and_exports():
    m = measured(classic.hb((16,)).matrix, 2.0)
    estimate = VectorEstimate(least_squares([m]), [m], workload=Prefix(16))
    assert np.asarray(estimate).shape == (16,)
    found = estimate.intervals(level=0.9)
    assert found.method.startswith("exact")
    assert np.all(found.lower < found.answers) and np.all(found.answers < found.upper)
    text = estimate.to_csv()
    assert text.splitlines()[0] == "query,answer,variance,std,lower,upper,level,method"
    assert len(text.splitlines()) == 17


def test_estimate_without_measurements_says_why():
    estimate = VectorEstimate(np.ones(4), note="multiplicative weights: no error bars")
    assert np.all(np.isnan(estimate.variances()))
    assert estimate.intervals().method == "unavailable: multiplicative weights: no error bars"
    assert '"variance": null' in estimate.to_json()


def test_wrong_workload_width_is_refused_clearly():
    m = measured(Identity(4), 1.0)
    with pytest.raises(ValueError, match="5 columns but the estimate has 4 cells"):
        VectorEstimate(m.answers, [m]).variances(Identity(5))


def test_every_catalog_plan_has_the_one_signature():
    """plan(source, workload, budget, *, shape=None, **params) -> an Estimate, for every catalog entry."""
    import inspect
    import typing

    from ektelo_ng import plans
    from ektelo_ng.operators.estimate import Estimate

    for name, plan in plans.catalog.items():
        parameters = list(inspect.signature(plan).parameters.values())
        assert [p.name for p in parameters[:3]] == ["source", "workload", "budget"], name
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters[:3]), name
        rest = {p.name: p for p in parameters[3:]}
        assert rest["shape"].default is None, name
        assert all(p.kind is p.KEYWORD_ONLY for p in rest.values()), name
        assert set(plans.info[name].defaults) <= set(rest), name
        returned = typing.get_type_hints(plan)["return"]
        assert issubclass(returned, Estimate), (name, returned)
        assert "rho" not in rest, name  # budget shares have their own names


def _session(sizes, budget, seed=0):
    import ektelo_ng as ek

    rng = np.random.default_rng(seed)
    names = [f"a{i}" for i in range(len(sizes))]
    columns = {name: rng.integers(0, n, 300) for name, n in zip(names, sizes)}
    return ek.protect(columns, dict(zip(names, sizes)), budget, seed=seed), columns


def test_data_dependent_plans_say_what_their_error_bars_account_for():
    import ektelo_ng as ek
    from ektelo_ng import plans
    session, _ = _session([32], ek.PureDP(3))
    W = Prefix(32)
    dawa = plans.catalog["DAWA"](session.source, W, ek.PureDP(1))
    assert "over the partition, chosen privately" in dawa.note and "bound on the bias" in dawa.note
    sound = dawa.intervals(W)
    assert sound.method.startswith("sound:") and np.all(np.isfinite(sound.lower))
    noise = dawa.intervals(W, method="noise")
    assert noise.method.startswith("noise only:") and "excludes the bias of the partition" in noise.method
    assert np.all(noise.upper - noise.lower <= sound.upper - sound.lower + 1e-9)  # the bias bound only widens
    mwem = plans.catalog["MWEM"](session.source, W, ek.PureDP(1), records=300)
    assert np.all(np.isnan(mwem.variances(W))) and mwem.intervals(W).method.startswith("unavailable")
    assert len(mwem.selected) == 10 and len(mwem.measurements) == 10
    hb = plans.catalog["HB"](session.source, W, ek.PureDP(1))
    assert hb.note.startswith("least squares") and hb.intervals(W).method.startswith("exact")


def test_marginal_estimates_answer_items_in_the_order_asked_with_covariances():
    import ektelo_ng as ek
    from ektelo_ng.operators.selection import residual_planner

    session, columns = _session([3, 4, 2], ek.ZCDP(1))
    strategy = residual_planner(session.source.domain, [("a0", "a1"), ("a1", "a2")])
    estimate = strategy.reconstruct(strategy.measure(session.source, ek.ZCDP(1)))
    marginal = estimate.marginal(("a0", "a1"))  # domain order: a0 major
    np.testing.assert_allclose(estimate.answer([("a1", "a0")]), marginal.T.ravel())
    Q = np.array([[1.0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])  # a1 = 0, a0 in {0, 1}
    answer = estimate.answer([(("a1", "a0"), Q)])
    assert answer[0] == pytest.approx(marginal[0, 0] + marginal[1, 0])
    covariance = estimate.covariance((0, 1))
    expected = covariance[0, 0] + covariance[4, 4] + 2 * covariance[0, 4]  # cells (0,0) and (1,0) in C order
    assert estimate.variances([(("a1", "a0"), Q)])[0] == pytest.approx(expected)
    assert estimate.labels([("a1",)]) == ["a1[0]", "a1[1]", "a1[2]", "a1[3]"]
    with pytest.raises(ValueError, match="unknown attribute 'age'"):
        estimate.answer([("age",)])
    rows = estimate.records()
    assert len(rows) == 12 + 8 and all(r["method"] == "exact (Gaussian)" for r in rows)


def test_domains_may_be_mappings_of_names_to_sizes():
    from ektelo_ng.operators.domains import as_domain
    from ektelo_ng.operators.selection import residual_planner

    assert as_domain({"age": 100, "sex": ["F", "M"]}).sizes == (100, 2)
    assert residual_planner({"age": 10, "sex": 2}, [("age", "sex")]).num_queries == 20
    with pytest.raises(TypeError, match="mapping of names to sizes"):
        as_domain("age")


def test_a_strategy_serves_where_its_matrix_is_expected():
    import ektelo_ng as ek
    from ektelo_ng.operators import measure
    from ektelo_ng.operators.selection import hb as select_hb

    session, _ = _session([16], ek.PureDP(1))
    strategy = select_hb(16)
    assert ek.error.rmse(Prefix(16), strategy) == ek.error.rmse(Prefix(16), strategy.matrix)
    measured = measure.laplace(session.source.vectorize(), strategy, 1)
    assert measured.matrix is strategy.matrix and measured.noise == "laplace"
    with pytest.raises(TypeError, match="a kernel Matrix or a strategy"):
        measure.laplace(session.source.vectorize(), np.eye(16), 1)


@pytest.mark.parametrize("sd", [1.0, 1e3, 1e4])
def test_a_known_total_beside_noisy_counts_keeps_their_variance(sd):
    """G = A^T D A squares the condition number: with a total known to 1e-4 beside counts of noise sd 1e4,
    a pseudo-inverse of G itself lost the counts' variance to rounding (it reported 2e-12)."""
    from ektelo_ng.operators.measurement import known_total

    n = 64
    measured = [measured_at := Measurement(Identity(n), np.zeros(n), sd, "laplace"), known_total(n, 0.0)]
    assert measured_at.noise == "laplace"
    variances = covariance.LeastSquaresCovariance(measured, n).variances(Identity(n))
    np.testing.assert_allclose(variances, sd**2 * (1 - 1 / n), rtol=1e-6)


def test_review_findings_zcdp_variances_empty_workloads_identity_on_kronecker_and_numpy_levels():
    import ektelo_ng as ek
    from ektelo_ng.operators.matrix import Dense

    strategy = classic.h2((64,)).with_noise("gaussian")
    budget = ek.ZCDP(0.5)
    simulated = strategy.simulate(np.ones(64), budget, seed=0)
    np.testing.assert_allclose(strategy.at(budget).variances(Prefix(64)), simulated.variances(Prefix(64)), rtol=1e-9)
    assert simulated.variances(Dense(np.zeros((0, 64)))).shape == (0,)
    kron = classic.h2((8, 16)).simulate(np.ones(128), ek.PureDP(1), seed=0)
    np.testing.assert_allclose(kron.variances(Identity(128)), kron.variances(Dense(np.eye(128))), rtol=1e-9)
    assert normal_halfwidths(np.array([1.0]), np.float32(0.9))[0] == pytest.approx(1.6448536, rel=1e-6)
    total_only = VectorEstimate(np.ones(8), [Measurement(Total(8), np.array([8.0]), 1.0, "laplace")])
    assert np.all(total_only.variances(Dense(np.array([[0.1, -0.3, 0.2, 0, 0, 0, 0, 0]]))) >= 0)
