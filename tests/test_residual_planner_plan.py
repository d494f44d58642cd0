"""ResidualPlanner through the kernel: exact charge, whitening identities, projections only, and empirical
variance of the reconstructed marginals matching the prediction (with power against 0.7x and 1.3x)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import ektelo_ng as ek
from operators.residual import sub_matrix
from operators.selection import residual_planner as select
from plans.residual_planner import residual_planner, unwhiten, whitened_residual

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
            assert len(lineage.nodes[parent]["attributes"]) < len(SIZES)  # a projection, never the full table
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
    covariance = select(domain, WORKLOAD, budget=ek.ZCDP(1)).covariance((1, 2))
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
