"""Batched requests: ``vectorize_many`` and ``gaussian_batch`` must be exactly the separate requests they
stand for (same counts and lineage; same sensitivity, scale, grid and charge per measurement, composed in
order), all or nothing, with noise of the stated law. Also the accountant's ``charge_many`` against
sequential charges on random lineages, and the kernel pieces made faster alongside (narrow counting
indices, cached domain lookups, exact rho parsing)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import ektelo_ng as ek
from ektelo_ng.kernel.accountant import Accountant, BudgetExceeded
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.operators.matrix import Dense, Identity, Kronecker, Total, VStack
from ektelo_ng.operators.matrices import Prefix
from ektelo_ng.kernel.noise import NoiseSource, discrete_gaussian
from ektelo_ng.kernel.privacy import PureDP, ZCDP
from ektelo_ng.kernel.table import NumpyTable
from ektelo_ng.operators.client import BudgetExceededError, InvalidRequestError, UnknownSourceError
from ektelo_ng.operators.normal_form import normal_form
from tests.budget_model import BudgetModel

SIZES = {"a": 3, "b": 4, "c": 5}


def data(rows=300, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.integers(0, n, rows) for name, n in SIZES.items()}


def session(budget=ek.ZCDP(10), seed=1, **kwargs):
    return ek.protect(data(), ek.Domain.from_dict(SIZES), budget, seed=seed, **kwargs)


def truth(columns, names):
    flat = np.ravel_multi_index([columns[n] for n in names], [SIZES[n] for n in names])
    return np.bincount(flat, minlength=int(np.prod([SIZES[n] for n in names])))


def vector_count(s) -> int:
    return sum(1 for _, d in s.lineage().nodes(data=True) if d["kind"] == "vector")


# ---- vectorize_many -----------------------------------------------------------------------


def test_vectorize_many_is_one_vectorize_per_entry():
    s = session(budget=ek.ZCDP(10**13))
    lists = [["a", "b"], ["c"], ["b", "c"], ["c", "a"]]
    many = s.source.vectorize_many(lists)
    single = [s.source.vectorize(names) for names in lists]
    lineage = s.lineage()
    for handle, one, names in zip(many, single, lists):
        assert handle.kind == "vector" and handle.size == one.size
        (parent,) = lineage.predecessors(handle.id)
        assert parent == s.source.id and lineage.edges[parent, handle.id]["op"] == "vectorize"
        assert lineage.edges[parent, handle.id]["stability"] == "1"
        assert lineage.nodes[handle.id]["attributes"] == lineage.nodes[one.id]["attributes"]
        assert lineage.nodes[handle.id]["attributes"] == sorted(names, key=list(SIZES).index)
        # the counts themselves: measured with a huge budget they round to the truth
        answer = handle.gaussian(Identity(handle.size), rho=10**12 / 4)
        ordered = sorted(names, key=list(SIZES).index)
        np.testing.assert_array_equal(np.rint(answer.values), truth(data(), ordered))


def test_vectorize_many_makes_all_or_nothing():
    s = session()
    before = vector_count(s)
    with pytest.raises(InvalidRequestError, match="unknown attribute"):
        s.source.vectorize_many([["a"], ["b"], ["nope"]])
    with pytest.raises(ValueError):
        s.source.vectorize_many([["a"], []])  # an empty attribute list is malformed (refused by the client)
    assert vector_count(s) == before
    x = s.source.vectorize()
    with pytest.raises(InvalidRequestError, match="needs a table"):
        x.vectorize_many([["a"]])


# ---- gaussian_batch: each item exactly its own request ---------------------------------------

WEIRD = Dense(np.linspace(-1.0, 2.0, 12).reshape(3, 4))  # non-binary, rounding slack and column norms differ


def measurements(s):
    x = s.source.vectorize()
    ab, bc = s.source.vectorize(["a", "b"]), s.source.vectorize(["b", "c"])
    shared = VStack([Kronecker([Identity(3), Total(4)]) * 0.5, Kronecker([Total(3), WEIRD])])
    return [
        (ab, shared, Fraction(1, 7)),
        (bc, Kronecker([Prefix(4), Identity(5)]), Fraction(1, 3)),
        (ab, shared, Fraction(1, 7)),  # the same source and matrix again: composes sequentially
        (x, Identity(x.size) * 3.0, Fraction(2, 9)),
        (bc, Kronecker([Identity(4), Total(5)]), Fraction(1, 5)),
        (ab, shared, Fraction(1, 11)),  # the shared matrix at another rho: another scale
    ]


def test_each_item_gets_exactly_the_scale_grid_and_charge_of_its_own_request():
    batch_session, single_session = session(), session()
    items = measurements(batch_session)
    batch = batch_session.gaussian_batch([h for h, _, _ in items], [m for _, m, _ in items], rho=[r for *_, r in items])
    single = [h.gaussian(m, rho=r) for h, m, r in measurements(single_session)]
    assert len(batch) == len(single)
    for b, one, (_, matrix, rho) in zip(batch, single, items):
        assert (b.noise, b.scale, b.grid, b.charge) == (one.noise, one.scale, one.grid, one.charge) and b.seeded
        assert b.charge == ek.ZCDP(rho) and b.values.shape == (matrix.shape[0],)
    assert batch_session.budget.spent == single_session.budget.spent == ek.ZCDP(sum(r for *_, r in items))
    spent_batch = sorted(v.rho for v in batch_session.budget.per_source.values())
    spent_single = sorted(v.rho for v in single_session.budget.per_source.values())
    assert spent_batch == spent_single


def test_sigma_items_are_charged_as_sigma_requests():
    batch_session, single_session = session(), session()
    items = measurements(batch_session)[:3]
    sigmas = [1.5, 0.75, 3.0]
    batch = batch_session.gaussian_batch([h for h, _, _ in items], [m for _, m, _ in items], sigma=sigmas)
    single = [h.gaussian(m, sigma=sg) for (h, m, _), sg in zip(measurements(single_session)[:3], sigmas)]
    for b, one in zip(batch, single):
        assert (b.scale, b.grid, b.charge) == (one.scale, one.grid, one.charge)
    assert batch_session.budget.spent == single_session.budget.spent


def test_batches_through_partitions_and_stable_transforms_compose_as_separate_requests():
    """Parts of a split compose in parallel (max), a 2-stable transform costs 4x under zCDP: a batch over
    them spends what the same requests one at a time spend."""

    def build(s):
        x = s.source.vectorize(["b", "c"])
        parts = x.split_by_partition(np.repeat(np.arange(4), 5))
        doubled = x.transform(Identity(x.size) * 2.0)
        return [(parts[0], Identity(5), Fraction(1, 4)), (parts[1], Identity(5), Fraction(1, 8)),
                (parts[0], Total(5), Fraction(1, 8)), (doubled, Identity(x.size), Fraction(1, 16)),
                (parts[3], Identity(5), Fraction(1, 2))]

    batch_session, single_session = session(), session()
    items = build(batch_session)
    batch_session.gaussian_batch([h for h, _, _ in items], [m for _, m, _ in items], rho=[r for *_, r in items])
    for h, m, r in build(single_session):
        h.gaussian(m, rho=r)
    # parts: max(1/4 + 1/8, 1/8, 1/2) = 1/2; the doubled vector: 4 * 1/16
    assert batch_session.budget.spent == single_session.budget.spent == ek.ZCDP(Fraction(1, 2) + Fraction(1, 4))


def test_a_batch_is_all_or_nothing():
    s = session(budget=ek.ZCDP(1))
    x = s.source.vectorize(["a", "b"])
    y = s.source.vectorize(["c"])
    s.gaussian_batch([x], [Identity(x.size)], rho=[Fraction(1, 2)])
    entries = len(s.transcript())
    with pytest.raises(BudgetExceededError, match="nothing was measured or charged"):
        s.gaussian_batch([x, y, x], [Identity(x.size), Identity(y.size), Identity(x.size)],
                         rho=[Fraction(1, 4), Fraction(1, 8), Fraction(1, 4)])  # 5/8 > the 1/2 left
    bad = [
        ([x, y], [Identity(x.size), Identity(x.size)]),  # the second item's matrix does not fit its vector
        ([x, y], [Identity(x.size), Identity(y.size) * 0.0]),  # measures nothing
    ]
    for handles, matrices in bad:
        with pytest.raises(InvalidRequestError):
            s.gaussian_batch(handles, matrices, rho=[Fraction(1, 8)] * len(handles))
    other = session(budget=ek.ZCDP(1)).source.vectorize(["a"])
    forged = type(x).__new__(type(x))
    forged.__dict__.update(x.__dict__, id=other.id)  # another kernel's source id sent to this one
    with pytest.raises(UnknownSourceError):
        s.gaussian_batch([x, forged], [Identity(x.size), Identity(x.size)], rho=[Fraction(1, 8)] * 2)
    assert s.budget.spent == ek.ZCDP("1/2")
    assert [e["outcome"] for e in s.transcript()[entries:] if e["op"] == "gaussian_batch"] == [
        "budget_exceeded", "invalid_request", "invalid_request", "unknown_source"]
    with pytest.raises(InvalidRequestError, match="zCDP session"):
        pure = session(budget=ek.PureDP(1)).source.vectorize(["a"])
        pure.session.gaussian_batch([pure], [Identity(3)], rho=[Fraction(1, 2)])


def test_the_client_checks_its_arguments_and_the_kernel_its_matrix_indices():
    s = session()
    x = s.source.vectorize(["a"])
    with pytest.raises(ValueError, match="exactly one of rho or sigma"):
        s.gaussian_batch([x], [Identity(3)])
    with pytest.raises(ValueError, match="one of each"):
        s.gaussian_batch([x, x], [Identity(3)], rho=[1, 1])
    with pytest.raises(ValueError, match="this session"):
        session().gaussian_batch([x], [Identity(3)], rho=[1])
    from ektelo_ng.kernel import protocol as p

    reply = s.transport(p.GaussianBatch.model_construct(
        op="gaussian_batch", matrices=[normal_form(Identity(3))],
        items=[p.GaussianItem(source=x.id, matrix=1, rho=Fraction(1))]).model_dump_json())
    assert '"invalid_request"' in reply and "matrix 1" in reply
    assert s.budget.spent == ek.ZCDP.zero()


def test_the_transcript_records_the_batch_and_its_total_charge_without_data():
    s = session()
    items = measurements(s)
    s.gaussian_batch([h for h, _, _ in items], [m for _, m, _ in items], rho=[r for *_, r in items])
    (entry,) = [e for e in s.transcript() if e["op"] == "gaussian_batch"]
    assert Fraction(entry["charge"]) == sum(r for *_, r in items) and entry["outcome"] == "ok"
    assert len(entry["items"]) == len(items) and len(entry["matrices"]) == 4  # the shared matrix once
    assert "base64" not in str(entry)


def test_seeded_batches_repeat_and_secure_ones_do_not():
    def answers(seed):
        s = session(seed=seed)
        items = measurements(s)
        return s.gaussian_batch([h for h, _, _ in items], [m for _, m, _ in items], rho=[r for *_, r in items])

    first, again = answers(5), answers(5)
    assert all(np.array_equal(a.values, b.values) and a.seeded for a, b in zip(first, again))
    secure = answers(None)
    assert not secure[0].seeded and not np.array_equal(secure[0].values, answers(None)[0].values)


def test_batched_noise_has_the_stated_scale_and_the_test_has_power():
    """Items sharing a law draw their noise together: the residuals of each item must follow its own
    stated N(0, scale^2), here for two laws interleaved in one batch (scales 4x apart)."""
    s = ek.protect({"v": np.zeros(1, dtype=int)}, ek.Domain.from_dict({"v": 500}), ek.ZCDP(100), seed=11)
    x = s.source.vectorize()  # one record, in cell 0
    M = Identity(x.size) * 0.37  # non-integral answers exercise the grid rounding
    rhos = [Fraction(1, 2), Fraction(1, 32)] * 20
    answers = s.gaussian_batch([x] * len(rhos), [M] * len(rhos), rho=rhos)
    exact = M @ np.eye(1, x.size).ravel()
    for rho in set(rhos):
        mine = [a for a, r in zip(answers, rhos) if r == rho]
        assert len({(a.scale, a.grid) for a in mine}) == 1
        scale, grid = mine[0].scale, mine[0].grid
        # the exact sampler draws scales of 11 significant bits: at most 2^-10 above, plus float-error terms
        assert 0.37 / np.sqrt(2 * float(rho)) <= scale <= 0.37 / np.sqrt(2 * float(rho)) * (1 + 2**-9)
        residuals = np.concatenate([a.values - exact for a in mine])

        def accepted(factor):
            return stats.kstest(residuals, stats.norm(scale=factor * scale).cdf).pvalue > 1e-6

        assert accepted(1.0) and not accepted(0.7) and not accepted(1.3)
        codes = np.concatenate([a.values for a in mine]) / grid
        np.testing.assert_array_equal(codes, np.rint(codes))  # on the release grid


def test_a_ledger_records_the_whole_batch_before_answering(tmp_path):
    path = tmp_path / "ledger.sqlite"
    s = session(budget=ek.ZCDP(1), ledger=path)
    items = measurements(s)
    s.gaussian_batch([h for h, _, _ in items], [m for _, m, _ in items], rho=[r / 4 for *_, r in items])
    spent = s.budget.spent
    assert spent == ek.ZCDP(sum(r / 4 for *_, r in items))
    assert session(budget=ek.ZCDP(1), ledger=path).budget.spent == spent  # a restart keeps it


# ---- the accountant: charge_many is sequential charges, all or none ----------------------------

stabilities = st.sampled_from([Fraction(1), Fraction(2), Fraction(1, 2), Fraction(3)])
costs = st.sampled_from([Fraction(1, 10), Fraction(1, 4), Fraction(1, 3), Fraction(1), Fraction(0)])


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from([PureDP, ZCDP]))
def test_charge_many_matches_sequential_charges_and_the_model(data, kind):
    accountants = [Accountant(kind(Fraction(5, 2)), "root") for _ in range(2)]
    model = BudgetModel(quadratic=kind is ZCDP)
    names = iter(f"n{i}" for i in range(1000))
    for _ in range(data.draw(st.integers(0, 6))):
        parent = data.draw(st.sampled_from(model.sources()))
        if data.draw(st.booleans()):
            name, stability = next(names), data.draw(stabilities)
            for a in accountants:
                a.add(name, parent, stability)
            model.add(name, parent, stability)
        else:
            node, parts = next(names), [next(names) for _ in range(data.draw(st.integers(1, 3)))]
            for a in accountants:
                a.add(node, parent, Fraction(1), is_partition=True)
                for part in parts:
                    a.add(part, node, Fraction(1))
            model.split(node, parent, parts)
    for _ in range(data.draw(st.integers(0, 2))):  # some spend already
        node, cost = data.draw(st.sampled_from(model.sources())), data.draw(costs)
        model.measured[node] += cost
        if model.loss() > Fraction(5, 2):
            model.measured[node] -= cost
            continue
        for a in accountants:
            a.charge(node, cost)
    charges = data.draw(st.lists(st.tuples(st.sampled_from(model.sources()), costs), min_size=1, max_size=8))
    batched, sequential = accountants
    before = {n: batched.spent(n) for n in model.sources()}
    try:
        for node, cost in charges:
            sequential.charge(node, cost)
        refused = False
    except BudgetExceeded:
        refused = True
    if refused:
        with pytest.raises(BudgetExceeded):
            batched.charge_many(charges)
        assert {n: batched.spent(n) for n in model.sources()} == before  # nothing changed
    else:
        batched.charge_many(charges)
        for node, cost in charges:
            model.measured[node] += cost
        assert batched.spent() == model.loss() <= Fraction(5, 2)
        assert {n: batched.spent(n) for n in model.sources()} == {n: sequential.spent(n) for n in model.sources()}


def test_charge_many_reads_the_spends_planned_earlier_in_the_batch():
    """Parts of one split take the max, and each step sees the spends the earlier steps of the batch
    planned (reading the stored ones instead would get 1/8 at p0 and the wrong max); a batch whose first
    step alone would fit but whose second would not is refused whole."""
    a = Accountant(ZCDP(1), "root")
    a.add("split", "root", Fraction(1), is_partition=True)
    a.add("p0", "split", Fraction(1))
    a.add("p1", "split", Fraction(1))
    a.charge_many([("p0", Fraction(1, 4)), ("p1", Fraction(1, 4)), ("p0", Fraction(1, 8))])
    assert a.spent() == Fraction(3, 8) and a.spent("p0") == Fraction(3, 8) and a.spent("p1") == Fraction(1, 4)
    with pytest.raises(BudgetExceeded):
        a.charge_many([("p1", Fraction(1, 2)), ("p1", Fraction(1, 2))])  # p1 would reach 5/4 > 1
    assert a.spent("p1") == Fraction(1, 4)
    assert a.spent() == Fraction(3, 8)


# ---- the faster pieces -------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [[2, 3], [10, 10, 10], [300, 250], [70_000, 70]])
def test_histograms_in_narrow_index_types_match_a_plain_count(sizes):
    """Cell indices are accumulated in uint8 / uint16 / uint32 (by the number of cells): no overflow."""
    rng = np.random.default_rng(sum(sizes))
    domain = Domain.from_sizes(sizes)
    columns = {n: rng.integers(0, s, 4000) for n, s in zip(domain.names, sizes)}
    for name in domain.names:
        columns[name][:5] = domain[name].size - 1  # the largest cell index is used
    counts = NumpyTable(domain, columns).histogram(range(len(sizes)))
    expected = np.zeros(sizes, dtype=np.int64)
    np.add.at(expected, tuple(columns[n] for n in domain.names), 1)
    assert counts.dtype == np.int64
    np.testing.assert_array_equal(counts, expected)


def test_domain_lookups_and_validation():
    domain = Domain.from_sizes([2, 3, 4], names=["x", "y", "z"])
    assert domain.index("z") == 2 and domain.indices(["y", "x"]) == (1, 0) and domain.index(1) == 1
    assert domain == Domain.from_sizes([2, 3, 4], names=["x", "y", "z"])  # cached lookups do not affect equality
    with pytest.raises(ValueError, match="unknown attribute 'w'"):
        domain.index("w")
    other = domain.model_copy(update={"attributes": domain.attributes[::-1]})  # no stale cached lookups
    assert other.names == ("z", "y", "x") and other.sizes == (4, 3, 2) and other.index("z") == 0
    assert domain.names == ("x", "y", "z")
    with pytest.raises(ValueError, match=r"repeated: \['x'\]"):
        Domain.from_sizes([2, 3, 4], names=["x", "y", "x"])


def test_exact_budget_parsing_keeps_its_checks():
    assert ZCDP(Fraction(1, 3)).rho == Fraction(1, 3) and ZCDP(2).rho == 2 and ZCDP(0.1).rho == Fraction(1, 10)
    for bad in (True, -1, Fraction(-1, 2), float("nan"), "x"):
        with pytest.raises(ValueError):
            ZCDP(bad)


def test_the_discrete_gaussian_in_blocks_returns_every_sample_with_the_right_spread():
    source = NoiseSource.seeded(9)
    for size in (0, 1, 1023, (1 << 16) + 17, 3 * (1 << 16)):
        samples = discrete_gaussian(source, 1000.5, size)
        assert samples.shape == (size,) and samples.dtype == np.int64
    assert stats.kstest(samples / 1000.5, "norm").pvalue > 1e-6
