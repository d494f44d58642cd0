"""The ektelo paper's example plan (Algorithm 1): the CDF of salary for men in their thirties, corrected.

Run it with ``ektelo-ng run examples/cdf.py --table people.csv --domain people.json --budget epsilon=1``
on a table with attributes sex (labels "F", "M"), age and salary.

Corrections to the printed algorithm: the non-negative least squares of line 9 must fit the
measurement on the reduced vector as a query on the original one, M P x = y (the paper writes
NNLS(P, y)); here the measurement is mapped through the reduce step's lineage automatically.
The AHP partition is rebuilt from vetted operators: a Laplace measurement of the histogram
(half the budget), thresholding and public clustering of those noisy counts.
"""

from __future__ import annotations

import ektelo_ng as ek


def plan(source: ek.Handle, workload, budget: ek.PureDP) -> ek.VectorEstimate:
    """Estimate the salary histogram of men aged 30-39; the CDF is ``estimate.answer(Prefix(n))``."""
    if not isinstance(budget, ek.PureDP):
        raise ValueError("this plan measures with Laplace noise: give a pure-DP budget (--budget epsilon=...)")
    epsilon = budget.epsilon
    men_in_thirties = source.where((ek.attr("sex") == "M") & ek.attr("age").between(30, 39))
    x = men_in_thirties.project(["salary"]).vectorize()
    first = ek.measure.laplace(x, ek.matrix.Identity(x.size), epsilon / 2)  # AHP partition: noisy counts ...
    partition = ek.partition.ahp_cluster(ek.inference.ahp_threshold(first.answers, float(epsilon / 2)),
                                         float(epsilon / 2))  # ... then public
    reduced = x.reduce_by_partition(partition.labels)
    y = ek.measure.laplace(reduced, ek.matrix.Identity(reduced.size), epsilon / 2)  # maps to Identity @ P on x
    return ek.VectorEstimate(ek.nnls([y], size=x.size), [y], workload=workload, error_bars=False,
                             note="non-negative least squares over an AHP partition: no error bars")

