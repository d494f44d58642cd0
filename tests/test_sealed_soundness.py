"""The sealed matrix language against exact rational arithmetic (kernel.matrix, kernel.mechanisms.release;
docs/privacy/arithmetic.md).

Random matrices from the whole accepted grammar (every leaf kind, Kronecker products of up to three leaves and of
64, the most a block may hold, stacks of up to three blocks, scalar and row weights) with adversarial entries and
weights (2^53 and 2^53 - 1 side by side, 2^-1074, 2^+-400, 2^499 whose partial products overflow, 2^-540 whose
square underflows, 1/3, mixed signs, cancelling columns), on counts up to the public bound, and their neighbours. The kernel's claims must hold for the floats it computes, exactly:

- the derived sensitivities bound the exact column norms of the matrix it applies (its float entries and weights);
- each answer it computes is within its row bound of the exact one, and exact where it says so;
- on neighbouring counts its answers differ by at most the released sensitivity, in at most ``nonzeros`` rows;
- after the release grid, the codes differ by at most what the charge covers (Laplace and Gaussian);
- a transform's stability is the exact largest column L1 norm.
Every refusal is decided from the matrix and the public bound only.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ektelo_ng.kernel.limits import Limits, Work
from ektelo_ng.kernel.matrix import ArrayData, SealedMatrix, Stack
from ektelo_ng.kernel.matrix.leaves import fourier_matrix
from ektelo_ng.kernel.mechanisms import release
from ektelo_ng.kernel.privacy import PureDP, ZCDP

C53 = 2.0**53
SPECIAL = [C53, C53 - 1, -C53, -(C53 - 1), 2.0**-1074, 2.0**400, 2.0**-400, 2.0**499, -(2.0**499), 2.0**460,
           2.0**-499, 0.5, 1 / 3, -1 / 3, 0.0, 1.0, -1.0, 3.0, 1e-300, 1e300]
entries = st.one_of(st.sampled_from(SPECIAL), st.integers(-4, 4).map(float),
                    st.floats(1e-300, 1e300).flatmap(lambda v: st.sampled_from([v, -v])))
weights = st.one_of(st.sampled_from([1.0, -1.0, 2.0**-20, 3.0, 1 / 3, 2.0**-1074, 2.0**-540, 2.0**300, 7.0, -0.5]),
                    st.floats(1e-6, 1e6))


def array(values) -> dict:
    return ArrayData.of(np.asarray(values)).model_dump()


def leaves(cols: int):
    """Every leaf kind over ``cols`` columns (ranges: one or two dimensions)."""
    rows = st.integers(1, 3)
    grids = [(cols,)] + [(a, cols // a) for a in range(2, cols) if cols % a == 0]

    def boxes(shape):
        corner = st.tuples(*[st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)) for n in shape])
        return st.lists(corner, min_size=1, max_size=4).map(lambda bs: {
            "kind": "ranges", "shape": list(shape), "lo": array([[min(p) for p in b] for b in bs]),
            "hi": array([[max(p) for p in b] for b in bs])})

    def sparse(m):
        return st.lists(entries, min_size=m * cols, max_size=m * cols).map(lambda v: _sparse(np.array(v).reshape(m, cols)))

    return st.one_of(
        st.just({"kind": "identity", "n": cols}),
        rows.map(lambda m: {"kind": "ones", "rows": m, "cols": cols}),
        st.sampled_from(grids).flatmap(boxes),
        rows.flatmap(lambda m: st.lists(entries, min_size=m * cols, max_size=m * cols).map(
            lambda v: {"kind": "dense", "data": array(np.array(v).reshape(m, cols))})),
        rows.flatmap(sparse),
        st.integers(1, cols).map(lambda k: {"kind": "fourier", "n": cols, "k": k}),
    )


def _sparse(dense: np.ndarray) -> dict:
    import scipy.sparse as sp

    m = sp.csr_array(dense)
    return {"kind": "sparse", "rows": dense.shape[0], "cols": dense.shape[1], "data": array(m.data.astype(float)),
            "indices": array(m.indices.astype(np.int64)), "indptr": array(m.indptr.astype(np.int64))}


def blocks(split: tuple[int, ...]):
    """A block over the columns prod(split): a Kronecker product of leaves over ``split``, or one leaf with row
    weights."""
    product = st.tuples(*[leaves(n) for n in split]).map(list)
    single = leaves(math.prod(split)).flatmap(lambda leaf: st.lists(weights, min_size=_rows(leaf), max_size=_rows(leaf))
                                              .map(lambda w: {"factors": [leaf], "row_weights": array(w)}))
    return st.one_of(product.map(lambda fs: {"factors": fs}), single).flatmap(
        lambda b: weights.map(lambda w: {**b, "weight": w}))


def _rows(leaf: dict) -> int:
    kind = leaf["kind"]
    if kind == "identity":
        return leaf["n"]
    if kind in ("ones", "sparse"):
        return leaf["rows"]
    if kind == "ranges":
        return leaf["lo"]["shape"][0]
    if kind == "dense":
        return leaf["data"]["shape"][0]
    return leaf["k"]


def deep_blocks():
    """The deepest nesting the language allows: 64 leaves in one block, 62 of them 1 x 1 (their entries multiply)."""
    unit = st.one_of(st.just({"kind": "identity", "n": 1}), st.just({"kind": "fourier", "n": 1, "k": 1}),
                     st.sampled_from([1.0, -1.0, 0.5, 2.0, 3.0, 1 / 3, 2.0**-20, 2.0**20, C53]).map(
                         lambda v: {"kind": "dense", "data": array([[v]])}))
    return st.tuples(leaves(2), st.lists(unit, min_size=62, max_size=62), leaves(2), weights).map(
        lambda t: {"factors": [t[0], *t[1], t[2]], "weight": t[3]})


stacks = st.one_of(
    st.sampled_from([(2, 3), (4,), (2, 2), (3, 2, 1)]).flatmap(
        lambda split: st.lists(blocks(split), min_size=1, max_size=3)),
    st.lists(st.one_of(deep_blocks(), blocks((4,))), min_size=1, max_size=2),
).map(lambda bs: {"kind": "stack", "blocks": bs})


# ---- the exact matrix the kernel applies ------------------------------------------------------------------------


def exact_leaf(leaf: dict) -> list[list[Fraction]]:
    kind = leaf["kind"]
    if kind == "identity":
        dense = np.eye(leaf["n"])
    elif kind == "ones":
        dense = np.ones((leaf["rows"], leaf["cols"]))
    elif kind == "ranges":
        spec = Stack.model_validate({"blocks": [{"factors": [leaf]}]}).blocks[0].factors[0]
        lo, hi, shape = spec.lo.array(), spec.hi.array(), tuple(spec.shape)
        cells = np.indices(shape).reshape(len(shape), -1).T
        dense = np.array([[float(np.all((c >= l) & (c <= h))) for c in cells] for l, h in zip(lo, hi)])
    elif kind == "dense":
        dense = ArrayData.model_validate(leaf["data"]).array()
    elif kind == "sparse":
        import scipy.sparse as sp

        data = [ArrayData.model_validate(leaf[k]).array() for k in ("data", "indices", "indptr")]
        matrix = sp.csr_array(tuple(data), shape=(leaf["rows"], leaf["cols"]))
        matrix.sum_duplicates()
        dense = matrix.toarray()
    else:
        dense = fourier_matrix(leaf["n"], leaf["k"])
    return [[Fraction(float(v)) for v in row] for row in dense]


def exact_matrix(spec: dict) -> list[list[Fraction]]:
    rows = []
    for block in spec["blocks"]:
        matrix = [[Fraction(1)]]
        for leaf in block["factors"]:
            factor = exact_leaf(leaf)
            matrix = [[a * b for a in ra for b in rb] for ra in matrix for rb in factor]
        w = block["weight"]
        c = ArrayData.model_validate(block["row_weights"]).array() * w if block.get("row_weights") else None
        for r, row in enumerate(matrix):
            scale = Fraction(float(c[r])) if c is not None else Fraction(w)
            rows.append([scale * v for v in row])
    return rows


def counts(n: int, size: int):
    """Counts over n cells with L1 norm at most ``size``: mostly small, sometimes close to the bound."""
    return st.lists(st.one_of(st.integers(0, 9), st.sampled_from([size // (2 * n), size // n, 2**15, 2**15 + 1])),
                    min_size=n, max_size=n).map(np.array)


SIZE = 2**32


@settings(max_examples=400, deadline=None)
@given(stacks, st.data())
def test_the_sealed_language_is_sound_for_the_floats_the_kernel_computes(spec, data):
    stack = Stack.model_validate(spec)
    try:
        SealedMatrix.cost(stack, Limits(), None)
        M = SealedMatrix(stack, Work())
        released = {norm: M.released(norm, SIZE) for norm in ("l1", "l2")}
    except ValueError:
        return  # refused from the matrix and the bound alone: no data was involved
    exact = exact_matrix(spec)
    n = M.shape[1]
    l1 = max(sum(abs(row[j]) for row in exact) for j in range(n))
    l2_squared = max(sum(row[j] ** 2 for row in exact) for j in range(n))
    assert Fraction(M.sensitivity("l1")) >= l1
    assert Fraction(M.sensitivity("l2")) ** 2 >= l2_squared
    x = data.draw(counts(n, SIZE))
    assume(x.sum() <= SIZE)
    j = data.draw(st.integers(0, n - 1))
    y = x.copy()
    y[j] += 1 if x[j] == 0 or data.draw(st.booleans()) else -1
    assume(y.sum() <= SIZE)
    answers = [M.apply(v, Work()) for v in (x, y)]
    row_error, peak = M.row_error(SIZE), released["l1"].peak
    for v, got in zip((x, y), answers):
        truth = [sum(a * int(b) for a, b in zip(row, v)) for row in exact]
        errors = [abs(Fraction(float(g)) - t) for g, t in zip(got, truth)]
        assert max(errors) <= Fraction(row_error), "an answer is off by more than its row bound"
        assert all(abs(float(g)) <= peak for g in got)
        if M.exact(SIZE):
            assert max(errors) == 0, "an evaluation said to be exact is not"
    gap = np.abs(answers[0] - answers[1])
    assert int(np.count_nonzero(gap)) <= released["l1"].nonzeros
    assert Fraction(float(np.abs(answers[0] - answers[1]).sum())) <= Fraction(released["l1"].sensitivity) * (1 + Fraction(1, 2**50))
    # after the release grid: the codes differ by no more than the charge covers
    epsilon, rho = Fraction(1, 3), Fraction(1, 7)
    for prepared, norm in ((release.laplace(released["l1"], epsilon, PureDP), "l1"),
                           (release.gaussian(released["l2"], rho, None, ZCDP), "l2")):
        codes = [np.rint(a / prepared.grid).astype(np.int64) for a in answers]
        moved = [Fraction(int(d)) * Fraction(prepared.grid) for d in codes[0] - codes[1]]
        if norm == "l1":
            assert sum(abs(d) for d in moved) <= Fraction(prepared.scale) * epsilon
        else:
            assert sum(d * d for d in moved) <= Fraction(prepared.scale) ** 2 * 2 * rho


@settings(max_examples=150, deadline=None)
@given(stacks)
def test_a_transforms_stability_is_the_exact_largest_column_l1_norm(spec):
    stack = Stack.model_validate(spec)
    try:
        SealedMatrix.cost(stack, Limits(), None)
        stability = SealedMatrix(stack, Work()).stability()
    except ValueError:
        return
    exact = exact_matrix(spec)
    assert stability == max(sum(abs(row[j]) for row in exact) for j in range(len(exact[0])))


def test_a_cancelling_row_is_charged_for_its_rounding_not_its_exact_norm():
    """C x - (C - 1) y: exactly x - y + y/C... in the reals; in floats it jumps by 2^16 between 32768 and 32769."""
    spec = {"kind": "stack", "blocks": [{"factors": [{"kind": "dense", "data": array([[C53, -(C53 - 1)]])}]}]}
    M = SealedMatrix(Stack.model_validate(spec), Work())
    answers = [M.apply(np.array([v, 32768]), Work()) for v in (32768, 32769)]
    assert abs(answers[1] - answers[0])[0] > 2  # the floats do jump
    assert M.released("l1", SIZE).sensitivity >= abs(answers[1] - answers[0])[0]


@pytest.mark.parametrize("spec, says", [
    ({"factors": [{"kind": "dense", "data": array([[2.0**400]])}], "weight": 2.0**200}, r"2\^500"),
    ({"factors": [{"kind": "ranges", "shape": [1] * 16, "lo": array([[0] * 16]), "hi": array([[0] * 16])},
                  {"kind": "ranges", "shape": [1] * 8, "lo": array([[0] * 8]), "hi": array([[0] * 8])}]},
     r"2\^53"),  # 2^24 corner terms on 2^32 records
    ({"factors": [{"kind": "dense", "data": array([[0.0]])}]}, "measures nothing"),
    ({"factors": [{"kind": "dense", "data": array([[2.0**499]])}] * 3}, r"2\^500"),  # partial products past floats
])
def test_matrices_the_kernel_cannot_evaluate_safely_are_refused_before_any_data(spec, says):
    M = SealedMatrix(Stack.model_validate({"blocks": [spec]}), Work())
    with pytest.raises(ValueError, match=says):
        M.released("l1", SIZE)
