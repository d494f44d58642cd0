"""PrivBayes's network through the kernel (operators.privbayes) and the plans PrivBayesLS and PrivBayes+PGM."""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations

import numpy as np
import pytest

import ektelo_ng as ek
from ektelo_ng.cli import main
from ektelo_ng.operators import privbayes
from ektelo_ng.plans import catalog, info
from ektelo_ng.plans.privbayes import measured

DOMAIN = {"a": 5, "b": 5, "c": 7, "d": 3}


def chain_table(rows: int = 20_000, seed: int = 0) -> dict[str, np.ndarray]:
    """a -> b -> c a noisy chain, d independent of all."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, rows)
    b = (a + rng.integers(0, 2, rows)) % 5
    c = (2 * b + rng.integers(0, 3, rows)) % 7
    return {"a": a, "b": b, "c": c, "d": rng.integers(0, 3, rows)}


def true_marginal(columns, names):
    shape = [DOMAIN[n] for n in names]
    flat = np.ravel_multi_index([columns[n] for n in names], shape)
    return np.bincount(flat, minlength=math.prod(shape)).reshape(shape)


def dependence(columns, child, parents) -> float:
    counts = true_marginal(columns, [child, *parents]).reshape(DOMAIN[child], -1).astype(float)
    n = counts.sum()
    return float(np.abs(counts - np.outer(counts.sum(1), counts.sum(0)) / n).sum())


def greedy_argmax(columns, first, degree):
    """The network PrivBayes's greedy steps choose with exact scores and no noise."""
    chosen, placed = [(first, ())], [first]
    while len(placed) < len(DOMAIN):
        k = min(degree, len(placed))
        candidates = [(x, ps) for x in DOMAIN if x not in placed for ps in combinations(placed, k)]
        best = max(candidates, key=lambda c: dependence(columns, *c))
        chosen.append(best)
        placed.append(best[0])
    return chosen


def test_at_a_huge_epsilon_the_network_is_the_greedy_argmax_of_the_exact_scores():
    columns = chain_table()
    session = ek.protect(columns, DOMAIN, ek.PureDP(10**6), seed=3)
    chosen = privbayes.network(session.source, 3 * 10**5, degree=2, seed=5)
    assert chosen == greedy_argmax(columns, chosen[0][0], 2)
    edges = {(p, x) for x, ps in chosen for p in ps}
    assert {("a", "b"), ("b", "a")} & edges and {("b", "c"), ("c", "b")} & edges  # the chain is found


def test_the_network_places_every_attribute_once_with_parents_placed_before_it_and_spends_its_epsilon():
    session = ek.protect(chain_table(2000), DOMAIN, ek.PureDP(1), seed=0)
    chosen = privbayes.network(session.source, Fraction(1, 2), degree=2, max_cells=40, seed=1)
    assert sorted(child for child, _ in chosen) == sorted(DOMAIN)
    for position, (child, parents) in enumerate(chosen):
        earlier = {c for c, _ in chosen[:position]}
        assert set(parents) <= earlier and len(parents) <= 2
        assert DOMAIN[child] * math.prod(DOMAIN[p] for p in parents) <= 40  # max_cells: fewer parents when needed
    assert session.budget.spent.value == Fraction(1, 2)
    steps = [entry for entry in session.transcript() if entry["op"] == "privbayes_select"]
    assert len(steps) == len(DOMAIN) - 1


def test_cliques_drop_tables_inside_others():
    names = ["a", "b", "c", "d"]
    chosen = [("b", ()), ("a", ("b",)), ("c", ("a", "b")), ("d", ("c",)), ("d", ("c",))]
    assert privbayes.cliques(chosen, names) == [(0, 1, 2), (2, 3)]


@pytest.mark.parametrize("budget, kwargs, says", [
    (ek.PureDP(1), {"selection_share": ek.PureDP("1/2")}, "selection_share is a share of the budget"),
    (ek.PureDP(1), {"selection_share": 1}, "strictly between 0 and 1"),
    (ek.PureDP(1), {"selection_share": "x"}, "strictly between 0 and 1"),
    (ek.PureDP(1), {"degree": -1}, "degree"),
    (ek.PureDP(1), {"max_cells": 4}, "max_cells 4 is below the largest attribute"),
])
def test_bad_settings_are_refused_before_any_budget_is_spent(budget, kwargs, says):
    session = ek.protect(chain_table(500), DOMAIN, budget, seed=0)
    with pytest.raises(ValueError, match=says):
        catalog["PrivBayesLS"](session.source, None, budget, **kwargs)
    assert session.budget.spent.value == 0


def test_privbayes_ls_spends_exactly_its_budget_split_between_selection_and_measurement():
    columns = chain_table(5000)
    session = ek.protect(columns, DOMAIN, ek.PureDP(1), seed=2)
    chosen, measurements = measured(session.source, ek.PureDP(1), "1/4", 2, 10_000, 0, "test")
    spent = session.budget.spent.value
    assert spent == 1
    laplace = sum(Fraction(entry["charge"]) for entry in session.transcript() if entry["op"] == "laplace")
    assert laplace == Fraction(3, 4)
    for m in measurements:  # each conditional table at (3/4) / tables: Laplace std sqrt(2) / eps
        assert m.noise == "laplace" and m.noise_std == pytest.approx(math.sqrt(2) * len(measurements) / 0.75, rel=1e-3)
        assert set(m.attributes) in [set(privbayes.cliques(chosen, list(DOMAIN))[i]) for i in range(len(measurements))]


def test_privbayes_ls_estimates_the_data_vector_with_the_whole_budget():
    columns = chain_table(20_000)
    session = ek.protect(columns, DOMAIN, ek.PureDP(1), seed=4)
    estimate = catalog["PrivBayesLS"](session.source, None, ek.PureDP(1), **info["PrivBayesLS"].defaults, seed=0)
    assert session.budget.spent.value == 1 and len(estimate) == 5 * 5 * 7 * 3
    x = np.asarray(estimate).reshape(5, 5, 7, 3)
    assert abs(x.sum() - 20_000) < 300  # every measured table counts the records once
    assert "PrivBayes" in estimate.note


def l1_errors(columns, estimate_marginal, pairs) -> float:
    return float(np.mean([np.abs(estimate_marginal(pair) - true_marginal(columns, pair)).sum() for pair in pairs]))


def test_the_graphical_model_beats_least_squares_on_measured_and_unmeasured_marginals_over_seeds():
    """The same PrivBayes measurements, fitted by least squares on the data vector and by a graphical model: the
    model's L1 error (mean over the 2-way marginals inside a measured table, and over those outside every one,
    and over 4 seeds) is at most least squares'. Outside the measured tables least squares' minimum-norm
    solution spreads counts uniformly, which is far worse."""
    from ektelo_ng.operators import pgm
    from ektelo_ng.operators.inference import least_squares

    names = list(DOMAIN)
    columns = chain_table()
    scores = {"inside": [], "outside": []}
    for seed in range(4):
        session = ek.protect(columns, DOMAIN, ek.PureDP(1), seed=seed)
        chosen, measurements = measured(session.source, ek.PureDP(1), 0.3, 2, 10_000, seed, "test")
        tables = [set(m.attributes) for m in measurements]
        sizes = list(DOMAIN.values())
        x = least_squares([m.on_data_vector(sizes) for m in measurements]).reshape(sizes)
        model = pgm.fit(DOMAIN, measurements)

        def from_vector(pair):
            keep = [names.index(p) for p in pair]
            return x.sum(axis=tuple(i for i in range(len(names)) if i not in keep))

        for pair in combinations(names, 2):
            where = "inside" if any({names.index(p) for p in pair} <= t for t in tables) else "outside"
            scores[where].append((l1_errors(columns, from_vector, [pair]), l1_errors(columns, model.marginal, [pair])))
    for where, pairs in scores.items():
        least, fitted = np.mean(pairs, axis=0)
        assert fitted <= least, (where, fitted, least)
    assert scores["outside"], "every seed measured every pair: the test would not cover unmeasured marginals"


def test_run_privbayes_pgm_writes_synthetic_records_and_privbayes_ls_answers_a_workload(tmp_path, capsys):
    columns = chain_table(3000)
    table = tmp_path / "chain.csv"
    np.savetxt(table, np.column_stack([columns[n] for n in DOMAIN]), fmt="%d", delimiter=",",
               header=",".join(DOMAIN), comments="")
    domain = ",".join(f"{n}={s}" for n, s in DOMAIN.items())
    synthetic = tmp_path / "synthetic.csv"
    assert main(["run", "PrivBayes+PGM", "--table", str(table), "--domain", domain, "--budget", "epsilon=1",
                 "--workload", "kway:5x5x7x3:2", "--in-process", "--seed", "1", "--synthetic", str(synthetic)]) == 0
    rows = np.loadtxt(synthetic, delimiter=",", skiprows=1)
    assert rows.shape[1] == 4 and abs(len(rows) - 3000) < 300
    assert main(["run", "PrivBayesLS", "--table", str(table), "--domain", domain, "--budget", "epsilon=1",
                 "--workload", "kway:5x5x7x3:1", "--in-process", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "PrivBayesLS: 20 answers" in out and "spent epsilon = 1 of 1" in out
