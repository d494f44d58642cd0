"""QuerySmasher through the kernel: exact charge on projections only, the stacked requests' sensitivity,
noise-free answers, empirical variance against the prediction (with power against 0.7x and 1.3x), agreement
with the strategy's numpy simulation, and input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

import ektelo_ng as ek
from ektelo_ng.operators.matrix import Dense, Identity, Kronecker
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.operators.client import Handle
from ektelo_ng.operators.residual import dense_marginal
from ektelo_ng.operators.selection.query_smasher import QueryReconstruction, affine_queries, query_smasher as select
from ektelo_ng.plans import catalog, info
from ektelo_ng.operators.selection.query_smasher.hosts import host_matrix, measured_hosts
from ektelo_ng.plans.query_smasher import query_smasher

SIZES = {"a": 2, "b": 3, "c": 4}
#: a 2-way prefix, a 2-way affine with its attributes out of domain order, a 1-way marginal
WORKLOAD = [((0, 1), Kronecker([Prefix(2), Prefix(3)])), (("c", "b"), affine_queries(4, 3)), (("c",), Identity(4))]


def data(seed=0, rows=500):
    rng = np.random.default_rng(seed)
    return {name: rng.integers(0, size, rows) for name, size in SIZES.items()}


def true_answers(columns, domain, workload=WORKLOAD):
    """Every workload answer, densely: count each marginal in the item's attribute order, apply its matrix."""
    out = []
    for attributes, matrix in workload:
        names = [domain.names[a] if isinstance(a, int) else a for a in attributes]
        counts = np.zeros([domain[n].size for n in names])
        np.add.at(counts, tuple(columns[n] for n in names), 1)
        out.append(matrix.dense() @ counts.ravel())
    return np.concatenate(out)


def full_vector(columns, domain):
    counts = np.zeros(domain.sizes)
    np.add.at(counts, tuple(columns[n] for n in domain.names), 1)
    return counts


# ------------------------------------------------------------------ charge and projections
def test_the_kernel_charges_exactly_the_budget_and_only_projections_are_vectorized():
    session = ek.protect(data(), ek.Domain.from_dict(SIZES), ek.ZCDP("1/2"), seed=1)
    result = query_smasher(session.source, WORKLOAD, ek.ZCDP("1/2"))
    assert session.budget.spent == ek.ZCDP("1/2")
    charges = [e["charge"] for e in session.transcript() if e["op"] == "gaussian"]
    assert len(charges) == len(measured_hosts(result.strategy)) == 2  # one request per host
    lineage = session.lineage()
    vectors = [(node, a) for node, a in lineage.nodes(data=True) if a["kind"] == "vector"]
    assert len(vectors) == len(measured_hosts(result.strategy))
    for node, attributes in vectors:
        (parent,) = lineage.predecessors(node)
        assert lineage.edges[parent, node]["op"] == "vectorize"
        assert len(attributes["attributes"]) < len(SIZES)  # a marginal, never the full vector
    assert result.answers().shape == (6 + 6 + 4,)


def test_the_catalog_entry_runs_the_plan():
    session = ek.protect(data(), ek.Domain.from_dict(SIZES), ek.ZCDP(1), seed=2)
    result = catalog["QuerySmasher"](session.source, WORKLOAD, ek.ZCDP(1), **info["QuerySmasher"].defaults)
    assert session.budget.spent == ek.ZCDP(1) and result.variance().shape == (16,)


def check_host_requests(strategy, max_cells=10_000):
    """Every measured set on exactly one host; each host's request equals the dense stack of
    ``B_A'`` times an explicit marginalization of the host's cells; its squared L2 sensitivity as the
    kernel computes it (the same matrix classes) is the dense maximum column norm, never above the host's
    planned share ``sum 1/sigma^2``, and equal to it to the solver's tolerance (so unit noise per row is
    the plan's noise). Returns the hosts."""
    planned = strategy.noise_scales()
    weights = {a: 1.0 / math.sqrt(s) for a, s in planned.items()}
    hosts = measured_hosts(strategy, max_cells)
    assert sorted(a for h in hosts for a in h.residuals) == sorted(strategy.residual_sets)
    for host in hosts:
        sizes = [strategy.domain.sizes[i] for i in host.attributes]
        dense = np.vstack([
            weights[a] * strategy.solution(a).dense() @ dense_marginal(sizes, tuple(map(host.attributes.index, a)))
            for a in host.residuals])
        matrix = host_matrix(strategy, host, weights)
        np.testing.assert_allclose(matrix.dense(), dense, atol=1e-9)
        kernel = matrix.sensitivity("l2") ** 2
        share = sum(1.0 / planned[a] for a in host.residuals)
        assert kernel == pytest.approx(np.max(np.sum(dense**2, axis=0)), rel=1e-12)
        assert kernel <= share * (1 + 1e-12)
        assert kernel == pytest.approx(share, rel=1e-7)
    return hosts


@pytest.mark.parametrize("domain, workload", [
    (ek.Domain.from_dict(SIZES), WORKLOAD),
    # four attributes: the (0, 2) affine subworkload sits on a (0, 1, 2) host, not adjacent (a Product block)
    (ek.Domain.from_dict({"a": 2, "b": 3, "c": 2, "d": 3}),
     [((0, 2), affine_queries(2, 2)), ((0, 1), Kronecker([Prefix(2), Prefix(3)])),
      ((1, 2), Kronecker([Prefix(3), Prefix(2)]))]),
])
def test_host_requests_have_the_planned_sensitivity_and_measure_each_set_on_its_marginal(domain, workload):
    hosts = check_host_requests(select(domain, workload))
    assert max(len(h.attributes) for h in hosts) == min(3, len(domain) - 1)


# ------------------------------------------------------------------ answers
def test_answers_are_the_true_answers_when_the_noise_is_negligible():
    columns, domain = data(), ek.Domain.from_dict(SIZES)
    session = ek.protect(columns, domain, ek.ZCDP(10**8), seed=3)
    result = query_smasher(session.source, WORKLOAD, ek.ZCDP(10**8))
    truth = true_answers(columns, domain)
    assert np.max(np.sqrt(result.variance())) < 1e-3
    np.testing.assert_allclose(result.answers(), truth, atol=1e-2)
    np.testing.assert_allclose(result.answers(1), truth[6:12], atol=1e-2)
    counts = np.zeros((2, 3))
    np.add.at(counts, (columns["a"], columns["b"]), 1)
    np.testing.assert_allclose(result.marginal(("b", "a")), counts.T, atol=1e-2)  # axes in the order asked for
    np.testing.assert_allclose(result.marginal(("a", "b")), counts, atol=1e-2)
    with pytest.raises(ValueError, match="does not determine the marginal"):  # affine: only its Gram's range
        result.marginal(("b", "c"))


def test_answers_and_variances_agree_with_the_strategys_numpy_simulation(monkeypatch):
    """The same strategy measured in numpy (full data vector, negligible noise) gives the same answers and
    marginals; the predicted variances are the strategy's at the budget, up to the kernel's rounding of the
    noise scale up to one the exact samplers draw (11 significant bits: relative 2^-10, so variance 2^-9), and the noise scales are the ones the kernel
    reports having applied."""
    columns, domain = data(seed=4), ek.Domain.from_dict(SIZES)
    session = ek.protect(columns, domain, ek.ZCDP(10**8), seed=5)
    kernel = query_smasher(session.source, WORKLOAD, ek.ZCDP(10**8))
    simulated = kernel.strategy.simulate(full_vector(columns, domain), ek.ZCDP(10**8), seed=6)
    np.testing.assert_allclose(kernel.answers(), simulated.answers(), atol=2e-2)
    np.testing.assert_allclose(kernel.marginal((0, 1)), simulated.marginal((0, 1)), atol=2e-2)

    scales = []
    gaussian = Handle.gaussian

    def recorded(self, *args, **kwargs):
        answer = gaussian(self, *args, **kwargs)
        scales.append(answer.scale)
        return answer

    monkeypatch.setattr(Handle, "gaussian", recorded)
    session = ek.protect(columns, domain, ek.ZCDP("1/2"), seed=7)
    result = query_smasher(session.source, WORKLOAD, ek.ZCDP("1/2"))
    for host, scale in zip(measured_hosts(result.strategy), scales, strict=True):
        for a in host.residuals:
            assert result.noise_scales[a] == scale**2 * result.strategy.noise_scales()[a]
    reference = select(domain, WORKLOAD).at(ek.ZCDP("1/2")).variances()
    ratio = result.variance() / reference
    assert np.all(ratio >= 1.0) and np.all(ratio <= (1 + 2.0**-10) ** 2 * (1 + 2.0**-18))  # noise only rounds up
    planned = result.strategy.noise_scales()
    assert all(1.0 <= result.noise_scales[a] / planned[a] <= (1 + 2.0**-10) ** 2 * (1 + 2.0**-18) for a in planned)


def _answer_covariance(result):
    """Covariance of the answers from the reconstruction's linear map and the applied noise (dense)."""
    strategy = result.strategy
    rows = {a: strategy.solution(a).num_rows for a in strategy.residual_sets}
    covariance = 0.0
    for a, k in rows.items():
        for r in range(k):
            omegas = {b: np.zeros(n) for b, n in rows.items()}
            omegas[a][r] = 1.0
            column = QueryReconstruction(strategy, omegas).answers()
            covariance = covariance + result.noise_scales[a] * np.outer(column, column)
    return covariance


def test_empirical_variance_matches_the_prediction():
    """300 kernel runs, each its own seeded session, against the predicted covariance of all 16 answers.

    Its diagonal is ``.variance()``. Per run, e^T Sigma^+ e is chi-square with rank(Sigma) degrees of
    freedom (Gaussian noise, errors in the range of Sigma), so the sum over runs is chi-square with
    runs x rank; the test accepts at alpha = 1e-6 (two-sided), and the same statistic must reject the
    covariance scaled by 0.7 and by 1.3 (each more than 10 standard deviations away).
    """
    columns, domain = data(seed=8), ek.Domain.from_dict(SIZES)
    truth = true_answers(columns, domain)
    runs, errors, result = 300, [], None
    for seed in range(runs):
        session = ek.protect(columns, domain, ek.ZCDP(1), seed=seed)
        result = query_smasher(session.source, WORKLOAD, ek.ZCDP(1))
        errors.append(result.answers() - truth)
    errors = np.array(errors)
    covariance = _answer_covariance(result)
    np.testing.assert_allclose(np.diag(covariance), result.variance(), rtol=1e-9)
    assert np.abs(errors.mean(axis=0)).max() < 5 * np.sqrt(result.variance().max() / runs)  # unbiased
    rank = np.linalg.matrix_rank(covariance)
    assert rank < len(truth)  # the affine subworkload is measured only on the range of its Gram
    distances = np.einsum("ri,ij,rj->", errors, np.linalg.pinv(covariance), errors)

    def accepted(factor):
        statistic, dof = distances / factor, runs * rank
        return stats.chi2.sf(statistic, dof) > 5e-7 and stats.chi2.cdf(statistic, dof) > 5e-7

    assert accepted(1.0)
    assert not accepted(0.7) and not accepted(1.3)


# ------------------------------------------------------------------ every host block, random workloads
@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(2, 4), min_size=3, max_size=4).flatmap(lambda sizes: st.tuples(
    st.just(sizes),
    st.lists(st.lists(st.integers(0, len(sizes) - 1), min_size=1, max_size=3, unique=True), min_size=1, max_size=4),
    st.sampled_from(["wff", "residual"]),
    st.sampled_from([1, 30, 10_000]),
    st.integers(0, 2**16))))
def test_host_requests_measure_exactly_the_plan_on_random_workloads(case):
    """Random 0/1 queries on random views, Fourier or residual strategies, any host size: as above, and
    no host is the full domain unless a view is."""
    sizes, views, solver, max_cells, seed = case
    rng = np.random.default_rng(seed)
    workload = [(tuple(v), Dense((rng.random((3, math.prod(sizes[a] for a in v))) < 0.5).astype(float)))
                for v in views]
    workload = [(v, m) for v, m in workload if m.dense().any()]
    if not workload:
        return
    hosts = check_host_requests(select(sizes, workload, solver=solver), max_cells)
    for host in hosts:
        assert len(host.attributes) < len(sizes) or len(host.attributes) == max(len(v) for v, _ in workload)


# ------------------------------------------------------------------ errors
def test_a_pure_dp_budget_is_refused_with_what_to_do():
    session = ek.protect(data(), ek.Domain.from_dict(SIZES), ek.PureDP(1))
    with pytest.raises(ValueError, match=r"cannot satisfy pure epsilon-DP: give ek.ZCDP\(rho\).*rho = epsilon\^2 / 2"):
        query_smasher(session.source, WORKLOAD, ek.PureDP(1))
    assert session.budget.spent == ek.PureDP.zero()


def test_a_query_on_an_unknown_attribute_is_refused():
    session = ek.protect(data(), ek.Domain.from_dict(SIZES), ek.ZCDP(1))
    with pytest.raises(ValueError, match="unknown attribute 'z'"):
        query_smasher(session.source, [(("a", "z"), np.ones((1, 6)))], ek.ZCDP(1))
    assert session.budget.spent == ek.ZCDP.zero()


def test_a_vector_handle_is_refused():
    session = ek.protect(data(), ek.Domain.from_dict(SIZES), ek.ZCDP(1))
    with pytest.raises(ValueError, match="table handle"):
        query_smasher(session.source.vectorize(), WORKLOAD, ek.ZCDP(1))
