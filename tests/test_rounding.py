"""The kernel's rounding bounds against exact rational arithmetic (kernel.matrix.rounding, docs/privacy/arithmetic.md).

Random matrix trees with adversarial magnitudes (1e-300 .. 1e300, mixed signs, cancelling columns): the
derived sensitivities must bound the exact matrices' column norms, the evaluation bounds must hold for the
floats the kernel computes, and neighbouring tables' pre-noise answers must differ by at most the derived
sensitivity of what is released.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ektelo_ng.kernel.matrix import AllRange, Dense, Diagonal, Identity, Kronecker, Ones, Product, Transpose, VStack
from ektelo_ng.kernel.matrix.rounding import LIMIT, evaluation
from ektelo_ng.kernel.mechanisms import MatrixFacts
from ektelo_ng.operators.matrices import Prefix

C53 = 2.0**53

entries = st.one_of(
    st.integers(-3, 3).map(float),
    st.sampled_from([C53, C53 - 1, -C53, 2.0**-1074, 2.0**1000, 0.5, 1 / 3]),
    st.floats(min_value=1e-300, max_value=1e300).flatmap(lambda v: st.sampled_from([v, -v])),
)


def dense_leaf(rows: int, cols: int):
    return st.lists(entries, min_size=rows * cols, max_size=rows * cols).map(
        lambda v: Dense(np.array(v).reshape(rows, cols)))


def leaf(cols: int):
    return st.one_of(
        st.integers(1, 3).flatmap(lambda rows: dense_leaf(rows, cols)),
        st.just(Identity(cols)), st.just(Prefix(cols)), st.just(AllRange(cols)), st.just(Ones(2, cols)),
        st.lists(entries, min_size=cols, max_size=cols).map(Diagonal),
    )


def matrices(cols: int, depth: int = 2):
    if depth == 0:
        return leaf(cols)
    inner = matrices(cols, depth - 1)
    return st.one_of(
        leaf(cols),
        inner.flatmap(lambda right: matrices(right.shape[0], depth - 1).map(lambda left: Product([left, right]))),
        st.lists(inner, min_size=1, max_size=3).map(VStack),
        inner.map(lambda M: M * 2.0**-20),
        inner.map(lambda M: Transpose(Transpose(M))),
    )


def kronecker_matrices():
    return st.tuples(matrices(2, 1), matrices(2, 1)).map(lambda fs: Kronecker(list(fs)))


def exact(M) -> list[list[Fraction]]:
    """M's entries as exact rationals, from its structure (leaves' entries are exact floats)."""
    if isinstance(M, Product):
        result = exact(M.factors[-1])
        for f in reversed(M.factors[:-1]):
            left = exact(f)
            result = [[sum(left[i][k] * result[k][j] for k in range(len(result))) for j in range(len(result[0]))]
                      for i in range(len(left))]
        return result
    if isinstance(M, Kronecker):
        a, b = exact(M.factors[0]), exact(M.factors[1])
        return [[a[i][j] * b[k][l] for j in range(len(a[0])) for l in range(len(b[0]))]
                for i in range(len(a)) for k in range(len(b))]
    if isinstance(M, VStack):
        return [row for block in M.blocks for row in exact(block)]
    if isinstance(M, Transpose):
        return [list(column) for column in zip(*exact(M.base))]
    if hasattr(M, "weight"):
        return [[Fraction(M.weight) * v for v in row] for row in exact(M.base)]
    return [[Fraction(float(v)) for v in row] for row in M.dense()]


def column_norms(entries_: list[list[Fraction]]) -> tuple[Fraction, Fraction]:
    """The largest exact column L1 norm and squared L2 norm."""
    columns = list(zip(*entries_))
    return max(sum(abs(v) for v in c) for c in columns), max(sum(v * v for v in c) for c in columns)


def bounded(M) -> bool:
    """Whether the kernel accepts M (it refuses matrices whose products could reach 2^500)."""
    return evaluation(M, 2.0**10, True).peak < LIMIT


def parts_bounded(M) -> bool:
    """Whether M and every matrix it is built from evaluate safely on their own."""
    parts = getattr(M, "factors", None) or getattr(M, "blocks", None) or ([M.base] if hasattr(M, "base") else [])
    return bounded(M) and all(parts_bounded(part) for part in parts)


@settings(max_examples=300, deadline=None)
@given(st.one_of(matrices(3), kronecker_matrices()))
def test_derived_sensitivities_bound_the_exact_column_norms(M):
    assume(bounded(M))
    l1, l2_squared = column_norms(exact(M))
    facts = MatrixFacts(M)
    if l1 == 0 and evaluation(M, 1.0, True).exact:
        with pytest.raises(ValueError, match="no non-zero"):
            facts.sensitivity("l1")
        return
    with warnings.catch_warnings():
        # As the kernel runs (not as errors): a part that overflows on its own although the whole does not (a
        # huge weight on a zero row, a factor beside a zero one) gives inf or nan, which must be refused.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            derived = facts.sensitivity("l1"), facts.sensitivity("l2")
        except ValueError:
            assert not parts_bounded(M), "refused a matrix whose every part evaluates safely"
            return
    assert Fraction(derived[0]) >= l1
    assert Fraction(derived[1]) ** 2 >= l2_squared


@settings(max_examples=300, deadline=None)
@given(st.one_of(matrices(3), kronecker_matrices()), st.data())
def test_float_answers_are_within_the_error_bound_and_neighbours_within_the_sensitivity(M, data):
    n, size = M.shape[1], 2**10
    assume(bounded(M))
    x = np.array(data.draw(st.lists(st.integers(0, size // (2 * n)), min_size=n, max_size=n)), dtype=np.int64)
    truth = [sum(row[j] * int(x[j]) for j in range(n)) for row in exact(M)]
    computed = M @ x
    bounds = evaluation(M, float(size), True)
    assert sum(abs(Fraction(float(c)) - t) for c, t in zip(computed, truth)) <= Fraction(bounds.error)
    assert max(abs(Fraction(float(c)) - t) for c, t in zip(computed, truth)) <= Fraction(bounds.entry_error)
    assert np.all(np.abs(computed) <= bounds.peak)
    if bounds.exact:
        assert [Fraction(float(c)) for c in computed] == truth
    if any(v != 0 for row in exact(M) for v in row):
        released, _ = MatrixFacts(M).released("l1", float(size))
        cell = data.draw(st.integers(0, n - 1))
        neighbour = x.copy()
        neighbour[cell] += 1
        gap = sum(abs(Fraction(float(a)) - Fraction(float(b))) for a, b in zip(M @ neighbour, computed))
        assert gap <= Fraction(released)


def test_a_matrix_vanishing_on_unit_vectors_is_not_stability_zero():
    """fl(2^-1074 * 0.5) = 0 on a unit count, but 2 * 2^-1074 * 0.5 = 2^-1074: the map is not exactly zero."""
    factors = [Dense([[2.0**74]]), Dense([[2.0**1000]]), Dense([[0.5]]), Dense([[2.0**-1074]])]
    M = Product(factors)
    assert M @ np.array([1.0]) == 0 and M @ np.array([2.0]) > 0
    assert MatrixFacts(M).sensitivity("l1") > 0
    assert not evaluation(M, 1.0, True).exact


def test_integer_matrices_on_counts_are_exact_and_keep_their_exact_sensitivity():
    M = Product([Kronecker([Prefix(8), Identity(4)]), Identity(32)])
    bounds = evaluation(M, 2.0**32, True)
    assert bounds.exact and bounds.peak <= 2.0**35 * (1 + 1e-9)
    assert MatrixFacts(M).sensitivity("l1") == 8.0
    assert MatrixFacts(M).released("l1", 2.0**32)[0] == 8.0


@settings(max_examples=200, deadline=None)
@given(st.one_of(matrices(3), kronecker_matrices()), st.data())
def test_each_entry_is_within_its_bound_on_real_inputs(M, data):
    """What worst-approx scores rest on: every entry of fl(M z) for real z (such as x - x_hat)."""
    n, size = M.shape[1], 2.0**10
    assume(bounded(M))
    z = np.array(data.draw(st.lists(st.floats(-size / (2 * n), size / (2 * n)), min_size=n, max_size=n)))
    truth = [sum(row[j] * Fraction(float(z[j])) for j in range(n)) for row in exact(M)]
    bounds = evaluation(M, size, False)
    assert max(abs(Fraction(float(c)) - t) for c, t in zip(M @ z, truth)) <= Fraction(bounds.entry_error)
