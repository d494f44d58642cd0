"""HDMM strategy selection: losses against dense brute force, gradients against finite differences,
the journal's errata, its Tables 4/5 and Examples 15/17, and reconstruction against numpy pinv.

Reference numbers: HDMM journal ("J"), see shared/notes/hdmm.md. Table 5 is at eps = 1,
delta = 1e-6, i.e. sigma = 4.22468 times our unit-sigma RMSE.
"""

from __future__ import annotations

import itertools
import math
from functools import reduce

import numpy as np
import pytest

from ektelo_ng.operators.matrix import (
    AllRange,
    Dense,
    Identity,
    Intervals,
    Kronecker,
    Ones,
    Total,
    VStack,
)
from ektelo_ng.operators.matrices import MarginalStack, Prefix, WidthRange
from ektelo_ng.operators.algebra import pinv
from ektelo_ng.operators.error import expected_error
from ektelo_ng.operators.selection.hdmm.bound import singular_value_bound, svd_bound
from ektelo_ng.operators.measurement import Measurement
from ektelo_ng.operators.selection.hdmm import (
    KroneckerStrategy,
    PIdentity,
    UnionStrategy,
    hdmm,
    identity_strategy,
    opt_0,
    opt_kron,
    opt_marginals,
    opt_plus,
)
from ektelo_ng.operators.selection.hdmm import marginals as marg
from ektelo_ng.operators.selection.hdmm.blocks import AttributeBlocks
from ektelo_ng.operators.selection.hdmm.gram import Gram, product_terms
from ektelo_ng.operators.selection.hdmm.opt0 import factor_error, pidentity_loss, row_errors
from ektelo_ng.operators.selection.hdmm.select import OPT_PLUS_MAX_PRODUCTS, default_optimizers
from ektelo_ng.operators.workload import RandomRange

SIGMA = 4.22468


def dense_error(W, A, noise="laplace"):
    """c_K ||A||_K^2 ||W A^+||_F^2 entirely in numpy."""
    Wd, Ad = W.dense(), A.dense()
    sens = np.abs(Ad).sum(0).max() if noise == "laplace" else np.sqrt((Ad**2).sum(0)).max()
    return (2.0 if noise == "laplace" else 1.0) * sens**2 * np.linalg.norm(Wd @ np.linalg.pinv(Ad)) ** 2


def supported_dense_error(W, A, noise="laplace"):
    """dense_error, or inf when some query of W is not a linear combination of A's rows."""
    Wd, Ad = W.dense(), A.dense()
    return dense_error(W, A, noise) if np.allclose(Wd @ np.linalg.pinv(Ad) @ Ad, Wd) else math.inf


def numeric_gradient(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = h
        grad[index] = (f(x + step) - f(x - step)) / (2 * h)
    return grad


def table_rmse(strategy):
    """RMSE at eps = 1 (Laplace) or eps = 1, delta = 1e-6 (Gaussian), as in J Tables 4 and 5."""
    return strategy.rmse() * (SIGMA if strategy.noise == "gaussian" else 1.0)


def table_bound(strategy):
    return math.sqrt(svd_bound(strategy.workload, strategy.noise) / strategy.num_queries) * (SIGMA if strategy.noise == "gaussian" else 1.0)


# ---- workload structure -----------------------------------------------------------------------


def test_product_terms_unfold_weights_stacks_and_nested_products():
    W = VStack([Kronecker([Kronecker([Prefix(2), Total(3)]), Identity(4)]) * 2.0, Kronecker([Identity(2), Ones(2, 3), Prefix(4)])])
    terms = product_terms(W)
    assert [w for w, _ in terms] == [2.0, 1.0]
    assert [[f.shape[1] for f in fs] for _, fs in terms] == [[2, 3, 4], [2, 3, 4]]
    rebuilt = np.vstack([w * reduce(np.kron, [f.dense() for f in fs]) for w, fs in terms])
    assert np.allclose(rebuilt, W.dense())
    mixed = VStack([Kronecker([Prefix(2), Total(3)]), Dense(np.ones((1, 6)))])
    assert product_terms(mixed) == [(1.0, (mixed,))]


def test_gram_products_diagonal_total_match_dense():
    rng = np.random.default_rng(0)
    blocks = [(0.5, AllRange(9)), (2.0, Prefix(9)), (1.5, WidthRange(9, 3)), (3.0, Total(9)), (1.0, Dense(rng.normal(size=(4, 9))))]
    gram = Gram(blocks)
    V = sum(c * W.dense().T @ W.dense() for c, W in blocks)
    X = rng.normal(size=(9, 4))
    assert np.allclose(gram.matmat(X), V @ X)
    assert np.allclose(gram.diag, np.diag(V))
    assert gram.trace == pytest.approx(np.trace(V))
    assert gram.total == pytest.approx(V.sum())
    assert np.allclose(gram.dense(), V)
    assert Gram([(1.0, Total(4)), (2.0, Ones(3, 4) * 2.0)]).total_only
    assert Gram([(1.0, Total(4)), (2.0, Identity(4))]).identity_or_total
    assert Gram([(1.0, Identity(4) * 3.0)]).identity_only and not Gram([(1.0, Total(4))]).identity_only
    assert not Gram([(1.0, Prefix(4))]).identity_or_total


def test_box_workload_unfolds_into_one_row_interval_products():
    W = RandomRange((5, 4, 3), 7, seed=0)
    terms = product_terms(W)
    assert len(terms) == 7 and all(f.shape[0] == 1 for _, fs in terms for f in fs)
    assert np.array_equal(np.vstack([reduce(np.kron, [f.dense() for f in fs]) for _, fs in terms]), W.dense())


def test_row_weighted_gram_matches_dense():
    rng = np.random.default_rng(3)
    rows = Intervals(9, [0, 2, 4, 2], [8, 5, 4, 5])
    c = rng.uniform(0, 2, 4)
    gram = Gram([(c, rows), (0.5, Prefix(9))])
    V = rows.dense().T @ np.diag(c) @ rows.dense() + 0.5 * Prefix(9).dense().T @ Prefix(9).dense()
    X = rng.normal(size=(9, 3))
    assert np.allclose(gram.matmat(X), V @ X)
    assert np.allclose(gram.diag, np.diag(V)) and np.allclose(gram.dense(), V)
    assert gram.total == pytest.approx(V.sum()) and gram.trace == pytest.approx(np.trace(V))
    with pytest.raises(ValueError, match="one weight per row"):
        Gram([(np.ones(3), rows)])
    with pytest.raises(ValueError, match="0/1 block"):
        Gram([(np.ones(4), Dense(rng.normal(size=(4, 9))))])
    with pytest.raises(ValueError, match="non-negative"):
        Gram([(-c, rows)])


def test_row_errors_match_factor_error_of_each_row():
    rows = Intervals(8, [0, 3, 2, 0, 7], [7, 3, 6, 0, 7])
    theta = np.random.default_rng(6).uniform(0, 1, (2, 8))
    singular = Dense(np.vstack([np.eye(8)[:4], np.ones((1, 8))]))  # answers cells 0..3 and the total
    for A in (Identity(8), PIdentity(theta), Prefix(8), Total(8), singular):
        for noise in ("laplace", "gaussian"):
            each = [factor_error(A, Gram.of(Intervals(8, [lo], [hi])), noise) for lo, hi in zip(rows.lo, rows.hi)]
            dense = [supported_dense_error(Intervals(8, [lo], [hi]), A, noise) / (2 if noise == "laplace" else 1)
                     for lo, hi in zip(rows.lo, rows.hi)]
            assert np.allclose(row_errors(A, rows, noise), each) and np.allclose(row_errors(A, rows, noise), dense)
    assert np.isinf(row_errors(singular, rows, "laplace")).tolist() == [False, False, True, False, True]


def test_attribute_blocks_group_rows_and_keep_other_blocks():
    boxes = RandomRange((6, 5), 9, seed=1)
    W = VStack([boxes, Kronecker([Prefix(6), Identity(5)]) * 2.0])
    terms = product_terms(W)
    blocks = AttributeBlocks(terms)
    distinct = [len({(a, b) for a, b in zip(boxes.lo[:, i], boxes.hi[:, i])}) for i in range(2)]
    assert [len(b) for b in blocks.blocks] == [1, 1] and [r.shape[0] for r in blocks.rows] == distinct
    coefficients = np.random.default_rng(2).uniform(0, 1, len(terms))
    theta = np.random.default_rng(3).uniform(0, 1, (2, 6))
    for i, A in enumerate([PIdentity(theta), Identity(5)]):
        factors = [fs[i] for _, fs in terms]
        assert np.allclose(blocks.surrogate(i, coefficients).dense(),
                           sum(c * f.dense().T @ f.dense() for c, f in zip(coefficients, factors)))
        assert np.allclose(blocks.errors(i, A, "laplace"), [factor_error(A, Gram.of(f), "laplace") for f in factors])


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_opt_kron_on_boxes_matches_dense_and_beats_identity(noise):
    W = RandomRange((24, 20), 60, seed=4)  # on much smaller domains the identity is hard to beat with Laplace
    strategy = opt_kron(W, noise, seed=0)
    assert strategy.expected_error() == pytest.approx(dense_error(W, strategy.matrix, noise), rel=1e-8)
    assert strategy.expected_error() < identity_strategy(W, noise).expected_error()
    assert "opt_kron" in default_optimizers(W) and "opt_plus" not in default_optimizers(RandomRange((4, 4), OPT_PLUS_MAX_PRODUCTS + 1, seed=0))
    assert "opt_plus" in default_optimizers(RandomRange((4, 4), 3, seed=0))


# ---- OPT_0 losses ---------------------------------------------------------------------------------

WORKLOADS_1D = [AllRange(10), Prefix(10), WidthRange(10, 4), Dense(np.random.default_rng(1).normal(size=(6, 10)))]


@pytest.mark.parametrize("W", WORKLOADS_1D, ids=lambda W: type(W).__name__)
@pytest.mark.parametrize("density", [1.0, 0.15])
def test_pidentity_loss_matches_dense_formula(W, density):
    rng = np.random.default_rng(2)
    theta = rng.uniform(0, 1, (3, 10)) * (rng.random((3, 10)) < density)
    A = np.vstack([np.eye(10), theta]) / (1 + theta.sum(0))
    V = W.dense().T @ W.dense()
    loss, _ = pidentity_loss(theta, Gram.of(W))
    assert loss == pytest.approx(np.trace(np.linalg.inv(A.T @ A) @ V), rel=1e-10)
    assert np.allclose(PIdentity(theta).dense(), A)


@pytest.mark.parametrize("W", WORKLOADS_1D, ids=lambda W: type(W).__name__)
@pytest.mark.parametrize("density", [1.0, 0.15])
def test_pidentity_gradient_matches_finite_differences(W, density):
    # Sparse Theta takes the sparse-product path; the loss is smooth in Theta, zeros included.
    rng = np.random.default_rng(3)
    theta = rng.uniform(0, 1, (3, 10)) * (rng.random((3, 10)) < density)
    gram = Gram.of(W)
    _, grad = pidentity_loss(theta, gram)
    numeric = numeric_gradient(lambda t: pidentity_loss(t, gram)[0], theta)
    assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-5 * np.abs(grad).max())


def test_laplace_opt0_never_materializes_a_gram(monkeypatch):
    from ektelo_ng.operators.algebra import IntervalGram

    def refuse(self):
        raise AssertionError("dense Gram formed")

    monkeypatch.setattr(IntervalGram, "dense", refuse)
    monkeypatch.setattr(Gram, "dense", refuse)
    strategy = opt_0(AllRange(256), restarts=1, seed=0)
    assert strategy.matrix.theta.shape == (16, 256)


def test_pidentity_strategy_norms_and_pseudo_inverse():
    theta = np.random.default_rng(4).uniform(0, 2, (4, 12))
    A = PIdentity(theta)
    assert np.allclose(A.column_norms("l1"), 1.0)
    assert np.allclose(pinv(A).dense(), np.linalg.pinv(A.dense()))
    # Optimizers can push columns of Theta to ~1e6 (cells answered only through Theta).
    huge = theta * np.where(np.arange(12) % 3 == 0, 1e6, 1.0)
    B = PIdentity(huge)
    y = np.random.default_rng(5).normal(size=B.shape[0])
    assert np.allclose(pinv(B) @ y, np.linalg.lstsq(B.dense(), y, rcond=None)[0], atol=1e-8)
    with pytest.raises(ValueError):
        PIdentity(-theta)


def test_factor_error_for_every_factor_kind_matches_dense():
    W = AllRange(8)
    gram = Gram.of(W)
    theta = np.random.default_rng(6).uniform(0, 1, (2, 8))
    for A, noise in [(Identity(8), "laplace"), (PIdentity(theta), "laplace"), (Prefix(8), "laplace"), (PIdentity(theta), "gaussian")]:
        assert factor_error(A, gram, noise) == pytest.approx(dense_error(W, A, noise) / (2 if noise == "laplace" else 1))
    total = Gram([(2.0, Total(8)), (1.0, Ones(3, 8))])
    assert factor_error(Total(8), total, "laplace") == pytest.approx(5.0)
    assert factor_error(Total(8), gram, "laplace") == math.inf
    singular = Dense(np.vstack([np.eye(8)[:4], np.ones((1, 8))]))  # cannot answer AllRange
    assert factor_error(singular, gram, "gaussian") == math.inf
    assert factor_error(singular, Gram.of(Total(8)), "gaussian") == pytest.approx(dense_error(Total(8), singular, "gaussian"))


# ---- OPT_0 against J Tables 4 and 5 -----------------------------------------------------------------

# (workload, J OPT_0 RMSE): reached or beaten, at most 1% above, never below the SVD bound.
TABLE_4 = [(AllRange, 64, 5.55), (AllRange, 256, 8.07), (Prefix, 64, 5.32), (Prefix, 256, 7.35), (lambda n: WidthRange(n, 32), 256, 6.34)]
TABLE_5 = [(AllRange, 64, 9.73), (AllRange, 256, 12.26), (Prefix, 64, 8.87), (Prefix, 256, 10.66), (lambda n: WidthRange(n, 32), 256, 9.93)]


@pytest.mark.parametrize("make, n, paper", TABLE_4)
def test_opt0_laplace_reaches_journal_table_4(make, n, paper):
    strategy = opt_0(make(n), "laplace", restarts=2, seed=0)
    assert table_bound(strategy) <= table_rmse(strategy) <= 1.01 * paper
    assert strategy.expected_error() == pytest.approx(expected_error(strategy.workload, strategy.matrix), rel=1e-8)
    assert strategy.matrix.sensitivity("l1") == pytest.approx(1.0)


@pytest.mark.parametrize("make, n, paper", TABLE_5)
def test_opt0_gaussian_reaches_journal_table_5(make, n, paper):
    strategy = opt_0(make(n), "gaussian")
    assert table_bound(strategy) <= table_rmse(strategy) <= 1.01 * paper
    assert strategy.expected_error() == pytest.approx(expected_error(strategy.workload, strategy.matrix, "gaussian"), rel=1e-6)
    assert np.allclose(strategy.matrix.column_norms("l2"), 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("make, paper", [(AllRange, 11.08), (Prefix, 9.58)])
def test_opt0_laplace_journal_table_4_at_1024(make, paper):
    strategy = opt_0(make(1024), "laplace", restarts=1, seed=0)
    assert table_bound(strategy) <= table_rmse(strategy) <= 1.01 * paper


def test_opt0_iteration_cap_trades_error_for_time():
    capped = opt_0(AllRange(64), restarts=1, seed=0, maxiter=3)
    full = opt_0(AllRange(64), restarts=1, seed=0)
    assert full.expected_error() < capped.expected_error()


def test_opt0_total_and_identity_blocks():
    assert isinstance(opt_0(Total(6)).matrix, Ones)
    assert opt_0(Total(6)).expected_error() == pytest.approx(2.0)
    strategy = opt_0(Identity(5), seed=0)  # p = 1; the optimum is the identity itself
    assert strategy.expected_error() == pytest.approx(10.0, rel=1e-4)


# ---- OPT_kron and OPT_+ -----------------------------------------------------------------------------------


def test_opt_kron_error_matches_dense_and_single_product_factorizes():
    W = VStack([Kronecker([Prefix(6), Identity(4)]), Kronecker([Total(6), AllRange(4)]) * 2.0])
    repeated = VStack([Kronecker([Prefix(5), Identity(3), Total(2)]), Kronecker([Prefix(5), Total(3), Identity(2)]) * 0.5,
                       Kronecker([Total(5), Identity(3), Identity(2)])])  # blocks shared between products
    for noise in ("laplace", "gaussian"):
        for workload in (W, repeated):
            strategy = opt_kron(workload, noise, seed=1)
            assert isinstance(strategy, KroneckerStrategy)
            assert strategy.expected_error() == pytest.approx(dense_error(workload, strategy.matrix, noise), rel=1e-8)
            assert strategy.expected_error() <= identity_strategy(workload, noise).expected_error()
    product = Kronecker([AllRange(8), Prefix(6)])
    strategy = opt_kron(product, seed=2)
    factor_errors = [opt_0(f, seed=2).expected_error() / 2 for f in product.factors]
    assert strategy.expected_error() == pytest.approx(2 * math.prod(factor_errors), rel=0.02)


def test_journal_example_15_prefix_total_union():
    W = VStack([Kronecker([Prefix(100), Total(100)]), Kronecker([Total(100), Prefix(100)])])
    kron = opt_kron(W, restarts=2, seed=0)
    assert kron.expected_error() / 2 <= 1.01 * 33385
    plus = opt_plus(W, restarts=2, seed=0)
    assert isinstance(plus, UnionStrategy)
    assert plus.expected_error() / 2 <= 1.01 * 14252
    assert plus.matrix.shape == (216, 10000)  # OPT_0(P) has 100 + 8 rows, OPT_0(T) = T (J: p = 6, 212)
    assert plus.matrix.sensitivity("l1") == pytest.approx(1.0)


def test_opt_plus_error_bounds_global_least_squares():
    W = VStack([Kronecker([Prefix(5), Total(4)]), Kronecker([Identity(5), Prefix(4)]) * 3.0])
    for noise in ("laplace", "gaussian"):
        plus = opt_plus(W, noise, seed=3)
        sens = plus.matrix.sensitivity("l1" if noise == "laplace" else "l2")
        assert sens == pytest.approx(1.0)
        # Per-group least squares, computed densely, is exactly the reported error ...
        local = sum(
            np.linalg.norm(w * reduce(np.kron, [f.dense() for f in fs]) @ np.linalg.pinv(c * A.dense())) ** 2
            for (w, fs), (c, A) in zip(product_terms(W), plus.blocks)
        )
        assert plus.expected_error() == pytest.approx((2 if noise == "laplace" else 1) * local, rel=1e-8)
        # ... and global least squares is never worse.
        assert dense_error(W, plus.matrix, noise) <= plus.expected_error() * (1 + 1e-9)


# ---- OPT_M: lattice transforms, loss, errata ------------------------------------------------------------


def dense_lattice(sizes):
    """Y, X(u) builder and H(a) from their definitions (J Thm 7, 9), by explicit bit loops."""
    d = len(sizes)
    points = list(itertools.product([0, 1], repeat=d))
    c = {a: math.prod(n for n, bit in zip(sizes, a) if not bit) for a in points}
    Y = np.array([[c[b] if all(x <= y for x, y in zip(a, b)) else 0.0 for b in points] for a in points])

    def X(u):
        out = np.zeros((len(points), len(points)))
        for ia, a in enumerate(points):
            for ib, b in enumerate(points):
                k = tuple(x & y for x, y in zip(a, b))
                union = tuple(x | y for x, y in zip(a, b))
                out[points.index(k), ib] += u[ia] * c[union]
        return out

    def H(a):
        return reduce(np.kron, [np.eye(n) if bit else np.ones((n, n)) for n, bit in zip(sizes, a)])

    return points, Y, X, H


def test_lattice_transforms_match_dense_definitions():
    sizes = (2, 3, 4)
    lattice = marg.Lattice(sizes)
    points, Y, _, _ = dense_lattice(sizes)
    u = np.random.default_rng(7).normal(size=lattice.shape)
    assert np.allclose(lattice.Y(u).ravel(), Y @ u.ravel())
    assert np.allclose(lattice.Y_transpose(u).ravel(), Y.T @ u.ravel())
    assert np.allclose(lattice.Y_inverse(lattice.Y(u)), u)
    assert np.allclose(lattice.mult.ravel(), [math.prod(n - 1 for n, bit in zip(sizes, a) if bit) for a in points])


def test_marginal_approximation_preserves_traces_against_marginal_grams():
    # J Thm 10: tr[G(u) W^T W] = tr[G(u) G(w)] for every u, here for a prefix/range workload.
    sizes = (2, 3, 4)
    W = VStack([Kronecker([Prefix(2), Total(3), AllRange(4)]), Kronecker([Identity(2), Prefix(3), Total(4)]) * 2.0])
    lattice = marg.Lattice(sizes)
    w = marg.marginal_approximation(product_terms(W), lattice)
    points, _, _, H = dense_lattice(sizes)
    Gw = sum(w[a] * H(a) for a in points)
    V = W.dense().T @ W.dense()
    for a in points:
        assert np.trace(H(a) @ V) == pytest.approx(np.trace(H(a) @ Gw))


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_marginal_loss_matches_dense_error_and_finite_differences(noise):
    sizes = (2, 3, 4)
    lattice = marg.Lattice(sizes)
    rng = np.random.default_rng(8)
    conjunctive = VStack([Kronecker([Prefix(2), Total(3), AllRange(4)]), Kronecker([Identity(2), Prefix(3), Total(4)]) * 2.0])
    for W in [MarginalStack(sizes, itertools.combinations(range(3), 2)), conjunctive]:
        kappa_w = lattice.Y(marg.marginal_approximation(product_terms(W), lattice))
        objective = marg.MarginalObjective(kappa_w, lattice, noise)
        theta = rng.uniform(0.1, 1, lattice.shape)
        theta[1, 1, 1] = 0.0  # not invertible, still supports W
        A = MarginalStack(sizes, {lattice.subsets(a): float(theta[a]) for a in zip(*np.nonzero(theta))})
        loss, grad = objective(theta)
        assert (2 if noise == "laplace" else 1) * loss == pytest.approx(dense_error(W, A, noise), rel=1e-9)
        assert np.allclose(grad, numeric_gradient(lambda t: objective(t)[0], theta), rtol=1e-5)
    theta = np.zeros(lattice.shape)
    theta[1, 1, 0] = 1.0  # misses attribute 3
    assert objective(theta)[0] == math.inf


def test_erratum_1_objective_needs_factor_n():
    sizes = (2, 3, 4)
    lattice = marg.Lattice(sizes)
    points, _, X, _ = dense_lattice(sizes)
    W = MarginalStack(sizes, itertools.combinations(range(3), 2))
    w = marg.marginal_approximation(product_terms(W), lattice)
    theta = np.random.default_rng(9).uniform(0.2, 1, lattice.shape)  # theta_full > 0: invertible
    A = MarginalStack(sizes, {lattice.subsets(a): float(theta[a]) for a in points})
    printed = theta.sum() ** 2 * np.ones(8) @ np.linalg.solve(X((theta**2).ravel()), w.ravel())
    truth = dense_error(W, A) / 2
    assert truth == pytest.approx(24 * printed)  # n = 2 * 3 * 4
    assert marg.MarginalObjective(lattice.Y(w), lattice, "laplace")(theta)[0] == pytest.approx(truth)


def test_erratum_2_svd_bound_multiplicity():
    sizes = (2, 3, 4)
    W = MarginalStack(sizes, itertools.combinations(range(3), 2))
    brute = np.linalg.svd(W.dense(), compute_uv=False).sum() ** 2 / 24
    assert brute == pytest.approx(50.85, abs=0.005)
    lattice = marg.Lattice(sizes)
    kappa_w = lattice.Y(marg.marginal_approximation(product_terms(W), lattice))
    assert marg.lattice_svdb(kappa_w, lattice) == pytest.approx(brute)
    printed = np.sum(np.sqrt(kappa_w) * lattice.c[::-1, ::-1, ::-1]) ** 2 / 24  # c(not a) multiplicities
    assert printed == pytest.approx(189.3, abs=0.05)
    assert svd_bound(W, "gaussian") == pytest.approx(brute)


def test_erratum_3_eigen_form_pseudo_inverse():
    sizes = (2, 3, 4)
    lattice = marg.Lattice(sizes)
    points, _, X, H = dense_lattice(sizes)
    u = np.zeros(lattice.shape)
    for a in [(0, 1, 1), (1, 0, 1), (1, 1, 0)]:
        u[a] = 1.0 + sum(a)
    G = sum(u[a] * H(a) for a in points)
    kappa = lattice.Y(u)
    inverse = np.where(kappa > 1e-12, 1.0 / np.where(kappa > 1e-12, kappa, 1.0), 0.0)
    eta = lattice.Y_inverse(inverse)
    assert np.allclose(sum(eta[a] * H(a) for a in points), np.linalg.pinv(G), atol=1e-12)
    Xg = np.linalg.pinv(X(u.ravel()))
    printed = (Xg @ Xg @ u.ravel()).reshape(lattice.shape)
    Gg = sum(printed[a] * H(a) for a in points)
    assert not np.allclose(G @ Gg @ G, G)
    # the eigen-form applied to vectors, as reconstruct uses it
    x = np.random.default_rng(10).normal(size=24)
    assert np.allclose(marg.apply_eigen(inverse, x.reshape(sizes)).ravel(), np.linalg.pinv(G) @ x)


def test_gaussian_closed_form_attains_svd_bound_when_valid():
    # Thm 13: a valid closed form is optimal (equals SVDB).
    sizes = (3, 4, 5)
    W = MarginalStack(sizes, [(0,), (0, 1), (0, 2)])
    lattice = marg.Lattice(sizes)
    kappa_w = lattice.Y(marg.marginal_approximation(product_terms(W), lattice))
    theta, valid = marg.gaussian_closed_form(kappa_w, lattice)
    assert valid
    loss = marg.MarginalObjective(kappa_w, lattice, "gaussian")(theta)[0]
    assert loss == pytest.approx(marg.lattice_svdb(kappa_w, lattice))
    strategy = opt_marginals(W, "gaussian")
    assert strategy.expected_error() == pytest.approx(svd_bound(strategy.workload, strategy.noise))
    assert strategy.expected_error() == pytest.approx(dense_error(W, strategy.matrix, "gaussian"))


def test_journal_example_17_all_two_way_marginals():
    W = MarginalStack((2, 5, 50, 100), itertools.combinations(range(4), 2))
    lattice = marg.Lattice((2, 5, 50, 100))
    kappa_w = lattice.Y(marg.marginal_approximation(product_terms(W), lattice))
    as_strategy = np.where(marg.marginal_approximation(product_terms(W), lattice) > 0, 1.0, 0.0)
    assert marg.MarginalObjective(kappa_w, lattice, "laplace")(as_strategy)[0] == pytest.approx(206964)
    assert identity_strategy(W).expected_error() / 2 == pytest.approx(300000)
    assert opt_kron(W, seed=0).expected_error() / 2 == pytest.approx(213270, rel=0.01)
    assert opt_plus(W, seed=0).expected_error() / 2 == pytest.approx(85070, rel=0.01)
    best = opt_marginals(W, restarts=10, seed=0)
    assert best.expected_error() / 2 == pytest.approx(62886, rel=0.01)
    assert best.matrix.sensitivity("l1") == pytest.approx(1.0)
    assert svd_bound(best.workload, best.noise) <= best.expected_error()


# ---- strategies: reconstruction and selection -----------------------------------------------------------


def reconstruct(strategy, y):
    """The strategy's reconstruction from noisy answers ``y`` to its matrix (one measurement, unit noise)."""
    return strategy.reconstruct([Measurement(strategy.matrix, y, 1.0, strategy.noise)]).x


def test_reconstruct_is_least_squares_for_every_strategy_kind():
    rng = np.random.default_rng(11)
    W = VStack([Kronecker([Prefix(4), Total(3), Identity(2)]), Kronecker([Identity(4), Prefix(3), Total(2)]) * 2.0])
    strategies = [
        opt_0(AllRange(12), seed=0),
        opt_0(AllRange(12), "gaussian"),
        opt_kron(W, seed=0),
        opt_kron(W, "gaussian"),
        opt_marginals(W, seed=0),
        opt_plus(W, seed=0),
    ]
    for strategy in strategies:
        A = strategy.matrix.dense()
        y = rng.normal(size=A.shape[0])
        assert np.allclose(reconstruct(strategy, y), np.linalg.pinv(A) @ y, atol=1e-7), strategy.optimizer
        with pytest.raises(ValueError):
            reconstruct(strategy, np.ones(A.shape[0] + 1))


def test_marginal_strategy_error_matches_operators_error_and_reconstructs_workload():
    W = MarginalStack((3, 4, 2, 5), itertools.combinations(range(4), 2))
    strategy = opt_marginals(W, seed=1)
    assert strategy.expected_error() == pytest.approx(expected_error(W, strategy.matrix), rel=1e-8)
    x = np.random.default_rng(12).integers(0, 5, size=120).astype(float)
    assert np.allclose(W @ reconstruct(strategy, strategy.matrix @ x), W @ x)


def test_hdmm_picks_the_best_candidate_and_falls_back_to_identity():
    W = MarginalStack((2, 5, 50, 100), itertools.combinations(range(4), 2))
    best = hdmm(W, seed=0, restarts=2)
    assert best.expected_error() <= opt_plus(W, seed=0).expected_error()
    assert svd_bound(best.workload, best.noise) <= best.expected_error()
    identity = hdmm(Identity(16), seed=0)
    assert identity.expected_error() == pytest.approx(32.0, rel=1e-4)
    one_d = hdmm(Prefix(32), noise="gaussian")
    assert one_d.optimizer == "opt_0"
    assert one_d.rmse() == pytest.approx(math.sqrt(one_d.expected_error() / 32))
    with pytest.raises(ValueError, match="unknown optimizers"):
        hdmm(W, optimizers=["opt_magic"])
    with pytest.raises(ValueError, match="noise"):
        hdmm(W, noise="uniform")


def test_the_one_svd_bound_takes_the_marginal_closed_form_where_it_applies():
    W = VStack([Kronecker([Prefix(4), Total(3)]), Kronecker([Identity(4), AllRange(3)])])
    assert marg.marginal_svdb(W) is None  # not a marginal workload: singular values of its Gram
    assert svd_bound(W) == pytest.approx(2 * singular_value_bound(W))
    marginal = MarginalStack((3, 4, 2), [(0, 1), (2,)])
    closed = marg.marginal_svdb(marginal)
    assert closed == pytest.approx(singular_value_bound(marginal))  # J Thm 12 (corrected) against the dense singular values
    assert svd_bound(marginal, "gaussian") == pytest.approx(closed)
    assert svd_bound(marginal, "laplace") == pytest.approx(2 * closed)


def test_rmse_on_cps_all_marginals_is_the_optimizers_own_error_journal_table_6():
    """HDMM J Table 6, CPS (100, 50, 7, 4, 2), all 32 marginals, epsilon 1, Laplace: HDMM 4.84, SVDB 2.63. ``rmse()``
    reads the optimizer's error: the generic path would need a 280,000 x 280,000 Gram (it raised)."""
    sizes = (100, 50, 7, 4, 2)
    W = MarginalStack(sizes, [s for k in range(6) for s in itertools.combinations(range(5), k)])
    strategy = hdmm(W, noise="laplace", seed=0)
    assert strategy.rmse() == pytest.approx(4.84, abs=0.005)
    assert strategy.rmse() == pytest.approx(math.sqrt(strategy.expected_error() / W.shape[0]), rel=1e-12)
    assert math.sqrt(svd_bound(W) / W.shape[0]) == pytest.approx(2.63, abs=0.005)


def test_pidentity_loss_refuses_parameters_whose_gram_rounds_to_singular():
    """On AllRange(8) the p-Identity's loss keeps falling as Theta grows without bound; where I + Theta Theta^T
    rounds to singular the loss is infinite, so the search backs off instead of failing (it used to raise)."""
    loss, grad = pidentity_loss(1e9 * np.ones((2, 8)), Gram.of(AllRange(8)))
    assert loss == math.inf and not grad.any()
    strategy = opt_0(AllRange(8), seed=2)
    assert strategy.expected_error() == pytest.approx(dense_error(AllRange(8), strategy.matrix), rel=1e-8)
    assert strategy.expected_error() <= 1.001 * identity_strategy(AllRange(8)).expected_error()  # its infimum


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_opt0_runs_its_linear_algebra_on_one_blas_thread(noise, monkeypatch):
    """Issue 37's discipline: given two BLAS threads, OPT_0's losses still run on one (a second thread per process
    oversubscribes a shared machine), and the caller's setting is restored after."""
    import importlib

    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> set[int]:
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}

    module, name = ("opt0", "pidentity_loss") if noise == "laplace" else ("gaussian", "DualPoint")
    module = importlib.import_module(f"ektelo_ng.operators.selection.hdmm.{module}")
    inner, seen = getattr(module, name), []
    monkeypatch.setattr(module, name, lambda *args: seen.append(blas_threads()) or inner(*args))
    with threadpool_limits(limits=2, user_api="blas"):
        assert blas_threads() == {2}
        opt_0(Prefix(32), noise, restarts=1, seed=0)
        assert blas_threads() == {2}
    assert seen and all(threads == {1} for threads in seen)
