"""ResidualPlanner through the kernel: exact charge, whitening identities, projections only, and empirical
variance of the reconstructed marginals matching the prediction (with power against 0.7x and 1.3x)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import ektelo_ng as ek
from ektelo_ng.operators.residual import sub_matrix
from ektelo_ng.operators.selection import residual_planner as select
from ektelo_ng.operators.selection.residual_hosts import unwhiten, whitened_residual
from ektelo_ng.plans.residual_planner import residual_planner

SIZES = {"a": 2, "b": 3, "c": 4}
WORKLOAD = [(0, 1), (1, 2), (0,)]


def data(seed=0, rows=500):
    rng = np.random.default_rng(seed)
    return {name: rng.integers(0, size, rows) for name, size in SIZES.items()}


def test_whitened_basis_is_orthonormal_and_unwhitens_to_the_residual_basis():
    sizes = [3, 4]
    B = whitened_residual(sizes).dense()
    H = np.kron(sub_matrix(3), sub_matrix(4))
    np.testing.assert_allclose(B @ B.T, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(unwhiten(sizes, B), H, atol=1e-12)
    assert whitened_residual(sizes).sensitivity("l2") == pytest.approx(np.sqrt(2 / 3 * 3 / 4))


def test_the_kernel_charges_exactly_the_budget_and_only_projections_are_vectorized():
    session = ek.protect(data(), ek.Domain.from_dict(SIZES), ek.ZCDP("1/2"), seed=1)
    result = residual_planner(session.source, WORKLOAD, ek.ZCDP("1/2"))
    assert session.budget.spent == ek.ZCDP("1/2")
    lineage = session.lineage()
    for node, attributes in lineage.nodes(data=True):
        if attributes["kind"] == "vector":
            (parent,) = lineage.predecessors(node)
            assert lineage.edges[parent, node]["op"] == "vectorize"
            assert len(attributes["attributes"]) < len(SIZES)  # a marginal, never the full vector
    assert result.marginal((0, 1)).shape == (2, 3)


def test_empirical_variance_matches_the_prediction():
    """300 seeded runs of the (1, 2) marginal against the strategy's predicted covariance.

    Per run, e^T Sigma^+ e is chi-square with rank(Sigma) degrees of freedom (Gaussian noise), so
    the sum over runs is chi-square with runs x rank; the test accepts at alpha = 1e-6 (two-sided)
    and must reject the covariance scaled by 0.7 and 1.3.
    """
    columns, domain = data(), ek.Domain.from_dict(SIZES)
    truth = np.zeros((3, 4))
    np.add.at(truth, (columns["b"], columns["c"]), 1)
    runs = 300
    session = ek.protect(columns, domain, ek.ZCDP(runs), seed=2)
    errors = np.array([(residual_planner(session.source, WORKLOAD, ek.ZCDP(1)).marginal((1, 2)) - truth).ravel()
                       for _ in range(runs)])
    strategy = select(domain, WORKLOAD)
    covariance = strategy.covariance((1, 2)) * strategy.at(ek.ZCDP(1)).factor  # unit noise, then at rho = 1
    rank = np.linalg.matrix_rank(covariance)
    distances = np.einsum("ri,ij,rj->", errors, np.linalg.pinv(covariance), errors)
    assert np.abs(errors.mean(axis=0)).max() < 5 * np.sqrt(np.diag(covariance).max() / runs)  # unbiased

    def accepted(factor):
        statistic, dof = distances / factor, runs * rank
        return stats.chi2.sf(statistic, dof) > 5e-7 and stats.chi2.cdf(statistic, dof) > 5e-7

    assert accepted(1.0)
    assert not accepted(0.7) and not accepted(1.3)


def test_zcdp_is_required():
    session = ek.protect(data(), ek.Domain.from_dict(SIZES), ek.PureDP(1))
    with pytest.raises(ValueError, match="ZCDP"):
        residual_planner(session.source, WORKLOAD, ek.PureDP(1))


# ------------------------------------------------------------------ shared counting: hosts
from hypothesis import given, settings, strategies as st  # noqa: E402

from ektelo_ng.operators.residual import SubsetFamily  # noqa: E402
from ektelo_ng.operators.selection.residual_hosts import host_matrix, maximal_sets, plan_hosts  # noqa: E402


def _brute_maximal(sets):
    return {s for s in sets if not any(set(s) < set(t) for t in sets)}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(2, 5), min_size=2, max_size=6).flatmap(
    lambda sizes: st.tuples(
        st.just(sizes),
        st.lists(st.lists(st.integers(0, len(sizes) - 1), min_size=1, max_size=3, unique=True).map(
            lambda s: tuple(sorted(s))), min_size=1, max_size=8),
        st.sampled_from([1, 20, 100, 10_000]))))
def test_hosts_cover_every_residual_exactly_once_within_the_cell_limit(case):
    sizes, workload, max_cells = case
    family = SubsetFamily.closure(workload, len(sizes))
    assert set(maximal_sets(family)) == _brute_maximal(family.sets)
    hosts = plan_hosts(sizes, family, max_cells)
    carried = [a for h in hosts for a in h.residuals]
    assert sorted(carried) == sorted(family.sets)  # every residual once, nothing else
    for h in hosts:
        assert all(set(a) <= set(h.attributes) for a in h.residuals)
        assert len(h.attributes) < len(sizes) or len(h.attributes) == max(len(s) for s in family.sets)
        grown = len(h.attributes) > max(len(a) for a in h.residuals)
        if grown:  # a host only grows past its largest residual while it fits
            assert np.prod([sizes[i] for i in h.attributes]) <= max_cells


def test_a_host_matrix_measures_each_residual_on_the_host_marginal():
    """Dense check: (B_A ⊗ 1^T) applied to the host marginal equals B_A applied to the A-marginal."""
    sizes = [2, 3, 4]
    family = SubsetFamily.closure([(0, 1), (1, 2), (0, 2)], 3)
    (host,) = [h for h in plan_hosts(sizes, family, max_cells=10**6) if (0, 1) in h.residuals]
    x = np.random.default_rng(0).integers(0, 9, size=[sizes[i] for i in host.attributes]).astype(float)
    weights = {a: 1.0 + len(a) for a in family.sets}
    y = host_matrix(sizes, host, weights) @ x.ravel()
    offset = 0
    for a in host.residuals:
        axes = tuple(k for k, i in enumerate(host.attributes) if i not in a)
        marginal = x.sum(axis=axes).ravel()
        basis = whitened_residual([sizes[i] for i in a]) @ marginal if a else marginal  # () is the total
        expected = weights[a] * basis
        np.testing.assert_allclose(y[offset:offset + expected.size], expected, atol=1e-10)
        offset += expected.size
    assert offset == y.size


def test_shared_hosts_give_the_predicted_variance_and_fewer_scans():
    """Four attributes, a cycle of 2-way marginals: hosts merge them (3-way hosts), and 300 runs of the
    (2, 3) marginal still match the predicted covariance (chi-square, rejecting 0.7x and 1.3x)."""
    sizes = {"a": 2, "b": 3, "c": 2, "d": 3}
    workload = [(0, 1), (1, 2), (2, 3), (0, 3)]
    rng = np.random.default_rng(3)
    columns = {name: rng.integers(0, n, 400) for name, n in sizes.items()}
    domain = ek.Domain.from_dict(sizes)
    truth = np.zeros((2, 3))
    np.add.at(truth, (columns["c"], columns["d"]), 1)
    runs = 300
    session = ek.protect(columns, domain, ek.ZCDP(runs), seed=4)
    estimates = [residual_planner(session.source, workload, ek.ZCDP(1)) for _ in range(runs)]
    assert len(estimates[0].strategy.hosts()) < len(workload)
    assert session.budget.spent == ek.ZCDP(runs)
    errors = np.array([(e.marginal((2, 3)) - truth).ravel() for e in estimates])
    covariance = estimates[0].covariance((2, 3))
    distances = np.einsum("ri,ij,rj->", errors, np.linalg.pinv(covariance), errors)
    dof = runs * np.linalg.matrix_rank(covariance)

    def accepted(factor):
        return stats.chi2.sf(distances / factor, dof) > 5e-7 and stats.chi2.cdf(distances / factor, dof) > 5e-7

    assert accepted(1.0)
    assert not accepted(0.7) and not accepted(1.3)


# ------------------------------------------------------------------ batched requests
from fractions import Fraction  # noqa: E402
from functools import reduce  # noqa: E402

import ektelo_ng.operators.selection.residual_hosts as planner  # noqa: E402


def test_hosts_with_one_pattern_share_one_matrix():
    """``host_pattern`` is all a host matrix depends on: equal patterns give equal matrices (so one matrix
    object may be sent for all of them), and the patterns tell apart the hosts whose matrices differ."""
    sizes = [2, 3, 2, 3, 2]
    family = SubsetFamily.closure([(0, 1, 2), (1, 2, 3), (2, 3, 4), (0, 3), (1, 4), (0, 4)], 5)
    hosts = plan_hosts(sizes, family, max_cells=24)
    weights = {a: 1.0 + 0.1 * len(a) + 0.01 * sum(a) for a in family.sets}
    dense = {h: planner.host_matrix(sizes, h, weights).dense() for h in hosts}
    patterns = {h: planner.host_pattern(sizes, h, weights) for h in hosts}
    for g in hosts:
        for h in hosts:
            same = dense[g].shape == dense[h].shape and np.array_equal(dense[g], dense[h])
            assert (patterns[g] == patterns[h]) == same


def test_batched_counting_and_measuring_put_every_residual_in_its_place(monkeypatch):
    """Tiny batches (two marginals per vectorize_many, a few rows per gaussian_batch) and a huge budget: each
    omega_A equals H_A x_A (the residual basis on the true A-marginal) up to the tiny noise, every host is
    measured once, and the kernel charged exactly the budget."""
    monkeypatch.setattr(planner, "COUNT_BATCH", 2)
    monkeypatch.setattr(planner, "MEASURE_ROWS", 7)
    sizes = {"a": 2, "b": 3, "c": 4, "d": 2}
    rng = np.random.default_rng(5)
    columns = {name: rng.integers(0, n, 300) for name, n in sizes.items()}
    domain, rho = ek.Domain.from_dict(sizes), Fraction(10**12)
    session = ek.protect(columns, domain, ek.ZCDP(rho), seed=3)
    strategy = select(domain, [(0, 1, 2), (1, 2, 3), (0, 3), (2,)])
    family = SubsetFamily.closure(strategy.workload, len(sizes))
    hosts = plan_hosts(domain.sizes, family, max_cells=24)
    assert len({planner.host_pattern(domain.sizes, h, {a: 1.0 for a in family.sets}) for h in hosts}) > 1
    measurements = planner.measure_hosts(planner.count_hosts(session.source, hosts), hosts, strategy.noise_scales(),
                                         domain.sizes, rho)
    omegas, applied = planner.decode(measurements, family, strategy.noise_scales(), domain.sizes)
    assert session.budget.spent == ek.ZCDP(rho)
    entries = session.transcript()
    assert sum(len(e["attributes"]) for e in entries if e["op"] == "vectorize_many") == len(hosts)
    batches = [e for e in entries if e["op"] == "gaussian_batch"]
    assert len(batches) > 1 and sum(len(e["items"]) for e in batches) == len(hosts)
    factor = strategy.at(ek.ZCDP(rho)).factor  # from unit noise to the budget spent
    names, planned = list(sizes), {a: s * factor for a, s in strategy.noise_scales().items()}
    for a in family.sets:
        marginal = np.zeros([domain.sizes[i] for i in a])
        if a:
            np.add.at(marginal, tuple(columns[names[i]] for i in a), 1)
        else:
            marginal += len(columns["a"])  # the total
        basis = reduce(np.kron, [sub_matrix(domain.sizes[i]) for i in a], np.ones((1, 1)))
        np.testing.assert_allclose(omegas[a], basis @ marginal.ravel(), atol=1e-3)
        assert applied[a] == pytest.approx(planned[a], rel=1e-5)


@pytest.mark.parametrize("chunk_entries", [1, 7, 1 << 16])
def test_unwhitening_rows_in_blocks_is_unwhitening_each_row(chunk_entries):
    rng = np.random.default_rng(6)
    for sizes in ([3, 4, 2], [5], []):
        rows = rng.random((11, int(np.prod([n - 1 for n in sizes]))))
        expected = np.stack([unwhiten(sizes, r) for r in rows])
        np.testing.assert_allclose(planner._unwhiten_rows(sizes, rows, chunk_entries), expected, rtol=1e-13, atol=1e-13)
