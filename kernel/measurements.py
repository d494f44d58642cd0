"""The measurement requests: each validated and prepared from public facts only (its cost checked, its sensitivity,
scale, grid and charges derived), returned as a ``Measurement`` for ``Kernel.handle`` to plan, read, charge and
release. The privacy argument of each is its mechanism's card (``kernel.mechanisms``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from . import protocol as p
from .accountant import PLAN_STEPS
from .limits import OBJECT_STEPS, Cost, Work
from .matrix import SealedMatrix
from .mechanisms import dawa, efpa, exponential, gaussian, laplace, marginals, php, privbayes, release, structure_first
from .mechanisms.release import Prepared, release_many
from .noise import NoiseSource
from .sources import Sources, Table, Vector
from .transforms import check_histograms, projected


@dataclass(frozen=True)
class Measurement:
    """A measurement ready to run: the charges it needs; ``exact(work)``, the only step that reads the data (its
    pre-noise values or scores), run once the charges are known to fit; ``release(exact, noise)``, which only draws
    noise and cannot fail."""

    charges: list[tuple[str, Fraction]]
    exact: Callable[[Work], Any]
    release: Callable[[Any, NoiseSource], Any]


def _batch_matrices(
    sources: Sources, specs: list, columns: list[int | None], items: list[int], work: Work, more: Cost
) -> list[SealedMatrix]:
    """A batch's matrices, built once the whole batch's cost is checked: every matrix held at once, each applied
    to its ``items`` vectors in turn, every answer held until all are released, and ``more``."""
    costs = [SealedMatrix.cost(spec, sources.limits, cells, max(1, n)) for spec, cells, n in zip(specs, columns, items)]
    built = sum((c.build for c in costs), more)
    applied = Cost(sum(c.apply.steps for c in costs), max(c.apply.bytes for c in costs))
    _check(sources, "this batch", built + applied + release.cost(sum(c.rows * n for c, n in zip(costs, items))))
    return [SealedMatrix(spec, work) for spec in specs]


def _matrix(
    sources: Sources, spec, cells: int, work: Work, applications: int = 1, answers: bool = True
) -> SealedMatrix:
    """One matrix for ``cells``-cell vectors, applied ``applications`` times and its ``answers`` released (or
    not), its cost checked before it is built."""
    cost = SealedMatrix.cost(spec, sources.limits, cells)
    total = cost.build + cost.apply * applications
    _check(sources, "this matrix", total + release.cost(cost.rows) if answers else total)
    return SealedMatrix(spec, work)


def _answer(sources: Sources, source: str, prepared: Prepared, exact: Callable[[Work], np.ndarray]) -> Measurement:
    def release(values: np.ndarray, noise: NoiseSource) -> p.Answer:
        return p.Answer(
            values=p.ArrayData.of(prepared.release(values, noise)),
            noise=prepared.noise,
            scale=prepared.scale,
            grid=prepared.grid,
            charge=sources.accountant.as_budget(prepared.cost),
            seeded=noise.is_seeded,
        )

    return Measurement([(source, prepared.cost)], exact, release)


def _selection(
    sources: Sources, request, scores: Callable[[Work], Any], pick: Callable[[Any, NoiseSource], Any]
) -> Measurement:
    """An exponential-mechanism request charged eps (eps^2/8 under zCDP)."""
    charge = exponential.cost(request.epsilon, sources.accountant.kind)

    def release(exact, noise: NoiseSource) -> p.Selected | p.Splits:
        choice, budget = pick(exact, noise), sources.accountant.as_budget(charge)
        if isinstance(choice, list):
            return p.Splits(indices=choice, charge=budget, seeded=noise.is_seeded)
        return p.Selected(index=choice, charge=budget, seeded=noise.is_seeded)

    return Measurement([(request.source, charge)], scores, release)


def _check(sources: Sources, what: str, cost: Cost) -> None:
    sources.limits.check(what, cost, sources.memory)


# ---- linear answers -----------------------------------------------------------------------------------------------


def laplace_answers(sources: Sources, request: p.Laplace, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    M = _matrix(sources, request.matrix, vector.values.size, work)
    prepared = laplace.prepare(M, vector.bound, request.epsilon, sources.accountant.kind)
    return _answer(sources, request.source, prepared, lambda work: M.apply(vector.values, work))


def gaussian_answers(sources: Sources, request: p.Gaussian, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    M = _matrix(sources, request.matrix, vector.values.size, work)
    prepared = gaussian.prepare(M, vector.bound, request.rho, request.sigma, sources.accountant.kind)
    return _answer(sources, request.source, prepared, lambda work: M.apply(vector.values, work))


def gaussian_batch(sources: Sources, request: p.GaussianBatch, work: Work) -> Measurement:
    """Each item exactly as its own ``gaussian`` request (same matrix, sensitivity, scale, grid, charge); the
    charges compose in order and are made together, all or none, before any noise is drawn."""
    vectors = [sources.get(item.source, Vector) for item in request.items]
    members: dict[int, list[int]] = {}  # the items of each matrix
    for position, item in enumerate(request.items):
        members.setdefault(item.matrix, []).append(position)
    widths = {j: vectors[items[0]].values.size for j, items in members.items()}
    for position, (item, vector) in enumerate(zip(request.items, vectors)):
        if widths[item.matrix] != vector.values.size:
            raise ValueError(f"item {position}: matrix {item.matrix} is used on vectors of different sizes")
    walks = sum(sources.accountant.walk(item.source) for item in request.items)  # each planned, then made
    matrices = _batch_matrices(
        sources,
        request.matrices,
        [widths.get(j) for j in range(len(request.matrices))],
        [len(members.get(j, [])) for j in range(len(request.matrices))],
        work,
        Cost(2 * OBJECT_STEPS * len(request.items) + 2 * PLAN_STEPS * walks),
    )
    work.step(2 * OBJECT_STEPS * len(request.items))
    prepared, memo = [], {}
    for item, vector in zip(request.items, vectors):
        key = (item.matrix, item.rho, item.sigma, vector.bound)
        if key not in memo:
            memo[key] = gaussian.prepare(
                matrices[item.matrix], vector.bound, item.rho, item.sigma, sources.accountant.kind
            )
        prepared.append(memo[key])

    def exact(work: Work) -> list[np.ndarray]:
        """Each matrix on all its items' vectors at once (stacked as columns: one pass over the matrix)."""
        out: list[np.ndarray | None] = [None] * len(vectors)
        for j, items in members.items():
            answers = matrices[j].apply(np.stack([vectors[i].values for i in items], axis=1), work)
            for column, i in enumerate(items):
                out[i] = answers[:, column]
        return out

    def release(values: list[np.ndarray], noise: NoiseSource) -> p.Answers:
        released = release_many(prepared, values, noise)
        return p.Answers(
            answers=[
                p.Answer(
                    values=p.ArrayData.of(v),
                    noise=q.noise,
                    scale=q.scale,
                    grid=q.grid,
                    charge=sources.accountant.as_budget(q.cost),
                    seeded=noise.is_seeded,
                )
                for q, v in zip(prepared, released)
            ]
        )

    return Measurement([(item.source, q.cost) for item, q in zip(request.items, prepared)], exact, release)


def noisy_count(sources: Sources, request: p.NoisyCount, work: Work) -> Measurement:
    source = sources.get(request.source)
    if isinstance(source, Table):
        size, total = sources.max_rows, lambda work: np.array([source.backend.count(source.predicate)])
    else:
        size, total = source.bound, lambda work: np.array([source.values.sum()])
    prepared = laplace.count(size, request.epsilon, sources.accountant.kind)
    return _answer(sources, request.source, prepared, total)


def dyadic_deviations(sources: Sources, request: p.DyadicDeviations, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    _check(sources, "DAWA's deviations", dawa.cost(vector.values.size))
    prepared = dawa.prepare(vector.values.size, vector.bound, request.epsilon, sources.accountant.kind)
    return _answer(
        sources, request.source, prepared, lambda work: dawa.deviations(vector.values.astype(np.float64), work)
    )


# ---- selections ---------------------------------------------------------------------------------------------------


def worst_approx(sources: Sources, request: p.WorstApprox, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    W = _matrix(sources, request.workload, vector.values.size, work, applications=2, answers=False)
    estimate = request.estimate.array()
    if estimate.shape != vector.values.shape or not np.all(np.isfinite(estimate)):
        raise ValueError(f"the estimate must be {vector.values.size} finite numbers, got shape {estimate.shape}")
    answers = exponential.offsets(W, estimate, work)
    sensitivity = exponential.sensitivity(W, vector.bound, answers, request.epsilon)
    return _selection(
        sources,
        request,
        lambda work: exponential.scores(W, vector.values, answers, work),
        lambda scores, noise: exponential.select(noise, scores, request.epsilon, sensitivity),
    )


def split_points(sources: Sources, request: p.SplitPoints, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    _check(sources, "PHP's split scores", php.check(request.intervals, vector.values.size))
    penalty = request.split_penalty
    by_length = {
        length: exponential.selectable(request.epsilon, php.sensitivity(length, vector.bound, penalty))
        for length in {stop - start for start, stop in request.intervals}
    }
    sensitivities = [by_length[stop - start] for start, stop in request.intervals]
    first = 1 if penalty is None else 0  # with a penalty, index 0 keeps the interval whole (released as None)

    def scores(work: Work) -> list[np.ndarray]:  # disjoint intervals: parallel composition, one charge of eps
        work.step(OBJECT_STEPS * len(request.intervals))
        return [php.scores(vector.values[a:b].astype(np.float64), work, penalty) for a, b in request.intervals]

    def pick(exact: list[np.ndarray], noise: NoiseSource) -> list[int | None]:
        picks = [exponential.select(noise, s, request.epsilon, d) + first for s, d in zip(exact, sensitivities)]
        return [None if k == 0 else start + k for (start, _), k in zip(request.intervals, picks)]

    return _selection(sources, request, scores, pick)


def choose_partition(sources: Sources, request: p.ChoosePartition, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    steps, cost = php.chain_check(request.cuts, vector.values.size)
    _check(sources, "PHP's partition scores", cost)
    sensitivity = exponential.selectable(
        request.epsilon, php.chain_sensitivity(vector.values.size, vector.bound, request.penalty)
    )
    return _selection(
        sources,
        request,
        lambda work: php.chain_scores(vector.values.astype(np.float64), steps, request.penalty, work),
        lambda scores, noise: exponential.select(noise, scores, request.epsilon, sensitivity),
    )


def fourier_select(sources: Sources, request: p.FourierSelect, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    offsets = request.offsets.array()
    _check(sources, "EFPA's Fourier scores", efpa.check(vector.values.size, offsets))
    sensitivity = exponential.selectable(
        request.epsilon, efpa.sensitivity(vector.values.size, vector.bound, offsets, work)
    )
    return _selection(
        sources,
        request,
        lambda work: efpa.scores(vector.values.astype(np.float64), offsets, work),
        lambda scores, noise: 1 + exponential.select(noise, scores, request.epsilon, sensitivity),
    )


def structure_first_boundaries(sources: Sources, request: p.StructureFirst, work: Work) -> Measurement:
    vector = sources.get(request.source, Vector)
    n = vector.values.size
    _check(sources, "StructureFirst's dynamic program", structure_first.check(n, request.buckets))
    sensitivity = exponential.selectable(
        request.epsilon / (request.buckets - 1),
        structure_first.sensitivity(n, request.bound, request.buckets, vector.bound),
    )
    return _selection(
        sources,
        request,
        lambda work: structure_first.bucket_costs(
            np.clip(vector.values.astype(np.float64), 0.0, request.bound), request.buckets - 1, work
        ),
        lambda costs, noise: structure_first.boundaries(noise, costs, request.buckets, request.epsilon, sensitivity),
    )


def privbayes_select(sources: Sources, request: p.PrivBayesSelect, work: Work) -> Measurement:
    table = sources.get(request.source, Table)
    tables = [projected(table, [child, *parents]) for child, parents in request.candidates]
    check_histograms(sources, tables)
    _check(sources, "PrivBayes's scores", privbayes.cost([t.domain.size for t in tables]))
    sensitivity = exponential.selectable(request.epsilon, privbayes.sensitivity(sources.max_rows))
    children = [table.backend.domain.index(child) for child, _ in request.candidates]

    def scores(work: Work) -> np.ndarray:
        out = []
        for t, child in zip(tables, children):
            work.step(64 * t.domain.size + OBJECT_STEPS)
            out.append(privbayes.score(t.backend.histogram(t.attributes, t.predicate), t.attributes.index(child)))
        return np.array(out)

    return _selection(
        sources, request, scores, lambda scores, noise: exponential.select(noise, scores, request.epsilon, sensitivity)
    )


def marginal_select(sources: Sources, request: p.MarginalSelect, work: Work) -> Measurement:
    table = sources.get(request.source, Table)
    tables = [projected(table, names) for names in request.candidates]
    check_histograms(sources, tables)
    maps = _recodings(table, request.recode)
    sizes = table.backend.domain.sizes
    shapes = [tuple(int(maps[i].max()) + 1 if i in maps else sizes[i] for i in t.attributes) for t in tables]
    recoded_axes = [sum(i in maps for i in t.attributes) for t in tables]
    _check(sources, "the marginals' scores", marginals.cost([t.domain.size for t in tables], recoded_axes))
    if any(e.dtype != "float64" for e in request.estimates):
        raise ValueError("estimates must be float64 arrays")
    estimates = [e.array() for e in request.estimates]
    for names, shape, estimate in zip(request.candidates, shapes, estimates):
        if estimate.shape != shape:
            raise ValueError(
                f"the estimate for {names} must have shape {list(shape)} (axes in the table's "
                f"attribute order, after recoding), got {list(estimate.shape)}"
            )
    norms = [marginals.checked(w, o, e) for w, o, e in zip(request.weights, request.offsets, estimates)]
    size = marginals.sensitivity(request.weights, request.offsets, norms, sources.max_rows)
    sensitivity = exponential.selectable(request.epsilon, size)

    def scores(work: Work) -> np.ndarray:
        out = []
        for t, axes, estimate, w, o in zip(tables, recoded_axes, estimates, request.weights, request.offsets):
            work.step(marginals.steps(t.domain.size, axes))
            counts = marginals.recoded(
                t.backend.histogram(t.attributes, t.predicate), [maps.get(i) for i in t.attributes]
            )
            out.append(marginals.score(counts, estimate, w, o))
        return np.array(out)

    return _selection(
        sources, request, scores, lambda scores, noise: exponential.select(noise, scores, request.epsilon, sensitivity)
    )


def _recodings(table: Table, recode: dict[str, p.ArrayData]) -> dict[int, np.ndarray]:
    """Each recoded attribute's map, by attribute index: one new value in 0..k-1 per value, every one used."""
    out = {}
    for name, data in recode.items():
        table.domain.indices([name])  # the name must be in this source's domain
        (index,) = table.backend.domain.indices([name])
        size = table.backend.domain.sizes[index]
        values = data.array()
        if values.shape != (size,) or values.min() < 0 or np.unique(values).size != int(values.max()) + 1:
            raise ValueError(
                f"the recoding of {name!r} must give each of its {size} values a new value, using "
                "every new value from 0 up"
            )
        out[index] = values
    return out
