"""Every implicit-matrix operation against dense numpy, on random leaves and random compositions.

The strategy builds each matrix together with an oracle dense array made independently
(explicit loops, np.kron, np.vstack ...), so a wrong structured shortcut cannot hide.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ektelo_ng.operators.matrix import (
    AllRange,
    Dense,
    Diagonal,
    Fourier,
    HStack,
    Identity,
    Intervals,
    Kronecker,
    Matrix,
    MatrixSpecAdapter,
    Ones,
    Product,
    Ranges,
    Sparse,
    Total,
    VStack,
    from_spec,
)
from ektelo_ng.operators.matrices import Haar, Hierarchical, MarginalStack, Prefix, Suffix, WidthRange
from ektelo_ng.operators.algebra import Sum, frobenius_squared, gram, pinv, row_subset, rows, trace
from ektelo_ng.operators.specs import to_spec

# ---- independent dense oracles for the leaves -------------------------------------------


def interval_rows(n, pairs):
    out = np.zeros((len(pairs), n))
    for r, (lo, hi) in enumerate(pairs):
        out[r, lo : hi + 1] = 1.0
    return out


def tree_oracle(n, b, root):
    rows, frontier = [], [(0, n - 1)]
    while frontier:
        rows.extend(frontier)
        nxt = []
        for lo, hi in frontier:
            size = hi - lo + 1
            if size > 1:
                k = min(b, size)
                cuts = [lo + (i * size) // k for i in range(k + 1)]
                nxt.extend((cuts[i], cuts[i + 1] - 1) for i in range(k))
        frontier = nxt
    return interval_rows(n, rows if root else rows[1:])


def haar_oracle(n):
    rows = [np.ones(n)]
    block = n
    while block > 1:
        for start in range(0, n, block):
            r = np.zeros(n)
            r[start : start + block // 2] = 1
            r[start + block // 2 : start + block] = -1
            rows.append(r)
        block //= 2
    return np.array(rows)


def fourier_oracle(n):
    """The orthonormal real Fourier basis, row by row from its definition."""
    j = np.arange(n)
    rows = [np.full(n, 1 / np.sqrt(n))]
    for f in range(1, (n + 1) // 2):
        rows += [np.sqrt(2 / n) * np.cos(2 * np.pi * f * j / n), -np.sqrt(2 / n) * np.sin(2 * np.pi * f * j / n)]
    if n % 2 == 0:
        rows.append((-1.0) ** j / np.sqrt(n))
    return np.array(rows)


def test_the_fourier_basis_is_orthonormal():
    for n in (1, 2, 5, 8, 33):
        B = fourier_oracle(n)
        np.testing.assert_allclose(B @ B.T, np.eye(n), atol=1e-12)
        np.testing.assert_allclose(Fourier(n).dense(), B, atol=1e-12)


finite = st.floats(-3, 3, allow_nan=False).filter(lambda v: abs(v) > 0.05)


@st.composite
def leaves(draw, cols):
    n = cols
    options = ["identity", "ones", "prefix", "suffix", "all_range", "width", "intervals", "boxes", "dense", "sparse", "diag",
               "fourier"]
    if n >= 2:
        options.append("tree")
    if n & (n - 1) == 0:
        options.append("haar")
    kind = draw(st.sampled_from(options))
    if kind == "identity":
        return Identity(n), np.eye(n)
    if kind == "ones":
        m = draw(st.integers(1, 4))
        return Ones(m, n), np.ones((m, n))
    if kind == "prefix":
        return Prefix(n), interval_rows(n, [(0, i) for i in range(n)])
    if kind == "suffix":
        return Suffix(n), interval_rows(n, [(i, n - 1) for i in range(n)])
    if kind == "all_range":
        return AllRange(n), interval_rows(n, [(i, j) for i in range(n) for j in range(i, n)])
    if kind == "width":
        w = draw(st.integers(1, n))
        return WidthRange(n, w), interval_rows(n, [(i, i + w - 1) for i in range(n - w + 1)])
    if kind == "intervals":
        pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=7))
        pairs = [(min(p), max(p)) for p in pairs]
        lo, hi = zip(*pairs)
        return Intervals(n, lo, hi), interval_rows(n, pairs)
    if kind == "boxes":
        first = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
        shape = (first, n // first)
        corners = draw(st.lists(st.tuples(*(st.integers(0, s - 1) for s in shape * 2)), min_size=1, max_size=5))
        lo = [(min(c[0], c[2]), min(c[1], c[3])) for c in corners]
        hi = [(max(c[0], c[2]), max(c[1], c[3])) for c in corners]
        rows = np.zeros((len(lo), n))
        for r, (a, b) in enumerate(zip(lo, hi)):
            box = np.zeros(shape)
            box[a[0] : b[0] + 1, a[1] : b[1] + 1] = 1.0
            rows[r] = box.ravel()
        return Ranges(shape, lo, hi), rows
    if kind == "tree":
        b, root = draw(st.integers(2, 4)), draw(st.booleans())
        return Hierarchical(n, b, root), tree_oracle(n, b, root)
    if kind == "haar":
        return Haar(n), haar_oracle(n)
    if kind == "fourier":
        k = draw(st.integers(1, n))
        return Fourier(n, k), fourier_oracle(n)[:k]
    if kind == "diag":
        values = np.array(draw(st.lists(finite, min_size=n, max_size=n)))
        return Diagonal(values), np.diag(values)
    m = draw(st.integers(1, 5))
    # (no subnormals: a pseudo-inverse of 5e-309 overflows, which is not what these algebra tests are about)
    entries = st.floats(-2, 2, allow_nan=False, allow_subnormal=False)
    values = np.array(draw(st.lists(entries, min_size=m * n, max_size=m * n)))
    array = values.reshape(m, n)
    if kind == "sparse":
        array = np.where(np.abs(array) > 1, array, 0.0)
        return Sparse(sp.csr_array(array)), array
    return Dense(array), array


@st.composite
def matrices(draw, cols=None, depth=2, sums=True):
    if cols is None:
        cols = draw(st.integers(1, 6))
    kinds = ["leaf"]
    if depth > 0:
        kinds += ["weighted", "product", "vstack", "sum", "transpose", "rowweighted", "kron"]
        if not sums:  # a Sum is client-side algebra: it has no spec
            kinds.remove("sum")
        if cols >= 2:
            kinds.append("hstack")
    kind = draw(st.sampled_from(kinds))
    if kind == "leaf":
        return draw(leaves(cols))
    if kind == "weighted":
        A, D = draw(matrices(cols, depth - 1, sums))
        c = draw(finite)
        return (A * c if draw(st.booleans()) else c * A), c * D
    if kind == "product":
        B, DB = draw(matrices(cols, depth - 1, sums))
        assume(B.shape[0] <= 64)  # else A's leaves (all ranges of B's rows...) explode in size
        A, DA = draw(matrices(B.shape[0], depth - 1, sums))
        return A @ B, DA @ DB
    if kind == "vstack":
        parts = draw(st.lists(matrices(cols, depth - 1, sums), min_size=1, max_size=3))
        return VStack([p[0] for p in parts]), np.vstack([p[1] for p in parts])
    if kind == "hstack":
        split = draw(st.integers(1, cols - 1))
        left, DL = draw(matrices(split, depth - 1, sums))
        # Align row counts: the right block gets left's row count through a dense map.
        R, DRr = draw(matrices(cols - split, depth - 1, sums))
        assume(left.shape[0] * R.shape[0] <= 4096)  # hypothesis draws at most 8,192 list elements
        mix = np.array(draw(st.lists(finite, min_size=left.shape[0] * R.shape[0], max_size=left.shape[0] * R.shape[0])))
        mix = mix.reshape(left.shape[0], R.shape[0])
        return HStack([left, Dense(mix) @ R]), np.hstack([DL, mix @ DRr])
    if kind == "sum":
        A, DA = draw(matrices(cols, depth - 1, sums))
        B, DB = draw(matrices(cols, depth - 1, sums))
        assume(A.shape[0] * B.shape[0] <= 4096)  # hypothesis draws at most 8,192 list elements
        mix = np.array(draw(st.lists(finite, min_size=A.shape[0] * B.shape[0], max_size=A.shape[0] * B.shape[0])))
        mix = mix.reshape(A.shape[0], B.shape[0])
        return Sum([A, Dense(mix) @ B]), DA + mix @ DB
    if kind == "transpose":
        A, D = draw(matrices(draw(st.integers(1, 5)), depth - 1, sums))
        # A.T has A.shape[0] columns; a dense map brings it to the requested column count.
        mix = np.array(draw(st.lists(finite, min_size=A.shape[0] * cols, max_size=A.shape[0] * cols)))
        mix = mix.reshape(A.shape[0], cols)
        return A.T @ Dense(mix), D.T @ mix
    if kind == "rowweighted":
        A, D = draw(matrices(cols, depth - 1, sums))
        w = np.array(draw(st.lists(finite, min_size=A.shape[0], max_size=A.shape[0])))
        return Diagonal(w) @ A, w[:, None] * D
    divisors = [d for d in range(1, cols + 1) if cols % d == 0]
    first = draw(st.sampled_from(divisors))
    A, DA = draw(matrices(first, depth - 1, sums))
    B, DB = draw(matrices(cols // first, depth - 1, sums))
    return Kronecker([A, B]), np.kron(DA, DB)


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def close(a, b):
    scale = max(1.0, float(np.max(np.abs(b))) if np.size(b) else 1.0)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * scale)


@SETTINGS
@given(matrices(), st.integers(0, 2**32 - 1))
def test_products_match_dense(pair, seed):
    A, D = pair
    rng = np.random.default_rng(seed)
    m, n = D.shape
    assert A.shape == (m, n)
    close(A.dense(), D)
    x, X = rng.normal(size=n), rng.normal(size=(n, 3))
    y, Y = rng.normal(size=m), rng.normal(size=(m, 2))
    close(A @ x, D @ x)
    close(A @ X, D @ X)
    close(y @ A, y @ D)
    close(Y.T @ A, Y.T @ D)
    close(A.T @ y, D.T @ y)
    close(A.T.dense(), D.T)
    close(A.T.T @ x, D @ x)


@SETTINGS
@given(matrices())
def test_gram_norms_trace_rows_match_dense(pair):
    A, D = pair
    G = gram(A)
    close(G.dense(), D.T @ D)
    close(G @ np.arange(D.shape[1], dtype=float), D.T @ D @ np.arange(D.shape[1], dtype=float))
    close(A.column_norms("l1"), np.abs(D).sum(axis=0))
    close(A.column_norms("l2"), np.sqrt((D**2).sum(axis=0)))
    assert math.isclose(A.sensitivity("l1"), np.abs(D).sum(axis=0).max(), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(A.sensitivity("l2"), np.sqrt((D**2).sum(axis=0)).max(), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(frobenius_squared(A), (D**2).sum(), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(trace(G), np.trace(D.T @ D), rel_tol=1e-9, abs_tol=1e-12)
    selected = [0, D.shape[0] - 1]
    close(rows(A, selected), D[selected])


@SETTINGS
@given(matrices(), st.data())
def test_row_subset_matches_dense_rows_and_keeps_the_kernel_sensitivity(pair, data):
    A, D = pair
    keep = data.draw(st.lists(st.integers(0, D.shape[0] - 1), min_size=1, max_size=D.shape[0], unique=True))
    subset = row_subset(A, keep)
    close(subset.dense(), D[keep])
    assert subset.sensitivity("l1") <= A.sensitivity("l1") * (1 + 1e-9) + 1e-12  # never a loose product bound


@SETTINGS
@given(matrices())
def test_pinv_matches_dense(pair):
    A, D = pair
    expected = np.linalg.pinv(D)
    close(pinv(A).dense(), expected)


@SETTINGS
@given(matrices(sums=False))
def test_spec_round_trip(pair):
    A, D = pair
    text = to_spec(A).model_dump_json()
    rebuilt = from_spec(text)
    assert type(rebuilt) is type(A) or isinstance(rebuilt, Matrix)
    close(rebuilt.dense(), D)
    assert MatrixSpecAdapter.validate_json(text) == to_spec(A)


@pytest.mark.parametrize("n", [1, 2, 7, 37])
def test_closed_form_grams(n):
    for A in [Prefix(n), Suffix(n), AllRange(n), WidthRange(n, max(1, n // 3)), Hierarchical(n, 3)]:
        D = A.dense()
        close(gram(A).dense(), D.T @ D)
        close(A.gram().dense(), D.T @ D)  # the public A.gram() of docs/design.md: the implicit product
        close(gram(A) @ np.arange(n, dtype=float), D.T @ D @ np.arange(n, dtype=float))
        assert trace(gram(A)) == pytest.approx(np.trace(D.T @ D))


def test_sums_and_client_algebra_stay_out_of_the_kernel():
    with pytest.raises(TypeError, match="the kernel takes no sums"):
        to_spec(Kronecker([Sum([Identity(2), Ones(2, 2)]), Prefix(3)]))
    for name in ("pinv", "trace", "frobenius_squared", "__add__", "rows", "abs", "square"):
        assert not hasattr(Matrix, name), name
    with pytest.raises(ValueError):
        from_spec({"kind": "sum", "terms": [{"kind": "identity", "n": 2}]})


def test_closed_form_sensitivities():
    # Notes (hdmm.md): Prefix sens n, AllRange sens max (i+1)(n-i), Haar log2 n + 1.
    assert Prefix(10).sensitivity("l1") == 10
    assert AllRange(10).sensitivity("l1") == max((i + 1) * (10 - i) for i in range(10))
    assert AllRange(10).sensitivity("l2") == pytest.approx(math.sqrt(30))
    assert Haar(64).sensitivity("l1") == 7
    assert Hierarchical(16, 2).sensitivity("l1") == 5
    assert Kronecker([Prefix(4), AllRange(3)]).sensitivity("l1") == 4 * 4


def test_kronecker_matches_row_major_convention():
    B, C = np.arange(6.0).reshape(2, 3), np.arange(8.0).reshape(4, 2)
    X = np.arange(6.0).reshape(3, 2)
    K = Kronecker([Dense(B), Dense(C)])
    np.testing.assert_allclose(K @ X.ravel(), (B @ X @ C.T).ravel())


def test_marginals_are_weighted_kronecker_unions():
    sizes = (2, 3, 4)
    M = MarginalStack(sizes, {(0,): 2.0, (1, 2): 1.0, (): 0.5})
    blocks = [
        2.0 * np.kron(np.kron(np.eye(2), np.ones((1, 3))), np.ones((1, 4))),
        np.kron(np.kron(np.ones((1, 2)), np.eye(3)), np.eye(4)),
        0.5 * np.ones((1, 24)),
    ]
    close(M.dense(), np.vstack(blocks))
    close(from_spec(to_spec(M).model_dump_json()).dense(), M.dense())


def test_numpy_ufuncs_refuse_operator_objects():
    with pytest.raises(TypeError):
        np.abs(Prefix(3))
    assert np.allclose(np.ones(3) @ Prefix(3), [3, 2, 1])


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Identity(0), "positive integer"),
        (lambda: Intervals(4, [0], [4]), "0 <= lo <= hi < 4"),
        (lambda: Intervals(4, [2], [1]), "0 <= lo <= hi"),
        (lambda: VStack([Identity(2), Identity(3)]), "same number of columns"),
        (lambda: Product([Identity(2), Identity(3)]), "cannot multiply"),
        (lambda: Sum([Identity(2), Ones(1, 2)]), "cannot add"),
        (lambda: Haar(6), "power-of-two"),
        (lambda: Dense([[np.nan]]), "finite"),
        (lambda: WidthRange(3, 4), "exceeds"),
        (lambda: MarginalStack([2, 3], [(0, 5)]), "attribute positions"),
        (lambda: Prefix(3) * float("inf"), "finite"),
    ],
)
def test_bad_input_is_refused_clearly(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_shape_mismatch_in_products():
    with pytest.raises(ValueError, match=r"shape \(3, 3\)"):
        Prefix(3) @ np.ones(4)


@pytest.mark.parametrize(
    "payload",
    [
        '{"kind": "identity", "n": 0}',
        '{"kind": "nope", "n": 3}',
        '{"kind": "dense", "data": {"dtype": "float64", "shape": [2, 2], "base64": "AAAA"}}',
        '{"kind": "kronecker", "factors": []}',
        '{"kind": "all_range", "n": 3, "extra": 1}',
        '{"kind": "prefix", "n": 3}',  # a client class (operators.matrices): the kernel takes its intervals
    ],
)
def test_malformed_specs_are_rejected(payload):
    with pytest.raises(ValueError):
        from_spec(payload)


def test_total_is_a_single_summing_row():
    np.testing.assert_array_equal(Total(4).dense(), np.ones((1, 4)))


def test_single_threaded_blas_limits_numpys_and_scipys_blas_and_restores_them():
    """The libraries are found once (kernel/matrix/threads.py); both BLAS builds must be among them."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from ektelo_ng.kernel.matrix.threads import single_threaded_blas

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    with threadpool_limits(2, user_api="blas"):
        with single_threaded_blas():
            inside = blas_threads()
        after = blas_threads()
    assert len(inside) >= 2 and set(inside) == {1}  # numpy's and scipy's OpenBLAS
    assert set(after) == {2}
