"""AIM (McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive and Iterative Mechanism for Differentially Private
Synthetic Data", VLDB 2022): workload-aware rounds of private selection and measurement, one graphical model
refitted after each, with a budget that anneals.

Under zCDP with rho, T = 16 d rounds planned and alpha = 0.9 of each round for measuring (section 4):

- every 1-way marginal is measured first with sigma = sqrt(T / (2 alpha rho));
- each round selects a candidate r (a non-empty subset of a workload marginal whose junction tree, added to the
  model's, stays within ``max_cells`` times the share of the budget spent so far) with the kernel's
  ``marginal_select``, scored w_r (||M_r(x) - M_r(p)||_1 - sqrt(2/pi) sigma n_r) (w_r = sum over the workload of
  |r & s|; the offset is the expected error of measuring r), at epsilon = sqrt(8 (1 - alpha) rho / T);
  measures it with sigma, and refits the model from the last one (warm start);
- when the model's marginal on r moved by less than sqrt(2/pi) sigma n_r, the measurement was too noisy to help:
  sigma halves and epsilon doubles (annealing); when less than two rounds' budget is left, the last round spends
  all of it.

Written from the paper; no code of any implementation was used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction

import numpy as np

from ..kernel.domain import Domain
from ..kernel.privacy import AMOUNT_GRID, on_grid
from ..operators import measure, pgm
from ..operators.budget import Budget
from ..operators.client import Handle
from ..operators.matrices import MarginalStack
from ..operators.matrix import Matrix
from .marginal_rounds import in_table_order, measure_marginals, selection_epsilon, tree_cells

#: The share of each round's budget that measures (the paper's alpha).
MEASURE_SHARE = Fraction(9, 10)
#: Rounds planned per attribute (the paper's T = 16 d).
ROUNDS_PER_ATTRIBUTE = 16
#: The largest model (junction-tree cells) at the end: the paper's 80 MB of float64.
MAX_CELLS = 10**7


def aim(source: Handle, workload: Iterable | None, budget: Budget, *, shape: Sequence[int] | None = None,
        max_cells: int = MAX_CELLS, iterations: int = 1000, rounds_per_attribute: int = ROUNDS_PER_ATTRIBUTE,
        callback: Callable[[int, float], object] | None = None) -> pgm.Model:
    """AIM on the table ``source`` with all of ``budget`` (zCDP or (epsilon, delta)) for ``workload`` (attribute
    sets; default: every 3-way marginal, the paper's main workload). Returns the fitted model (``marginal``,
    ``answer``, ``synthetic``); its ``rounds`` lists each round's pick, sigma and epsilon. ``iterations``: the
    fit's cap per round (it stops earlier when converged); ``callback(percent of the budget spent, round)``:
    progress after each round. ``shape``: unused."""
    rho = Fraction(measure.table_and_rho(source, budget, "AIM"))
    names = list(source.domain.names)
    sizes = list(source.domain.sizes)
    d = len(names)
    marginals = _workload(source, workload)
    candidates, weights = _candidates(source, marginals)
    positions = {a: i for i, a in enumerate(names)}
    cells = [math.prod(sizes[positions[a]] for a in r) for r in candidates]
    rounds = rounds_per_attribute * d
    measuring = on_grid(rho * MEASURE_SHARE / rounds, AMOUNT_GRID)  # rho of one measurement: 1 / (2 sigma^2)
    selecting = on_grid(rho * (1 - MEASURE_SHARE) / rounds, AMOUNT_GRID)  # epsilon^2 / 8 of one selection
    measured = measure_marginals(source, [(a,) for a in names], [measuring] * d)
    spent = measuring * d
    domain = Domain.from_dict(dict(zip(names, sizes)))
    model = pgm.fit(domain, measured, iterations=iterations, max_clique_cells=max_cells)
    history = []
    final = False
    while not final:
        left = rho - spent
        final = left < 2 * (measuring + selecting)
        if final:  # the last round: all that is left
            measuring, selecting = on_grid(left * MEASURE_SHARE, AMOUNT_GRID), on_grid(left * (1 - MEASURE_SHARE), AMOUNT_GRID)
        sigma = math.sqrt(1 / (2 * float(measuring)))
        epsilon = selection_epsilon(selecting)
        cliques = [tuple(positions[a] for a in m[0]) for m in measured]
        room = max_cells * float(spent + measuring + selecting) / float(rho)
        noise = [math.sqrt(2 / math.pi) * sigma * n for n in cells]  # a measurement's expected L1 error
        allowed = [i for i, r in enumerate(candidates)
                   if tree_cells(cliques + [tuple(positions[a] for a in r)], sizes, room) <= room]
        allowed = _undominated(allowed, weights, noise, model.total, epsilon)
        if not allowed:
            raise ValueError(f"no candidate fits a model of {room:.3g} cells: raise max_cells")
        chosen = [candidates[i] for i in allowed]
        index = allowed[source.marginal_select(
            chosen, [model.marginal(list(r)) for r in chosen], epsilon,
            weights=[weights[i] for i in allowed], offsets=[weights[i] * noise[i] for i in allowed])]
        pick = candidates[index]
        spent += epsilon * epsilon / 8
        measured += measure_marginals(source, [pick], [measuring])
        spent += measuring
        before = model.marginal(list(pick))
        model = pgm.fit(domain, measured, iterations=iterations, max_clique_cells=max_cells, start=model)
        history.append({"pick": pick, "sigma": sigma, "epsilon": float(epsilon)})
        if np.abs(model.marginal(list(pick)) - before).sum() <= noise[index]:
            measuring, selecting = measuring * 4, selecting * 4  # sigma / 2, epsilon * 2
        if callback is not None:
            callback(int(100 * spent / rho), len(history))
    model.rounds = history
    model.note = (f"AIM: a graphical model of {len(measured)} measured marginals chosen in {len(history)} private "
                  "rounds; no error bars (post-processing)")
    return model


#: A candidate whose best possible score trails another's worst by this many exponents of the exponential mechanism
#: (a chance below e^-40 of being picked) is left out of the request: it only swells it (ours; public quantities).
DOMINATED = 40


def _undominated(allowed: list[int], weights: list[float], noise: list[float], total: float,
                 epsilon: Fraction) -> list[int]:
    """The candidates whose score can come within ``DOMINATED`` exponents of another's: a score lies between
    -w noise (distance 0) and w (2 total - noise) (distance at most the records plus the model's, ~2 total)."""
    floor = max((-weights[i] * noise[i] for i in allowed), default=0.0)
    margin = DOMINATED * 2 * max((weights[i] for i in allowed), default=1.0) / float(epsilon)
    return [i for i in allowed if weights[i] * (2 * total - noise[i]) >= floor - margin]


def _workload(source: Handle, workload: Iterable | None) -> list[tuple[str, ...]]:
    """The workload's marginals as attribute-name tuples in table order (default: every 3-way marginal)."""
    names = list(source.domain.names)
    if workload is None:
        return [tuple(c) for c in itertools.combinations(names, min(3, len(names)))]
    if isinstance(workload, MarginalStack):  # --workload kway:3 from the command line
        workload = workload.subsets
    if isinstance(workload, Matrix):
        raise ValueError("AIM's workload is marginals: attribute sets such as [('age', 'sex'), ('sex', 'zone')] "
                         "(from the command line: --workload kway:3), or None for every 3-way marginal")
    out = []
    for item in workload:
        item = (item,) if isinstance(item, (str, int)) else tuple(item)
        out.append(in_table_order(source, [names[a] if isinstance(a, int) else a for a in item]))
    if not out:
        raise ValueError("AIM's workload is empty: give attribute sets, or None for every 3-way marginal")
    return out


def _candidates(source: Handle, workload: list[tuple[str, ...]]) -> tuple[list[tuple[str, ...]], list[float]]:
    """Every non-empty subset of a workload marginal, and its weight: how many attributes it shares with the
    workload's marginals, summed."""
    subsets = sorted({in_table_order(source, s) for m in workload for k in range(1, len(m) + 1)
                      for s in itertools.combinations(m, k)}, key=lambda s: (len(s), s))
    weights = [float(sum(len(set(r) & set(m)) for m in workload)) for r in subsets]
    return subsets, weights
