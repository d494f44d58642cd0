"""Graphical-model inference (operators.pgm) against brute force over the full joint distribution of small domains."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import optimize, stats

import ektelo_ng as ek
from ektelo_ng.operators.matrix import Dense, Identity, Kronecker, Total, VStack, Weighted
from ektelo_ng.operators.measurement import Measurement
from ektelo_ng.operators.pgm import fit
from ektelo_ng.operators.pgm.junction import calibrate, junction_tree, marginal
from ektelo_ng.operators.pgm.loss import pieces
from ektelo_ng.operators.pgm.tables import Reducer, logsumexp
from ektelo_ng.operators.selection.residual_planner import residual_planner

SIZES = (2, 3, 2, 3)
CYCLE = [(0, 1), (1, 2), (2, 3), (0, 3)]  # loopy: the junction tree adds a chord
CHAIN = [(0, 1), (1, 2), (2, 3)]


def project(joint: np.ndarray, attrs) -> np.ndarray:
    return joint.sum(axis=tuple(i for i in range(joint.ndim) if i not in attrs))


def network(sizes, rng, total=1000.0) -> np.ndarray:
    """A joint distribution with structure: each attribute depends on the one before it (Dirichlet tables)."""
    joint = rng.dirichlet(np.full(sizes[0], 0.7))
    for n in sizes[1:]:
        table = rng.dirichlet(np.full(n, 0.7), size=joint.shape[-1])
        joint = joint[..., None] * table.reshape((1,) * (joint.ndim - 1) + table.shape)
    return total * joint


def measure(joint, cliques, rng, std, matrix=None):
    """(attributes, matrix, answers, std) tuples: each clique's marginal through ``matrix`` (identity) plus noise."""
    out = []
    for c in cliques:
        truth = project(joint, c).ravel()
        M = np.eye(truth.size) if matrix is None else matrix(truth.size)
        out.append((c, M, M @ truth + (rng.normal(0, std, M.shape[0]) if std else 0.0), std or 1.0))
    return out


def loss_of(measurements, joint, kind="l2") -> float:
    value = 0.0
    for c, M, y, std in measurements:
        r = (M @ project(joint, c).ravel() - y) / std
        value += r @ r if kind == "l2" else np.abs(r).sum()
    return float(value)


def ipf(cliques, targets, sizes, total, sweeps=3000) -> np.ndarray:
    """Brute-force maximum entropy: iterative proportional fitting of the full joint to the target marginals."""
    joint = np.full(sizes, total / math.prod(sizes))
    for _ in range(sweeps):
        for c, t in zip(cliques, targets):
            joint = joint * (t / project(joint, c)).reshape([sizes[i] if i in c else 1 for i in range(len(sizes))])
    return joint


def brute_least_squares(measurements, sizes, total, kind="l2") -> np.ndarray:
    """The full joint minimizing the loss over {p >= 0, sum p = total} (SLSQP for L2, a linear program for L1)."""
    n = math.prod(sizes)
    rows = []
    for c, M, y, std in measurements:
        P = np.stack([project(np.eye(n)[k].reshape(sizes), c).ravel() for k in range(n)], axis=1)
        rows.append((M @ P / std, np.asarray(y) / std))
    A = np.vstack([a for a, _ in rows])
    b = np.concatenate([y for _, y in rows])
    if kind == "l1":  # min sum t, -t <= A p - b <= t
        m = A.shape[0]
        cost = np.concatenate([np.zeros(n), np.ones(m)])
        upper = np.block([[A, -np.eye(m)], [-A, -np.eye(m)]])
        done = optimize.linprog(cost, A_ub=upper, b_ub=np.concatenate([b, -b]),
                                A_eq=np.concatenate([np.ones(n), np.zeros(m)])[None], b_eq=[total],
                                bounds=[(0, None)] * (n + m), method="highs")
        return done.x[:n].reshape(sizes)
    done = optimize.minimize(lambda p: np.sum((A @ p - b) ** 2), np.full(n, total / n),
                             jac=lambda p: 2 * A.T @ (A @ p - b), bounds=[(0, None)] * n, method="SLSQP",
                             constraints=[{"type": "eq", "fun": lambda p: p.sum() - total}],
                             options={"maxiter": 2000, "ftol": 1e-14})
    return done.x.reshape(sizes)


# ---------------------------------------------------------------------------------------
# Junction tree
# ---------------------------------------------------------------------------------------
def test_message_passing_matches_brute_force_marginalisation():
    rng = np.random.default_rng(1)
    sizes = (2, 3, 4, 2, 3)
    cliques = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4), (1, 3)]
    tree = junction_tree(cliques, sizes, 10**6)
    assert all(any(set(c) <= set(j) for j in tree.cliques) for c in cliques)
    for j in range(len(tree.cliques)):  # running intersection: each separator lies in the parent
        assert set(tree.separator(j)) <= set(tree.cliques[tree.parent[j]] if tree.parent[j] >= 0 else ())
    potentials = [rng.normal(0, 1.5, [sizes[i] for i in c]) for c in tree.cliques]
    log_joint = np.zeros(sizes)
    for c, p in zip(tree.cliques, potentials):
        log_joint = log_joint + p.reshape([sizes[i] if i in c else 1 for i in range(len(sizes))])
    joint = np.exp(log_joint) / np.exp(log_joint).sum()
    beliefs = calibrate(tree, potentials)
    for c, b in zip(tree.cliques, beliefs):
        np.testing.assert_allclose(b, project(joint, c), rtol=1e-10, atol=1e-14)
    logs = [np.log(b) for b in beliefs]
    for attrs in [(0, 2), (0, 2, 4), (1, 4), (0, 1, 2, 3, 4), (3,)]:  # outside any clique: variable elimination
        np.testing.assert_allclose(np.exp(marginal(tree, logs, attrs)), project(joint, attrs), rtol=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5).flatmap(
    lambda sizes: st.tuples(st.just(tuple(sizes)),
                            st.lists(st.sets(st.integers(0, len(sizes) - 1)), min_size=1, max_size=8),
                            st.integers(0, 2**32 - 1))))
def test_the_reducer_gives_every_marginal_and_its_adjoint_broadcasts_them_back(case):
    """Marginals by the reducer's tree of single-axis sums equal multi-axis sums of the table; its expand is
    their adjoint: <marginals(T), G> = <T, expand(G)> for every table T and gradients G."""
    sizes, subsets, seed = case
    rng = np.random.default_rng(seed)
    attrs = tuple(range(len(sizes)))
    targets = [tuple(sorted(s)) for s in subsets]
    reducer = Reducer(attrs, targets, sizes)
    table = rng.random(sizes)
    got = reducer.marginals(table)
    for t in targets:
        np.testing.assert_allclose(got[t], project(table, t), rtol=1e-12)
    gradients = {t: rng.normal(size=[sizes[i] for i in t]) for t in set(targets)}
    expanded = reducer.expand(gradients)
    assert expanded.shape == sizes
    left = sum(float(np.vdot(got[t], g)) for t, g in gradients.items())
    np.testing.assert_allclose(left, float(np.vdot(table, expanded)), rtol=1e-10)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.sets(st.integers(0, len(shape) - 1)), st.booleans(),
                            st.integers(0, 2**32 - 1))))
def test_logsumexp_over_any_axes_matches_scipys(case):
    from scipy.special import logsumexp as reference

    shape, axes, keepdims, seed = case
    table = np.random.default_rng(seed).normal(0, 300, shape)  # far past exp's range: the shift must work
    axes = tuple(sorted(axes))
    expected = reference(table, axis=axes, keepdims=keepdims) if axes else table
    np.testing.assert_allclose(logsumexp(table, axes, keepdims), expected, rtol=1e-12, atol=1e-12)


def test_junction_tree_of_many_small_cliques_is_built_in_near_linear_time():
    """3,000 one-way marginals (disconnected) and a 3,000-attribute chain: no all-pairs clique graph, no
    rescan of every vertex per elimination (each took over 10 s here), no scan of every clique to find the one
    holding a measured clique."""
    import time

    sizes = (2,) * 3000
    for cliques in ([(i,) for i in range(3000)], [(i, i + 1) for i in range(2999)]):
        start = time.perf_counter()
        tree = junction_tree(cliques, sizes, 10**6)
        homes = [tree.home(c) for c in cliques]
        assert time.perf_counter() - start < 3.0
        assert all(set(c) <= set(tree.cliques[j]) for c, j in zip(cliques, homes))
        assert all(any(set(c) <= set(j) for j in tree.cliques) for c in cliques)
        assert sorted(tree.order) == list(range(len(tree.cliques))) and tree.parent[tree.order[0]] == -1
        assert all(tree.order.index(tree.parent[j]) < tree.order.index(j) for j in tree.order[1:])


def test_junction_tree_refuses_cliques_past_the_limit():
    sizes = [10] * 8
    with pytest.raises(ValueError, match="cells"):
        junction_tree(list(itertools.combinations(range(8), 2)), sizes, 10**6)


# ---------------------------------------------------------------------------------------
# Exact method
# ---------------------------------------------------------------------------------------
def test_noise_free_marginals_are_reproduced_and_the_rest_is_maximum_entropy():
    joint = 1000 * np.random.default_rng(2).dirichlet(np.ones(36)).reshape(SIZES)  # no conditional independence
    measurements = measure(joint, CYCLE, None, 0)
    model = fit(SIZES, measurements, method="exact", iterations=3000, tol=1e-14)
    for c in CYCLE:
        np.testing.assert_allclose(model.marginal(c), project(joint, c), atol=1e-6)
    maxent = ipf(CYCLE, [project(joint, c) for c in CYCLE], SIZES, joint.sum())
    for attrs in [(0, 2), (1, 3), (0, 1, 2, 3)]:
        np.testing.assert_allclose(model.marginal(attrs), project(maxent, attrs), atol=1e-5)
    assert model.total == pytest.approx(joint.sum())
    assert not np.allclose(project(maxent, (0, 2)), project(joint, (0, 2)), atol=1e-3)  # the data is not max-ent


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_noisy_fit_reaches_the_brute_force_optimum_over_the_full_joint(kind):
    rng = np.random.default_rng(3)
    joint = network(SIZES, rng, total=200.0)
    queries = lambda n: np.vstack([np.eye(n), np.tril(np.ones((n, n)))])  # noqa: E731  cells and prefix sums
    measurements = measure(joint, CYCLE, rng, 4.0, queries) + [((), np.ones((1, 1)), [200.0], 1e-3)]
    model = fit(SIZES, measurements, method="exact", iterations=4000 if kind == "l2" else 12000, tol=1e-13, loss=kind)
    brute = brute_least_squares(measurements, SIZES, 200.0, kind)
    fitted = model.marginal((0, 1, 2, 3))
    assert fitted.min() >= 0 and fitted.sum() == pytest.approx(200.0)
    ours, best = loss_of(measurements, fitted, kind), loss_of(measurements, brute, kind)
    assert ours <= best * (1 + (1e-3 if kind == "l2" else 1e-2)) + 1e-6  # l1: smoothed, slower
    if kind == "l2":  # the history is the loss (l1: the smoothed loss); a unique optimum in the measured marginals
        assert model.history[-1] == pytest.approx(ours, rel=1e-9)
        for c in CYCLE:
            np.testing.assert_allclose(model.marginal(c), project(brute, c), atol=5e-3 * 200)


def test_marginals_are_consistent_non_negative_and_ordered_as_asked():
    rng = np.random.default_rng(4)
    joint = network(SIZES, rng)
    model = fit(SIZES, measure(joint, CYCLE, rng, 30.0), method="exact")  # big noise: negative answers
    total = model.total
    for a, b in itertools.combinations(model.tree.cliques, 2):
        shared = tuple(sorted(set(a) & set(b)))
        np.testing.assert_allclose(project(model.marginal(a), [a.index(i) for i in shared]),
                                   project(model.marginal(b), [b.index(i) for i in shared]), rtol=1e-9)
    for attrs in [(0,), (3, 1), (2, 0, 3)]:
        m = model.marginal(attrs)
        assert m.min() >= 0 and m.sum() == pytest.approx(total)
        np.testing.assert_allclose(m, model.marginal(tuple(sorted(attrs))).transpose(np.argsort(np.argsort(attrs))))
    assert np.all(np.diff(model.history) <= 1e-9 * model.history[0])
    Q = np.arange(6.0).reshape(1, 6)
    np.testing.assert_allclose(model.answer([((0, 1), Q), ("a2",)]),
                               np.concatenate([Q @ model.marginal((0, 1)).ravel(), model.marginal((2,))]))


def test_synthetic_records_follow_the_model_and_the_test_has_power():
    rng = np.random.default_rng(5)
    joint = network(SIZES, rng)
    model = fit(SIZES, measure(joint, CYCLE, rng, 2.0), method="exact")
    records = model.synthetic(20_000, seed=6)
    assert set(records) == {"a0", "a1", "a2", "a3"}
    counts = np.bincount(np.ravel_multi_index([records[f"a{i}"] for i in range(4)], SIZES), minlength=36)
    probabilities = model.marginal((0, 1, 2, 3)).ravel() / model.total
    assert stats.chisquare(counts, 20_000 * probabilities).pvalue > 1e-3
    wrong = probabilities * np.where(np.arange(36) % 2, 1.15, 0.85)
    assert stats.chisquare(counts, 20_000 * wrong / wrong.sum()).pvalue < 1e-6


def test_approximate_records_follow_its_tables_where_the_regions_form_a_tree():
    """On a chain of regions the approximate method's one-attribute-at-a-time records are exact draws: each
    region's counts pass a chi-square test against its fitted table, and a 10% tilt of that table is rejected."""
    rng = np.random.default_rng(8)
    model = fit(SIZES, measure(network(SIZES, rng), CHAIN, rng, 2.0), method="approximate")
    records = model.synthetic(40_000, seed=9)
    for region in model.regions:
        shape = [SIZES[i] for i in region]
        counts = np.bincount(np.ravel_multi_index([records[f"a{i}"] for i in region], shape),
                             minlength=math.prod(shape))
        probabilities = model.marginal(region).ravel() / model.total
        assert stats.chisquare(counts, 40_000 * probabilities).pvalue > 1e-3
        wrong = probabilities * np.where(np.arange(probabilities.size) % 2, 1.1, 0.9)
        assert stats.chisquare(counts, 40_000 * wrong / wrong.sum()).pvalue < 1e-6


@pytest.mark.parametrize("sizes, cliques", [((2, 3, 2, 3), CYCLE),
                                             ((3, 4, 2, 3, 4, 2), list(itertools.combinations(range(6), 2)))],
                         ids=["cycle", "all-pairs-of-6"])
def test_approximate_records_keep_every_region_on_loopy_graphs(sizes, cliques):
    """Where no drawing order follows every region, the matched records still pass a chi-square test against each
    region's fitted table, a 10% tilt of a table is rejected, and the draws in order alone (the start, and the
    old sampler) fail the same test: on all pairs of 6 attributes one pair was off by 0.72 in L1."""
    rng = np.random.default_rng(8)
    model = fit(sizes, measure(network(sizes, rng, 5000.0), cliques, rng, 2.0), method="approximate")
    records = model.synthetic(20_000, seed=9)
    unmatched = model._draw_in_order(20_000, np.random.default_rng(9))
    worst_unmatched = 1.0
    for region in model.regions:
        shape = [sizes[i] for i in region]
        probabilities = model.marginal(region).ravel() / model.total
        counts = np.bincount(np.ravel_multi_index([records[f"a{i}"] for i in region], shape),
                             minlength=math.prod(shape))
        assert stats.chisquare(counts, 20_000 * probabilities).pvalue > 1e-3
        wrong = probabilities * np.where(np.arange(probabilities.size) % 2, 1.1, 0.9)
        assert stats.chisquare(counts, 20_000 * wrong / wrong.sum()).pvalue < 1e-6
        drawn = np.bincount(np.ravel_multi_index([unmatched[:, i] for i in region], shape), minlength=math.prod(shape))
        worst_unmatched = min(worst_unmatched, stats.chisquare(drawn, 20_000 * probabilities).pvalue)
    assert worst_unmatched < 1e-6


def test_matching_moves_records_to_exact_targets_and_counts_its_sweeps():
    """One region alone is matched in one sweep (a second confirms), exactly; the other attributes of moved records
    are kept; the work is bounded by the sweeps."""
    from ektelo_ng.operators.pgm.matching import match_regions, rounded_counts

    rng = np.random.default_rng(3)
    records = rng.integers(0, 3, size=(1_000, 3))
    before = records.copy()
    target = rounded_counts(np.array([[5.0, 1.0, 0.0], [0.0, 2.0, 1.0], [1.0, 0.0, 0.0]]), 1_000, rng)
    assert target.sum() == 1_000 and target[[2, 3, 7, 8]].sum() == 0
    assert match_regions(records, [(0, 2)], [target], (3, 3, 3), rng) == 2
    assert np.array_equal(np.bincount(records[:, 0] * 3 + records[:, 2], minlength=9), target)
    assert np.array_equal(records[:, 1], before[:, 1])
    contradictory = [np.bincount(np.zeros(1_000, dtype=int), minlength=3), np.bincount(np.full(1_000, 3), minlength=9)]  # a0 = 0 against a0 = 1
    assert match_regions(records, [(0,), (0, 1)], contradictory, (3, 3, 3), rng, sweeps=4) == 4  # never agree: capped


def test_callback_sees_every_iteration():
    rng = np.random.default_rng(7)
    seen = []
    model = fit(SIZES, measure(network(SIZES, rng), CHAIN, rng, 1.0), iterations=25, tol=0,
                callback=lambda k, loss: seen.append((k, loss)))
    assert [k for k, _ in seen] == list(range(1, len(seen) + 1)) and len(seen) == len(model.history) - 1
    assert [loss for _, loss in seen] == model.history[1:]


# ---------------------------------------------------------------------------------------
# Measurements: pieces and the total
# ---------------------------------------------------------------------------------------
def test_host_measurements_split_into_pieces_with_the_same_loss():
    rng = np.random.default_rng(8)
    sizes = (3, 2, 4)
    a, b = Dense(rng.normal(size=(2, 3))), Dense(rng.normal(size=(3, 4)))
    host = VStack([Weighted(Kronecker([a, Total(2), b]), 0.5), Kronecker([Total(3), Total(2), b]),
                   Kronecker([a, Dense(rng.normal(size=(1, 2))), b])])
    y = rng.normal(size=host.shape[0])
    std = rng.uniform(0.5, 2, host.shape[0])
    parts = pieces(Measurement(host, y, std, attributes=(0, 1, 2)), sizes, 10**6)
    assert [p.clique for p in parts] == [(0, 2), (2,), (0, 1, 2)]
    joint = rng.uniform(0, 5, sizes)
    whole = np.sum(((host @ joint.ravel()) - y) ** 2 / std**2)
    split = sum(np.sum(((p.matrix @ project(joint, p.clique).ravel()) - p.answers) ** 2 / p.std**2) for p in parts)
    assert split == pytest.approx(whole)


def test_residual_planner_measurements_through_the_kernel():
    rng = np.random.default_rng(9)
    sizes = (3, 4, 2, 3)
    joint = network(sizes, rng, total=1.0)
    cells = rng.choice(joint.size, size=5000, p=joint.ravel())
    columns = dict(zip(["a", "b", "c", "d"], np.unravel_index(cells, sizes)))
    domain = ek.Domain.from_dict(dict(zip(columns, sizes)))
    session = ek.protect(columns, domain, ek.ZCDP(2), seed=0)
    strategy = residual_planner(domain, [("a", "b"), ("b", "c"), ("c", "d")])
    measurements = strategy.measure(session.source, ek.ZCDP(1))
    model = fit(domain, measurements, method="exact")
    truth = np.bincount(cells, minlength=joint.size).reshape(sizes)
    assert model.total == pytest.approx(5000, abs=20)
    for attrs in [("a", "b"), ("b", "c"), ("c", "d")]:
        positions = tuple(domain.index(x) for x in attrs)
        assert np.abs(model.marginal(attrs) - project(truth, positions)).sum() < 0.05 * 5000
    # the same data vector measured whole (attributes=None) is a clique of every attribute
    vector = session.source.vectorize()
    whole = ek.measure.gaussian(vector, ek.selection.identity((math.prod(sizes),)), "1/100")
    full = fit(domain, [whole], method="exact")
    assert full.tree.cliques == ((0, 1, 2, 3),)
    assert np.abs(full.marginal((0, 1, 2, 3)) - truth).sum() < 0.2 * 5000


@pytest.mark.parametrize("sizes, matrix", [((2100,), Identity(2100)), ((80, 80), Kronecker([Identity(80), Identity(80)])),
                                            ((70, 70), np.eye(4900))])
def test_the_total_is_estimated_from_large_or_implicit_measurements(sizes, matrix):
    """An identity measurement determines the total however many cells it has and however it is stored."""
    rng = np.random.default_rng(13)
    counts = rng.integers(0, 5, math.prod(sizes)).astype(float)
    answers = counts + rng.normal(0, 0.5, counts.size)
    model = fit(sizes, [Measurement(matrix, answers, 0.5, attributes=tuple(range(len(sizes))))], iterations=1)
    assert model.total == pytest.approx(answers.sum())


def test_clear_refusals():
    rng = np.random.default_rng(10)
    sizes = [10] * 7
    with pytest.raises(ValueError, match="full data vector"):
        fit(sizes, [(None, Total(10**7), [1.0], 1.0)], max_clique_cells=10**6)
    pairs = [(c, np.eye(100), rng.normal(size=100), 1.0) for c in itertools.combinations(range(7), 2)]
    with pytest.raises(ValueError, match="method='approximate'"):
        fit(sizes, pairs, method="exact", total=100.0)
    with pytest.raises(ValueError, match="total"):
        fit(sizes, [((0, 1), np.diff(np.eye(100), axis=0), rng.normal(size=99), 1.0)])
    model = fit(sizes, pairs, total=100.0, iterations=3)
    with pytest.raises(ValueError, match="one region"):
        model.marginal((0, 1, 2))


def test_auto_takes_the_exact_method_while_the_tree_fits_and_the_model_says_which():
    rng = np.random.default_rng(14)
    measurements = measure(network(SIZES, rng), CYCLE, rng, 1.0)  # with its chord, tree cliques of 12 or 18 cells
    assert fit(SIZES, measurements, iterations=5).method == "exact"
    assert fit(SIZES, measurements, iterations=5, max_clique_cells=10).method == "approximate"


@pytest.mark.parametrize("options, message", [
    ({"iterations": 0}, "iterations"), ({"iterations": -5}, "iterations"), ({"iterations": 2.5}, "iterations"),
    ({"total": float("inf")}, "total"), ({"total": float("nan")}, "total"),
])
def test_fit_refuses_options_that_would_return_an_unfitted_or_nan_model(options, message):
    with pytest.raises(ValueError, match=message):
        fit(SIZES, [((0,), np.eye(2), [3.0, 4.0], 1.0)], **options)


def test_the_approximate_method_refuses_a_measured_marginal_past_max_clique_cells():
    with pytest.raises(ValueError, match="max_clique_cells"):
        fit((10**6, 10**6), [((0, 1), Total(10**12), [1e6], 1.0)], total=10.0)


# ---------------------------------------------------------------------------------------
# Approximate method
# ---------------------------------------------------------------------------------------
def test_approximate_equals_exact_on_a_chordal_problem():
    rng = np.random.default_rng(11)
    sizes = (3, 2, 4, 3, 2)
    cliques = [(0, 1, 2), (1, 2, 3), (3, 4)]
    measurements = measure(network(sizes, rng), cliques + [(0,)], rng, 3.0)
    exact = fit(sizes, measurements, method="exact", iterations=3000, tol=1e-13)
    approximate = fit(sizes, measurements, method="approximate", iterations=3000, tol=1e-13)
    assert approximate.regions == cliques
    for c in cliques + [(1, 2), (3,), ()]:
        np.testing.assert_allclose(approximate.marginal(c), exact.marginal(c), atol=1e-3 * exact.total)
    assert approximate.history[-1] == pytest.approx(exact.history[-1], rel=1e-4)


def test_approximate_on_a_loopy_problem_is_locally_consistent_and_close_to_exact():
    rng = np.random.default_rng(12)
    sizes = (3, 3, 3, 3)
    cliques = list(itertools.combinations(range(4), 2))
    measurements = measure(network(sizes, rng, total=500.0), cliques, rng, 15.0)
    exact = fit(sizes, measurements, method="exact", iterations=3000, tol=1e-13)
    approximate = fit(sizes, measurements, method="approximate", iterations=3000, tol=1e-13)
    assert approximate.regions == cliques
    for i in range(4):
        tables = [project(approximate.marginal(c), [c.index(i)]) for c in cliques if i in c]
        for t in tables:
            assert t.min() >= 0
            np.testing.assert_allclose(t, tables[0], rtol=1e-7)
    assert approximate.history[-1] <= exact.history[-1] * (1 + 1e-6)
    assert approximate.history[-1] >= 0.8 * exact.history[-1]
    records = approximate.synthetic(1000, seed=0)
    assert all(v.min() >= 0 and v.max() < 3 for v in records.values())


@pytest.mark.parametrize("kind", ["l2", "l1"])
def test_accelerated_descent_reaches_plain_mirror_descents_optimum_in_fewer_steps_never_rising(kind):
    """Both methods minimise the same convex loss over the local polytope: in 600 steps the accelerated one ends
    at least as low as plain descent in 3000 (for least squares, within 1e-3 of it), gets within 1e-3 of the
    best in fewer steps, and its accepted losses never rise (restarts)."""
    from ektelo_ng.operators.pgm.accelerated import accelerated_descent
    from ektelo_ng.operators.pgm.loss import terms
    from ektelo_ng.operators.pgm.mirror import mirror_descent
    from ektelo_ng.operators.pgm.regions import RegionEngine

    rng = np.random.default_rng(13)
    sizes = (3, 3, 2, 2, 3)
    cliques = list(itertools.combinations(range(5), 2))
    all_terms = terms(measure(network(sizes, rng, total=2000.0), cliques, rng, 8.0), sizes, kind, 10**6)
    runs = {}
    for name, method, steps in (("mirror", mirror_descent, 3000), ("accelerated", accelerated_descent, 600)):
        _, runs[name] = method(RegionEngine(cliques, sizes, all_terms, 2000.0), all_terms, steps, 1e-14)
    best = min(runs["mirror"][-1], runs["accelerated"][-1])
    assert runs["accelerated"][-1] <= runs["mirror"][-1] * (1 + 1e-6)  # as low (plain descent is still creeping)
    if kind == "l2":  # smooth: both converge; the smoothed L1 stalls plain descent's line search far above (49 vs 41)
        assert runs["accelerated"][-1] == pytest.approx(runs["mirror"][-1], rel=1e-3)
    reach = {name: next((i for i, v in enumerate(h) if v <= best * (1 + 1e-3)), math.inf) for name, h in runs.items()}
    assert reach["accelerated"] < reach["mirror"], reach
    assert all(b <= a for a, b in zip(runs["accelerated"], runs["accelerated"][1:]))


def test_tuple_measurements_may_name_their_attributes():
    from ektelo_ng.kernel.domain import Domain

    domain = Domain.from_sizes(SIZES, names=[f"v{i}" for i in range(len(SIZES))])
    joint = 500 * np.random.default_rng(5).dirichlet(np.ones(36)).reshape(SIZES)
    measurements = measure(joint, CYCLE, np.random.default_rng(6), 1.0)
    named = [(tuple(f"v{i}" for i in c), *rest) for c, *rest in measurements]
    assert fit(domain, named, iterations=50).history == fit(domain, measurements, iterations=50).history
    backwards = [(tuple(reversed(named[0][0])), *named[0][1:])]
    with pytest.raises(ValueError, match="sorted positions"):
        fit(domain, backwards)
