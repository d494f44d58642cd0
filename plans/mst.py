"""MST (McKenna, Miklau, Sheldon, "Winning the NIST Contest", JPC 2021): a maximum spanning tree of 2-way
marginals, chosen privately, measured, and fitted by one graphical model, for synthetic records.

Under zCDP with rho (an ``ApproxDP`` budget is converted once, ``operators.budget``), a third each:

1. every 1-way marginal, Gaussian noise of sigma = sqrt(3 d / (2 rho)); each attribute's values whose noisy count is
   below 3 sigma are merged into one value (their merged count is the sum of their noisy counts);
2. d - 1 rounds of the kernel's ``marginal_select`` (exponential mechanism, epsilon^2 / 8 = rho / (3 (d - 1))
   each), each among the pairs joining two components of the tree so far (Kruskal), scored by the L1 distance
   between the pair's marginal (merged values) and the independent model of the 1-way measurements;
3. the tree's d - 1 pairs measured with sigma = sqrt(3 (d - 1) / (2 rho)).

The graphical model is fitted to all of it (``operators.pgm.fit``) over the merged values, and read on the
original ones (``operators.pgm.compressed``). Written from the paper; no code of any implementation was used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import networkx as nx
import numpy as np

from ..kernel.domain import Domain
from ..kernel.privacy import ZCDP
from ..operators import measure, pgm
from ..operators.budget import Budget
from ..operators.client import Handle
from ..operators.matrix import Identity
from ..operators.pgm.compressed import CompressedModel
from ..operators.privacy import split_amount
from .marginal_rounds import in_table_order, measure_marginals, selection_epsilon

#: Values whose noisy 1-way count is below this many standard deviations are merged (the paper's 3 sigma).
MERGE_BELOW = 3.0
#: Iterations of the fit to the 1-way measurements alone, whose marginals only score the pairs.
SCORING_ITERATIONS = 1000


def mst(source: Handle, workload, budget: Budget, *, shape: Sequence[int] | None = None, iterations: int = pgm.ITERATIONS,
        seed: int | None = None, callback: Callable[[int, float], object] | None = None) -> CompressedModel:
    """MST on the table ``source`` with all of ``budget`` (zCDP or (epsilon, delta)); returns the fitted model
    (``marginal``, ``answer``, ``synthetic``). ``iterations``: the fit's cap (it stops earlier when converged);
    ``callback``: the fit's progress. ``workload``, ``shape``, ``seed``: unused (MST picks its own marginals)."""
    rho = measure.table_and_rho(source, budget, "MST")
    names = list(source.domain.names)
    d = len(names)
    if d < 2:
        raise ValueError("MST selects pairs of attributes: the table needs at least two")
    first, second, third = split_amount(ZCDP(rho), [1, 1, 1])
    one_way = measure_marginals(source, [(a,) for a in names], split_amount(ZCDP(first), [1] * d))
    codes, merged = _merge_rare(one_way)
    small = Domain.from_dict({a: int(codes[a].max()) + 1 if a in codes else s
                              for a, s in zip(names, source.domain.sizes)})
    independent = pgm.fit(small, merged, iterations=min(iterations, SCORING_ITERATIONS))
    tree = _spanning_tree(source, independent, codes, second)
    pairs = measure_marginals(source, tree, split_amount(ZCDP(third), [1] * len(tree)), codes)
    model = pgm.fit(small, merged + pairs, iterations=iterations, callback=callback)
    positions = {a: i for i, a in enumerate(names)}
    out = CompressedModel(source.domain, model, {positions[a]: c for a, c in codes.items()})
    out.note = (f"MST: a graphical model of the 1-way marginals and {len(tree)} private spanning-tree pairs "
                f"({', '.join('-'.join(p) for p in tree)}); no error bars (post-processing)")
    return out


def _merge_rare(one_way) -> tuple[dict[str, np.ndarray], list]:
    """Per attribute with values below ``MERGE_BELOW`` sigma, the merged value of each of its values (the
    supported ones first, in order, then one for the rest), and the 1-way measurements on the merged values."""
    codes, merged = {}, []
    for (name,), identity, values, sigma in one_way:
        rare = values < MERGE_BELOW * sigma
        if not rare.any():
            merged.append(((name,), identity, values, sigma))
            continue
        code = np.where(rare, int((~rare).sum()), np.cumsum(~rare) - 1)
        codes[name] = code
        answers = np.append(values[~rare], values[rare].sum())
        std = np.append(np.full(int((~rare).sum()), sigma), sigma * np.sqrt(rare.sum()))
        merged.append(((name,), Identity(answers.size), answers, std))
    return codes, merged


def _spanning_tree(source: Handle, model, codes: dict[str, np.ndarray], rho: Fraction) -> list[tuple[str, ...]]:
    """d - 1 pairs joining the attributes into a tree, each chosen by the kernel among the pairs joining two of
    the components so far, favouring the pairs the model (of independent attributes) fits worst."""
    names = list(source.domain.names)
    forest = nx.Graph()
    forest.add_nodes_from(names)
    epsilon = selection_epsilon(Fraction(rho) / (len(names) - 1))
    chosen = []
    for _ in range(len(names) - 1):
        candidates = [in_table_order(source, (a, b)) for i, a in enumerate(names) for b in names[i + 1:]
                      if not nx.has_path(forest, a, b)]
        estimates = [model.marginal(list(pair)) for pair in candidates]
        pick = candidates[source.marginal_select(candidates, estimates, epsilon, recode=codes)]
        forest.add_edge(*pick)
        chosen.append(pick)
    return chosen
