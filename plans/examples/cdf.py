"""The ektelo paper's example plan (Algorithm 1): the CDF of salary for men in their thirties, corrected.

Run it with ``ektelo-ng run plans/examples/cdf.py --table people.csv --domain people.json --budget epsilon=1``
on a table with attributes sex (labels "F", "M"), age and salary.

Corrections to the printed algorithm: the non-negative least squares of line 9 must fit the
measurement on the reduced vector as a query on the original one, M P x = y (the paper writes
NNLS(P, y)); here the measurement is mapped through the reduce step's lineage automatically.
The AHP partition is rebuilt from vetted operators: a Laplace measurement of the histogram
(half the budget), thresholding and public clustering of those noisy counts.
"""

from __future__ import annotations

from ...operators.client import Handle
from ...kernel.matrix import Identity, Matrix
from ...operators.predicates import attr
from ...operators import measure
from ...operators.estimate import VectorEstimate
from ...operators.inference import ahp_threshold, nnls
from ...operators.partition import ahp_cluster
from ..common import BudgetLike, epsilon_of


def plan(source: Handle, workload: Matrix | None, budget: BudgetLike) -> VectorEstimate:
    """Estimate the salary histogram of men aged 30-39; the CDF is ``estimate.answer(Prefix(n))``."""
    epsilon = epsilon_of(budget)
    men_in_thirties = source.where((attr("sex") == "M") & attr("age").between(30, 39))
    x = men_in_thirties.project(["salary"]).vectorize()
    first = measure.laplace(x, Identity(x.size), epsilon / 2)  # AHP partition: noisy counts ...
    partition = ahp_cluster(ahp_threshold(first.answers, float(epsilon / 2)), float(epsilon / 2))  # ... then public
    reduced = x.reduce_by_partition(partition.labels)
    y = measure.laplace(reduced, Identity(reduced.size), epsilon / 2)  # maps to Identity @ P on x
    return VectorEstimate(nnls([y], size=x.size), [y], workload=workload, error_bars=False,
                          note="non-negative least squares over an AHP partition: no error bars")

