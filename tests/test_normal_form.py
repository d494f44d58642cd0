"""The client's matrices compiled to the kernel's sealed language (operators.normal_form): the kernel's evaluation of
the compiled form is the client's matrix, on dense oracles, and what has no structured form goes dense or is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.kernel.limits import Limits, Work
from ektelo_ng.kernel.matrix import SealedMatrix
from ektelo_ng.operators.matrices import Haar, Hierarchical, MarginalStack, Prefix, Suffix, WidthRange
from ektelo_ng.operators.matrix import (
    AllRange, Dense, Diagonal, Fourier, Identity, Intervals, Kronecker, Ones, Product, Ranges, Sparse, Transpose,
    VStack,
)
from ektelo_ng.operators.normal_form import DENSE_ENTRIES, normal_form
from ektelo_ng.operators.selection.hdmm.opt0 import PIdentity


def kernel_matrix(A) -> SealedMatrix:
    spec = normal_form(A)
    SealedMatrix.cost(spec, Limits(), A.shape[1])
    return SealedMatrix(spec, Work())


def check(A, seed: int = 0) -> SealedMatrix:
    """The kernel's M x equals A x on counts, and its sensitivities bound A's column norms tightly."""
    M = kernel_matrix(A)
    dense = A.dense()
    assert M.shape == A.shape
    x = np.random.default_rng(seed).integers(0, 50, A.shape[1])
    np.testing.assert_allclose(M.apply(x, Work()), dense @ x, rtol=1e-12, atol=1e-9)
    for norm, exact in (("l1", np.abs(dense).sum(axis=0).max()), ("l2", np.sqrt((dense**2).sum(axis=0)).max())):
        assert exact <= M.sensitivity(norm) <= exact * (1 + 1e-12) + 1e-300
    return M


@pytest.mark.parametrize("A, kinds", [
    (Prefix(5), ["ranges"]), (Suffix(5), ["ranges"]), (WidthRange(6, 2), ["ranges"]), (AllRange(4), ["ranges"]),
    (Hierarchical(9, 3, include_root=False), ["ranges"]), (Haar(8), ["sparse"]), (Fourier(8, 5), ["fourier"]),
    (Ranges([3, 4], [[0, 1], [2, 0]], [[1, 3], [2, 2]]), ["ranges"]), (Identity(4), ["identity"]),
    (Ones(2, 3), ["ones"]), (Diagonal([1.0, -2.5, 0.0]), ["identity"]),
    (MarginalStack([2, 3], {(0,): 2.0, (): 1.0}), ["identity", "ones", "ones", "ones"]),
    (Kronecker([Prefix(3), Dense([[0.5, 2.0]])]), ["ranges", "dense"]),
    (Product([Diagonal([1.0, 2.0, 3.0]), Intervals(4, [0, 1, 0], [3, 2, 0])]), ["ranges"]),
    (PIdentity(np.array([[1.0, 0.5, 0.0, 2.0]])), ["identity", "dense"]),
    (VStack([Identity(3) * 0.25, Product([Diagonal([1.0, 2.0]), Ones(2, 3)])]), ["identity", "ones"]),
])
def test_structured_matrices_compile_to_their_own_leaves(A, kinds):
    spec = normal_form(A)
    assert [f.kind for block in spec.blocks for f in block.factors] == kinds
    check(A)


@pytest.mark.parametrize("A", [
    Product([Dense([[1.0, -1.0]]), Dense([[3.0], [2.0]])]),
    Transpose(Prefix(4)),
    Product([Diagonal([2.0, 3.0, 1.0]), Kronecker([Identity(3), Ones(1, 2)])]),
])
def test_what_has_no_structured_form_is_sent_as_its_dense_entries(A):
    (block,) = normal_form(A).blocks
    assert [f.kind for f in block.factors] == ["dense"]
    check(A)


@pytest.mark.parametrize("A, kinds", [
    (Kronecker([VStack([Identity(2), Ones(1, 2)]), Identity(2)]), ["dense", "identity"]),
    (Kronecker([PIdentity(np.array([[1.0, 0.5, 0.0]])), Prefix(3), PIdentity(np.array([[0.2, 0.3]]))]),
     ["dense", "ranges", "dense"]),
])
def test_a_kronecker_factor_with_several_blocks_is_sent_as_its_own_dense_leaf(A, kinds):
    """Not the whole product densely: HDMM's p-Identity factors stay a Kronecker product of small dense leaves."""
    (block,) = normal_form(A).blocks
    assert [f.kind for f in block.factors] == kinds
    check(A)


def test_a_census_sized_kronecker_of_p_identities_compiles_to_small_leaves():
    """SF1+'s strategy shape: 4.7 million rows over 25.5 million cells, sent as 59 x 51 ... 123 x 115 leaves."""
    rng = np.random.default_rng(0)
    factors = [PIdentity(rng.random((p, n))) for p, n in ((8, 51), (8, 64), (1, 2), (1, 2), (8, 115))] + [Ones(1, 17)]
    (block,) = normal_form(Kronecker(factors)).blocks
    assert [f.kind for f in block.factors] == ["dense"] * 5 + ["ones"]
    assert [f.data.shape for f in block.factors[:5]] == [[59, 51], [72, 64], [3, 2], [3, 2], [123, 115]]


def test_a_large_matrix_with_no_structured_form_is_refused_with_what_to_send():
    big = Product([Prefix(4096), Transpose(Prefix(4096))])
    assert big.shape[0] * big.shape[1] > DENSE_ENTRIES
    with pytest.raises(TypeError, match="no form the kernel accepts"):
        normal_form(big)


leaves = st.sampled_from([
    Identity(3), Ones(1, 3), Ones(2, 3), Prefix(3), Suffix(3), Dense([[0.5, -1.0, 0.0], [2.0, 0.0, 3.0]]),
    Sparse(np.array([[0.0, 1.0, 0.0], [-2.0, 0.0, 1.5]])), Fourier(3, 2), Intervals(3, [0, 2], [1, 2]),
])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(leaves, min_size=1, max_size=3), st.floats(-4, 4).filter(lambda w: abs(w) > 1e-3)),
                min_size=1, max_size=3), st.integers(0, 10**6))
def test_random_stacks_of_weighted_kronecker_products_evaluate_as_the_client_matrix(blocks, seed):
    widths = {len(leaves) for leaves, _ in blocks}
    width = max(widths)
    matrix = VStack([Kronecker((factors + [Identity(3)] * width)[:width]) * weight for factors, weight in blocks])
    check(matrix, seed)
