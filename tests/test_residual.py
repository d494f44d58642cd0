"""The residual machinery (operators/residual.py) against dense brute force on small domains."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.linalg

from ektelo_ng.kernel.domain import Domain
from ektelo_ng.operators.residual import (
    ResidualReconstruction,
    SubsetFamily,
    apply_sub,
    apply_sub_pinv,
    batched_residual_answers,
    cell_covariance,
    cell_variance,
    dense_marginal,
    dense_residual,
    dense_residual_noise,
    normalize_subset,
    residual_answers,
    residual_pcost,
    sub_matrix,
    sub_pinv,
)


def all_subsets(d: int) -> list[tuple[int, ...]]:
    return [c for r in range(d + 1) for c in itertools.combinations(range(d), r)]


def brute_closure(workload) -> set[tuple[int, ...]]:
    return {c for w in workload for r in range(len(w) + 1) for c in itertools.combinations(w, r)}


# ---------------------------------------------------------------------------------------
# Sub_m
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 3, 4, 7, 10])
def test_sub_matrix_structure(m):
    sub = sub_matrix(m)
    assert sub.shape == (m - 1, m)
    np.testing.assert_array_equal(sub @ np.ones(m), 0)
    np.testing.assert_allclose(sub @ sub.T, np.eye(m - 1) + np.ones((m - 1, m - 1)))
    np.testing.assert_allclose(sub_pinv(m), np.linalg.pinv(sub), atol=1e-12)
    np.testing.assert_allclose(sub @ sub_pinv(m), np.eye(m - 1), atol=1e-12)
    np.testing.assert_allclose(sub_pinv(m) @ sub, np.eye(m) - 1.0 / m, atol=1e-12)


def test_sub_examples_from_the_paper():
    np.testing.assert_array_equal(sub_matrix(4), [[1, -1, 0, 0], [1, 0, -1, 0], [1, 0, 0, -1]])
    np.testing.assert_allclose(sub_pinv(4), np.array([[1, 1, 1], [-3, 1, 1], [1, -3, 1], [1, 1, -3]]) / 4)
    with pytest.raises(ValueError):
        sub_matrix(1)
    with pytest.raises(ValueError):
        sub_pinv(1)


def test_implicit_kron_products_equal_dense():
    rng = np.random.default_rng(0)
    shape = (3, 2, 4)
    x = rng.normal(size=shape)
    for axes in [(), (0,), (1, 2), (0, 1, 2)]:
        factors = [sub_matrix(n) if j in axes else np.eye(n) for j, n in enumerate(shape)]
        dense = factors[0]
        for f in factors[1:]:
            dense = np.kron(dense, f)
        np.testing.assert_allclose(apply_sub(x, axes).ravel(), dense @ x.ravel())
        shrunk = apply_sub(x, axes)
        pinv_factors = [sub_pinv(n) if j in axes else np.eye(n) for j, n in enumerate(shape)]
        dense_pinv = pinv_factors[0]
        for f in pinv_factors[1:]:
            dense_pinv = np.kron(dense_pinv, f)
        np.testing.assert_allclose(apply_sub_pinv(shrunk, axes).ravel(), dense_pinv @ shrunk.ravel())
    batch = rng.normal(size=(5,) + shape)
    np.testing.assert_allclose(batched_residual_answers(batch)[2], residual_answers(batch[2]))
    np.testing.assert_allclose(residual_answers(x.ravel(), shape), residual_answers(x))


# ---------------------------------------------------------------------------------------
# The residual basis
# ---------------------------------------------------------------------------------------
SIZES = (2, 3, 4)


def test_residual_rows_orthogonal_and_complete():
    blocks = {a: dense_residual(SIZES, a) for a in all_subsets(len(SIZES))}
    for a, r_a in blocks.items():
        assert r_a.shape == (math.prod(SIZES[i] - 1 for i in a), math.prod(SIZES))
        for b, r_b in blocks.items():
            if a != b:
                np.testing.assert_allclose(r_a @ r_b.T, 0, atol=1e-12)
    stacked = np.vstack(list(blocks.values()))
    assert stacked.shape == (24, 24)
    assert np.linalg.matrix_rank(stacked) == 24


def test_residual_is_sub_of_marginal_and_noise_covariance():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 5, size=math.prod(SIZES)).astype(float)
    for a in all_subsets(len(SIZES)):
        marginal = dense_marginal(SIZES, a) @ x
        np.testing.assert_allclose(residual_answers(marginal, [SIZES[i] for i in a]), dense_residual(SIZES, a) @ x)
        r_a = dense_residual(SIZES, a)
        rest = math.prod(n for i, n in enumerate(SIZES) if i not in a)
        np.testing.assert_allclose(r_a @ r_a.T, rest * dense_residual_noise(SIZES, a))


def test_pcost_is_max_diagonal_of_the_whitened_gram():
    rng = np.random.default_rng(2)
    subsets = all_subsets(len(SIZES))
    for a in subsets:
        r_a = dense_residual(SIZES, a)
        gram = r_a.T @ np.linalg.solve(dense_residual_noise(SIZES, a), r_a)
        np.testing.assert_allclose(np.diag(gram), residual_pcost([SIZES[i] for i in a]))
    scales = rng.uniform(0.5, 3.0, size=len(subsets))
    b = np.vstack([dense_residual(SIZES, a) for a in subsets])
    sigma = scipy.linalg.block_diag(*[s * dense_residual_noise(SIZES, a) for s, a in zip(scales, subsets)])
    brute = np.max(np.diag(b.T @ np.linalg.solve(sigma, b)))
    formula = sum(residual_pcost([SIZES[i] for i in a]) / s for s, a in zip(scales, subsets))
    assert brute == pytest.approx(formula, rel=1e-10)


# ---------------------------------------------------------------------------------------
# Subset families
# ---------------------------------------------------------------------------------------
def test_closure_matches_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(20):
        d = int(rng.integers(1, 7))
        subsets = all_subsets(d)
        workload = [subsets[i] for i in rng.choice(len(subsets), size=int(rng.integers(1, 6)))]
        family = SubsetFamily.closure(workload, d)
        expected = brute_closure(workload) | {()}
        assert set(family.sets) == expected
        assert len(family) == len(expected)
        assert list(family.sets) == sorted(expected, key=lambda s: (len(s), s))
        for i, s in enumerate(family.sets):
            assert family.index(s) == i
            assert family.set_sizes[i] == len(s)


def test_ids_key_path_and_unique_path_agree():
    d = 9
    family = SubsetFamily.closure(list(itertools.combinations(range(d), 3)), d)
    rows = family.rows(2)[::-1]
    via_keys = family.ids(rows)
    pos, found = SubsetFamily._lookup_unique(family.rows(2), rows)
    assert found.all()
    np.testing.assert_array_equal(via_keys, pos + family.offset(2))
    np.testing.assert_array_equal(via_keys, [family.index(tuple(r)) for r in rows.tolist()])
    with pytest.raises(KeyError, match="not in the family"):
        family.ids(np.array([[0, 1, 2, 3]]))
    with pytest.raises(KeyError):
        family.index((0, 1, 2, 3))
    # huge domains (no int64 keys) take the np.unique path
    big = SubsetFamily.closure([(1, 10**6, 3 * 10**6)] + [tuple(range(k, k + 4)) for k in range(3)], 4 * 10**6)
    assert big._keys[3] is None and big._keys[4] is None
    assert big.index((10**6, 3 * 10**6)) == big.ids(np.array([[10**6, 3 * 10**6]]))[0]
    assert big.ids(np.array([[0, 1, 2, 3]]))[0] == big.index((0, 1, 2, 3))
    with pytest.raises(KeyError):
        big.ids(np.array([[0, 1, 2, 4]]))


def test_incidence_matches_brute_force_and_mobius_inverts_zeta():
    sizes = (2, 3, 4, 5)
    workload = [(0, 1, 2), (1, 3), (2, 3)]
    family = SubsetFamily.closure(workload, len(sizes))
    inc = family.incidence(sizes)
    v = inc.variance_matrix().toarray()
    for w, sw in enumerate(family.sets):
        for a, sa in enumerate(family.sets):
            if set(sa) <= set(sw):
                assert v[w, a] == pytest.approx(math.prod(sizes[j] ** -2.0 for j in sw if j not in sa))
            else:
                assert v[w, a] == 0
    np.testing.assert_allclose(inc.mobius().toarray() @ inc.zeta().toarray(), np.eye(len(family)), atol=1e-12)
    np.testing.assert_allclose(family.pcosts(sizes), [residual_pcost([sizes[i] for i in s]) for s in family.sets])
    np.testing.assert_array_equal(family.cells(sizes), [math.prod(sizes[i] for i in s) for s in family.sets])
    np.testing.assert_array_equal(
        family.residual_lengths(sizes), [math.prod(sizes[i] - 1 for i in s) for s in family.sets]
    )


def test_normalize_subset():
    domain = Domain.from_sizes([3, 1, 4], names=["a", "b", "c"])
    assert normalize_subset(domain, ["c", "a"]) == (0, 2)
    assert normalize_subset(domain, ("b", 2)) == (2,)
    assert normalize_subset(domain, "c") == (2,)
    assert normalize_subset(domain, 0) == (0,)
    assert normalize_subset(domain, ()) == ()
    with pytest.raises(ValueError):
        normalize_subset(domain, ["z"])
    with pytest.raises(ValueError):
        normalize_subset(domain, [0, 0])


# ---------------------------------------------------------------------------------------
# Reconstruction, variance and covariance vs dense generalized least squares
# ---------------------------------------------------------------------------------------
class DenseGLS:
    """The BLUE from stacked residual measurements with block-diagonal covariance."""

    def __init__(self, sizes, sets, scales):
        self.sizes, self.sets = sizes, sets
        self.b = np.vstack([dense_residual(sizes, a) for a in sets])
        self.sigma = scipy.linalg.block_diag(*[s * dense_residual_noise(sizes, a) for s, a in zip(scales, sets)])
        precision = np.linalg.inv(self.sigma)
        self.info_pinv = np.linalg.pinv(self.b.T @ precision @ self.b)
        self.gain = self.info_pinv @ self.b.T @ precision

    def estimate(self, subset, omegas):
        return dense_marginal(self.sizes, subset) @ self.gain @ np.concatenate([omegas[a] for a in self.sets])

    def covariance(self, subset):
        q = dense_marginal(self.sizes, subset)
        return q @ self.info_pinv @ q.T


def scales_within(subset, scale_of):
    return {
        keep: scale_of[tuple(subset[j] for j in keep)]
        for r in range(len(subset) + 1)
        for keep in itertools.combinations(range(len(subset)), r)
    }


@pytest.mark.parametrize("workload", [[(0, 1), (1, 2)], [(0, 1, 2)], [(2,), (0, 1)]])
def test_reconstruction_is_the_dense_blue(workload):
    rng = np.random.default_rng(4)
    sizes = SIZES
    domain = Domain.from_sizes(sizes)
    family = SubsetFamily.closure(workload, len(sizes))
    scales = rng.uniform(0.2, 5.0, size=len(family))
    scale_of = dict(zip(family.sets, scales))
    gls = DenseGLS(sizes, family.sets, scales)
    omegas = {a: rng.normal(size=math.prod(sizes[i] - 1 for i in a)) * 3 for a in family.sets}
    recon = ResidualReconstruction(domain, family, omegas)
    every = recon.marginals(family.sets)
    for a in family.sets:
        shape = tuple(sizes[i] for i in a)
        assert every[a].shape == shape
        np.testing.assert_allclose(every[a].ravel(), gls.estimate(a, omegas), atol=1e-10)
        np.testing.assert_allclose(recon.marginal(a), every[a])
        cov = gls.covariance(a)
        within = scales_within(a, scale_of)
        np.testing.assert_allclose(np.diag(cov), cell_variance(shape, within), rtol=1e-9)
        np.testing.assert_allclose(cell_covariance(shape, within), cov, atol=1e-10)
        # consistency: summing out an axis gives the smaller reconstructed marginal
        for j in range(len(a)):
            smaller = a[:j] + a[j + 1 :]
            np.testing.assert_allclose(every[a].sum(axis=j), every[smaller], atol=1e-10)


def test_paper_covariance_formula_is_wrong_for_two_way():
    """Theorem 4.7's off-diagonal term (prod -1/n_i) disagrees with GLS; ours does not."""
    sizes = (3, 4)
    family = SubsetFamily.closure([(0, 1)], 2)
    scales = np.array([1.0, 2.0, 3.0, 4.0])
    cov = DenseGLS(sizes, family.sets, scales).covariance((0, 1))
    scale_of = dict(zip(family.sets, scales))
    paper = sum(
        scale_of[a] * math.prod(-1 / sizes[i] for i in a) * math.prod(sizes[j] ** -2.0 for j in (0, 1) if j not in a)
        for a in family.sets
    )
    off_diagonal = cov[0, 1:]  # cells sharing attribute 0, differing in attribute 1
    assert not np.allclose(off_diagonal, paper)
    np.testing.assert_allclose(cell_covariance(sizes, scales_within((0, 1), scale_of)), cov, atol=1e-12)


def test_reconstruction_exact_without_noise_and_input_checks():
    rng = np.random.default_rng(5)
    domain = Domain.from_sizes([3, 1, 4, 2], names=["a", "b", "c", "d"])
    sizes = domain.sizes
    x = rng.integers(0, 9, size=domain.size).astype(float)
    family = SubsetFamily.closure([(0, 2), (2, 3)], 4)
    omegas = {a: dense_residual(sizes, a) @ x for a in family.sets}
    recon = ResidualReconstruction(domain, family, omegas)
    for a in [("a", "c"), ("c", "d"), (), ("a", "b", "c")]:
        positions = sorted(domain.indices(a))
        expected = (dense_marginal(sizes, tuple(positions)) @ x).reshape([sizes[i] for i in positions])
        np.testing.assert_allclose(recon[a], expected, atol=1e-9)
    assert recon.marginal(["b", "a"]).shape == (1, 3)  # axes in the order asked for
    np.testing.assert_array_equal(recon.marginal(["b", "a"]), recon.marginal(["a", "b"]).T)
    np.testing.assert_array_equal(recon.marginal(("c", "a")), recon[("a", "c")].T)
    assert recon.marginal("c").shape == (4,)
    with pytest.raises(KeyError, match=r"marginal on \('a', 'd'\) was not measured.*add it"):
        recon.marginal(("a", "d"))  # not in the closure
    partial = ResidualReconstruction(domain, family, {a: v for a, v in omegas.items() if a != (2,)})
    assert partial.marginal(("a",)).shape == (3,)
    with pytest.raises(KeyError, match=r"\(2,\)"):
        partial.marginal(("c",))
    with pytest.raises(ValueError, match="expected 6"):
        ResidualReconstruction(domain, family, {(0, 2): np.zeros(5)})


def test_simulated_noise_matches_predicted_variance():
    """Draw omega_A ~ N(R_A x, s_A Sigma_A) densely and compare empirical moments.

    Each empirical variance from T draws has relative standard deviation sqrt(2 / (T - 1));
    the test allows 5 of them (and 5 standard errors for means and covariances), so with ~150
    checked entries a fresh seed would fail with probability below 1e-4 (fixed seed here).
    """
    rng = np.random.default_rng(6)
    sizes = (2, 3, 3)
    domain = Domain.from_sizes(sizes)
    family = SubsetFamily.closure([(0, 1), (1, 2)], 3)
    scales = rng.uniform(0.5, 4.0, size=len(family))
    scale_of = dict(zip(family.sets, scales))
    x = rng.integers(0, 20, size=domain.size).astype(float)
    chol = {a: np.linalg.cholesky(s * dense_residual_noise(sizes, a)) for a, s in scale_of.items()}
    exact = {a: dense_residual(sizes, a) @ x for a in family.sets}
    draws = 3000
    samples = {a: [] for a in family.sets}
    for _ in range(draws):
        omegas = {a: exact[a] + chol[a] @ rng.normal(size=len(exact[a])) for a in family.sets}
        for a, q in ResidualReconstruction(domain, family, omegas).marginals(family.sets).items():
            samples[a].append(q.ravel())
    for a in family.sets:
        values = np.array(samples[a])
        shape = tuple(sizes[i] for i in a)
        truth = dense_marginal(sizes, a) @ x
        predicted = cell_covariance(shape, scales_within(a, scale_of))
        var = np.diag(predicted)
        assert np.all(np.abs(values.mean(axis=0) - truth) <= 5 * np.sqrt(var / draws))
        empirical = np.atleast_2d(np.cov(values, rowvar=False))
        spread = np.sqrt((np.outer(var, var) + predicted**2) / draws)
        assert np.all(np.abs(empirical - predicted) <= 5 * spread)


@pytest.mark.parametrize("entries", [1, 13, 1 << 18])
def test_reconstruction_in_small_batches_is_exact(entries, monkeypatch):
    """Marginals reconstructed a few (or one) at a time, reusing the scratch space, equal the truth."""
    import ektelo_ng.operators.residual as residual

    monkeypatch.setattr(residual, "_BATCH_ENTRIES", entries)
    rng = np.random.default_rng(8)
    domain = Domain.from_sizes([3, 2, 4, 2, 3])
    sizes = domain.sizes
    x = rng.integers(0, 9, size=domain.size).astype(float)
    workload = [c for c in itertools.combinations(range(5), 3)] + [(0, 1)]
    family = SubsetFamily.closure(workload, 5)
    recon = ResidualReconstruction(domain, family, {a: dense_residual(sizes, a) @ x for a in family.sets})
    got = recon.marginals(workload)
    for a in workload:
        expected = (dense_marginal(sizes, a) @ x).reshape([sizes[i] for i in a])
        np.testing.assert_allclose(got[a], expected, atol=1e-9)
