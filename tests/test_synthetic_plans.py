"""MST and AIM as plans (issue 34): they spend exactly their budget through vetted kernel operations, find the
structure a table has (with power: AIM sees a 3-way dependence no spanning tree of pairs can), merge rare values,
and their records keep the fitted marginals; the fit's warm start and its stopping rule."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import ektelo_ng as ek
from ektelo_ng.operators import pgm
from ektelo_ng.operators.matrix import Identity
from ektelo_ng.operators.pgm.compressed import CompressedModel
from ektelo_ng.operators.pgm.exact import ExactEngine, warm_potentials
from ektelo_ng.operators.pgm.junction import junction_tree
from ektelo_ng.plans import catalog, info
from ektelo_ng.plans.aim import _candidates, aim
from ektelo_ng.plans.mst import mst


def chain(rows: int, seed: int = 0) -> tuple[dict, dict]:
    """a -> b -> c -> d, each a noisy copy of the last; e independent; f never takes its values 3 to 7."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, rows)
    b = (a + (rng.random(rows) < 0.1)) % 4
    c = (b + (rng.random(rows) < 0.1)) % 4
    d = (c + (rng.random(rows) < 0.1)) % 4
    return ({"a": a, "b": b, "c": c, "d": d, "e": rng.integers(0, 3, rows), "f": rng.integers(0, 3, rows)},
            {"a": 4, "b": 4, "c": 4, "d": 4, "e": 3, "f": 8})


def spent(session) -> Fraction:
    return session.budget.spent.rho


def test_mst_spends_exactly_its_budget_and_finds_the_chain():
    columns, sizes = chain(20_000)
    session = ek.protect(columns, sizes, ek.ZCDP(2), seed=1)
    model = mst(session.source, None, ek.ZCDP(2), iterations=200)
    assert spent(session) <= Fraction(2) and spent(session) > Fraction(2) * (1 - Fraction(1, 10**9))
    assert {"a-b", "b-c", "c-d"} <= set(model.note.split("(")[1].split(")")[0].split(", "))


def test_mst_merges_values_no_record_has_and_its_records_rarely_take_them():
    columns, sizes = chain(20_000)
    model = mst(ek.protect(columns, sizes, ek.ZCDP(2), seed=2).source, None, ek.ZCDP(2), iterations=300)
    assert isinstance(model, CompressedModel) and set(model.codes[5][3:]) == {3}  # f's values 3..7 merged into one
    records = model.synthetic(seed=0)
    assert np.mean(records["f"] >= 3) < 0.01
    assert model.marginal(["f"])[3:] == pytest.approx(np.full(5, model.inner.marginal(["f"])[3] / 5))


def test_mst_takes_an_approx_dp_budget_and_refuses_a_pure_one():
    columns, sizes = chain(2_000)
    session = ek.protect(columns, sizes, ek.ZCDP(1), seed=3)
    mst(session.source, None, ek.ApproxDP(1, 1e-9))
    assert float(spent(session)) == pytest.approx(ek.ApproxDP(1, 1e-9).zcdp().rho, rel=1e-9)
    with pytest.raises(ValueError, match="zCDP"):
        mst(ek.protect(columns, sizes, ek.PureDP(1)).source, None, ek.PureDP(1))


def xor_table(rows: int, seed: int = 0) -> tuple[dict, dict]:
    """c = a xor b: every pair is independent, the triple is not."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 2, rows), rng.integers(0, 2, rows)
    return {"a": a, "b": b, "c": a ^ b, "d": rng.integers(0, 2, rows)}, {"a": 2, "b": 2, "c": 2, "d": 2}


def three_way_error(columns, sizes, records) -> float:
    rows = len(next(iter(columns.values())))
    errors = []
    for triple in itertools.combinations(sizes, 3):
        def counts(data):
            return np.histogramdd(np.column_stack([data[a] for a in triple]), bins=[sizes[a] for a in triple],
                                  range=[(0, sizes[a]) for a in triple])[0] / len(data[triple[0]])
        errors.append(np.abs(counts(columns) - counts(records)).sum())
    return float(np.mean(errors)) if rows else 0.0


def test_aim_spends_exactly_its_budget_and_sees_a_three_way_dependence_mst_cannot():
    columns, sizes = xor_table(20_000)
    session = ek.protect(columns, sizes, ek.ZCDP(5), seed=4)
    model = aim(session.source, None, ek.ZCDP(5), rounds_per_attribute=4)
    assert spent(session) <= 5 and spent(session) > 5 * (1 - Fraction(1, 10**6))
    assert any(set(r["pick"]) >= {"a", "b", "c"} for r in model.rounds)
    tree = mst(ek.protect(columns, sizes, ek.ZCDP(5), seed=4).source, None, ek.ZCDP(5))
    ours, theirs = (three_way_error(columns, sizes, m.synthetic(seed=0)) for m in (model, tree))
    assert ours < 0.05 < theirs  # a tree of pairs spreads a xor b evenly: about 0.5 off on (a, b, c)


def test_aim_candidates_are_the_workloads_subsets_weighted_by_overlap():
    session = ek.protect({"a": [0], "b": [0], "c": [0]}, {"a": 2, "b": 2, "c": 2}, ek.ZCDP(1))
    subsets, weights = _candidates(session.source, [("a", "b"), ("b", "c")])
    assert dict(zip(subsets, weights)) == {("a",): 1, ("b",): 2, ("c",): 1, ("a", "b"): 3, ("b", "c"): 3}


@pytest.mark.parametrize("name", ["MST", "AIM"])
def test_the_catalog_runs_them_as_model_plans(name):
    columns, sizes = chain(3_000)
    session = ek.protect(columns, sizes, ek.ZCDP(1), seed=5)
    params = {**info[name].defaults, **({"rounds_per_attribute": 2} if name == "AIM" else {})}
    model = catalog[name](session.source, None, ek.ZCDP(1), **params)
    assert info[name].model and model.synthetic(100, seed=0)["a"].shape == (100,)


# ---- the model's records keep its marginals, and the fit ---------------------------------------------------------


def test_compressed_records_keep_the_models_marginals_and_a_skewed_sampler_fails():
    """Chi-square of 20,000 records against the model's own 2-way marginal (merged values spread evenly): accepted;
    the same test rejects records that put every merged value's mass on its first original value."""
    columns, sizes = chain(20_000)
    model = mst(ek.protect(columns, sizes, ek.ZCDP(1), seed=6).source, None, ek.ZCDP(1), iterations=300)
    records = model.synthetic(20_000, seed=1)
    expected = model.marginal(["e", "f"]).ravel() / model.total * 20_000
    keep = expected > 5
    observed = np.histogram2d(records["e"], records["f"], bins=[3, 8], range=[(0, 3), (0, 8)])[0].ravel()
    assert stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()).pvalue > 1e-4
    skewed = dict(records)
    skewed["f"] = np.where(records["f"] >= 3, 3, records["f"])
    lopsided = np.histogram2d(skewed["e"], skewed["f"], bins=[3, 8], range=[(0, 3), (0, 8)])[0].ravel()
    merged = model.inner.marginal(["f"])[3] / model.total
    if merged * 20_000 > 200:  # enough merged mass for the test to see where it went
        assert stats.chisquare(lopsided[keep], expected[keep] * lopsided[keep].sum() / expected[keep].sum()).pvalue < 1e-4


def fitted(columns, sizes, cliques, iterations=pgm.ITERATIONS, tol=pgm.TOLERANCE, start=None):
    domain = ek.Domain.from_dict(sizes)
    names = list(sizes)
    measurements = []
    for c in cliques:
        counts = np.histogramdd(np.column_stack([columns[names[i]] for i in c]), bins=[sizes[names[i]] for i in c],
                                range=[(0, sizes[names[i]]) for i in c])[0].ravel()
        measurements.append((c, Identity(counts.size), counts + 1.0, 1.0))
    return pgm.fit(domain, measurements, iterations=iterations, tol=tol, start=start)


def test_a_warm_start_lays_the_last_model_on_a_bigger_tree_unchanged():
    columns, sizes = chain(5_000)
    first = fitted(columns, sizes, [(0, 1), (1, 2)], iterations=200)
    tree = junction_tree([(0, 1), (1, 2), (2, 3)], list(sizes.values()), 1e6)
    engine = ExactEngine(tree, [], first.total, warm_potentials(tree, first))
    counts = engine.start()[1]
    for j, clique in enumerate(tree.cliques):
        assert counts[j] == pytest.approx(first.marginal(list(clique)), rel=1e-8, abs=1e-9)


def test_the_fit_stops_when_converged_and_says_so():
    columns, sizes = chain(5_000)
    model = fitted(columns, sizes, [(0, 1), (1, 2), (2, 3), (4,), (5,)])
    assert model.converged and len(model.history) - 1 < pgm.ITERATIONS
    capped = fitted(columns, sizes, [(0, 1), (1, 2), (2, 3), (4,), (5,)], iterations=5, tol=0.0)
    assert not capped.converged and len(capped.history) == 6
    warm = fitted(columns, sizes, [(0, 1), (1, 2), (2, 3), (4,), (5,)], start=model)
    assert len(warm.history) < len(model.history) / 2  # from the optimum: a few windows to confirm it


@pytest.mark.parametrize("rho", [Fraction(1, 3), Fraction(7, 1000), Fraction(1, 10**9), Fraction(10**6, 7)])
def test_a_rounds_epsilon_is_the_largest_on_the_grid_within_its_rho(rho):
    from ektelo_ng.kernel.privacy import AMOUNT_GRID
    from ektelo_ng.plans.marginal_rounds import selection_epsilon

    epsilon = selection_epsilon(rho)
    assert epsilon * epsilon / 8 <= rho < (epsilon + Fraction(1, AMOUNT_GRID)) ** 2 / 8


def test_records_keep_every_tree_cliques_marginal_within_rounding_where_independent_draws_do_not():
    """Controlled rounding: each clique's counts in 20,000 records lie within a few records of the model's (the
    depth of the tree), where independent draws from the same conditionals stray by tens (sqrt of the counts)."""
    columns, sizes = chain(20_000)
    model = fitted(columns, sizes, [(0, 1), (1, 2), (2, 3), (3, 4), (5,)], iterations=300)
    records = model.synthetic(20_000, seed=0)
    names = list(sizes)

    def worst(data) -> float:
        gaps = []
        for clique in model.tree.cliques:
            counts = np.histogramdd(np.column_stack([data[names[i]] for i in clique]),
                                    bins=[sizes[names[i]] for i in clique],
                                    range=[(0, sizes[names[i]]) for i in clique])[0]
            gaps.append(np.abs(counts - model.marginal(list(clique)) * 20_000 / model.total).max())
        return max(gaps)

    assert worst(records) <= len(model.tree.cliques) + 1
    rng = np.random.default_rng(0)
    joint = model.marginal(list(range(len(sizes)))).ravel()
    drawn = np.unravel_index(rng.choice(joint.size, 20_000, p=joint / joint.sum()), list(sizes.values()))
    assert worst(dict(zip(names, drawn))) > 3 * (len(model.tree.cliques) + 1)


def test_the_fit_runs_its_linear_algebra_on_one_blas_thread():
    """Issue 37's discipline for the graphical-model fit: on a shared machine a second BLAS thread per process
    oversubscribes the cores (one fit took 47 s instead of 6.7 s)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> set[int]:
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}

    seen = []
    columns, sizes = chain(2_000)
    domain = ek.Domain.from_dict(sizes)
    counts = np.bincount(columns["a"] * 4 + columns["b"], minlength=16).astype(float)
    with threadpool_limits(limits=2, user_api="blas"):  # the suite runs on one thread: give the fit two to refuse
        assert blas_threads() == {2}
        pgm.fit(domain, [((0, 1), Identity(16), counts, 1.0)], iterations=3, tol=0.0,
                callback=lambda i, loss: seen.append(blas_threads()))
        assert blas_threads() == {2}  # restored after the fit
    assert seen and all(threads == {1} for threads in seen)
