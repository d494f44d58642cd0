"""Classic query selection: brute-force constructions, closed forms and the HDMM journal's Table 4."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ektelo_ng.operators.matrix import AllRange, Dense, Diagonal, Intervals, Product, Ranges
from ektelo_ng.operators.matrices import Haar, Hierarchical, Prefix, WidthRange
from ektelo_ng.operators.algebra import gram
from ektelo_ng.operators.error import rmse
from ektelo_ng.operators.selection import classic
from ektelo_ng.operators.partition import Partition
from ektelo_ng.operators.workload import RandomRange

# ---- fixed strategies ------------------------------------------------------------------


def test_trivial_strategies():
    assert np.array_equal(classic.identity((3, 4)).matrix.dense(), np.eye(12))
    assert np.array_equal(classic.total((3, 4)).matrix.dense(), np.ones((1, 12)))
    assert np.array_equal(classic.prefix(4).matrix.dense(), np.tril(np.ones((4, 4))))


def _brute_branching(size: int) -> tuple[int, int]:
    best = None
    for b in range(2, size + 1):
        h = next(h for h in itertools.count(1) if b**h >= size)
        cost = 3 * (b - 1) * h**3 - 2 * (b + 1) * h**2  # 3 x the objective, exact
        if best is None or cost < best[0]:
            best = (cost, b, h)
    return best[1], best[2]


def test_hb_branching_formula():
    assert classic.hb_branching(4096) == (16, 3)
    for size in list(range(2, 300)) + [1000, 1024, 2500, 4095, 4097]:
        assert classic.hb_branching(size) == _brute_branching(size), size


def _explicit_tree(n: int, b: int) -> set[tuple[int, int]]:
    """Every node of a b-ary tree over [0, n) below the root, built by explicit recursion."""
    nodes = set()

    def split(lo, hi):
        size = hi - lo + 1
        if size == 1:
            return
        parts = min(b, size)
        for i in range(parts):
            a, z = lo + i * size // parts, lo + (i + 1) * size // parts - 1
            nodes.add((a, z))
            split(a, z)

    split(0, n - 1)
    return nodes


def test_hb_equals_an_explicit_tree():
    A = classic.hb(4096).matrix
    rows = set(zip(A.lo.tolist(), A.hi.tolist()))
    assert len(rows) == A.shape[0] == 16 + 256 + 4096
    assert rows == _explicit_tree(4096, 16)
    assert {hi - lo + 1 for lo, hi in rows} == {256, 16, 1}
    # a non-power size and the dense matrix itself
    B = classic.hb(300).matrix
    b, _ = classic.hb_branching(300)
    cells = np.arange(300)
    expected = np.array([(cells >= lo) & (cells <= hi) for lo, hi in _explicit_tree(300, b)], dtype=float)
    got = B.dense()
    assert np.array_equal(got[np.lexsort(got.T[::-1])], expected[np.lexsort(expected.T[::-1])])
    # height one: HB is the identity
    assert np.array_equal(classic.hb(64).matrix.dense(), np.eye(64))


@pytest.mark.parametrize(
    "workload, n, table",
    [("all-range", 64, 6.63), ("all-range", 256, 8.90), ("all-range", 1024, 12.82), ("prefix", 64, 8.06),
     ("prefix", 256, 8.97), ("prefix", 1024, 12.87), ("width32", 256, 7.41), ("width32", 1024, 9.50)],
)
def test_hb_reproduces_hdmm_table_4(workload, n, table):
    W = {"all-range": AllRange, "prefix": Prefix, "width32": lambda n: WidthRange(n, 32)}[workload](n)
    assert rmse(W, classic.hb(n).matrix) == pytest.approx(table, abs=0.006)


def test_two_dimensional_kronecker_forms():
    h = classic.h2((4, 8)).matrix.dense()
    assert np.array_equal(h, np.kron(Hierarchical(4, 2).dense(), Hierarchical(8, 2).dense()))
    assert np.array_equal(classic.privelet((4, 8)).matrix.dense(), np.kron(Haar(4).dense(), Haar(8).dense()))
    # HB in 2-D: b from the whole domain (1024 cells: b = 32), the same b per dimension
    assert classic.hb_branching(16 * 64)[0] == 32
    expected = np.kron(np.eye(16), Hierarchical(64, 32, include_root=False).dense())
    assert np.array_equal(classic.hb((16, 64)).matrix.dense(), expected)
    assert np.array_equal(classic.h2(5).matrix.dense(), Hierarchical(5, 2).dense())


def test_stripe_is_hb_along_one_attribute():
    S = classic.stripe((3, 300), 1).matrix
    assert np.array_equal(S.dense(), np.kron(np.eye(3), classic.hb(300).matrix.dense()))
    S0 = classic.stripe((300, 2), 0).matrix
    assert np.array_equal(S0.dense(), np.kron(classic.hb(300).matrix.dense(), np.eye(2)))
    assert S.sensitivity() == classic.hb(300).matrix.sensitivity()
    with pytest.raises(ValueError):
        classic.stripe((3, 4), 2)


# ---- GreedyH ---------------------------------------------------------------------------


def _naive_greedy(V: np.ndarray, grid: int) -> np.ndarray:
    """The documented GreedyH rule with explicit matrices and pseudo-inverses (small n)."""
    n = V.shape[0]
    candidates = np.arange(grid) / grid

    def build(lo, hi, parent):
        if lo == hi:
            return np.ones((1, 1)), [(lo, hi, 1.0)]
        mid = lo + (hi - lo + 1) // 2
        left, nodes_left = build(lo, mid - 1, (lo, hi))
        right, nodes_right = build(mid, hi, (lo, hi))
        children = np.block([[left, np.zeros((left.shape[0], right.shape[1]))],
                             [np.zeros((right.shape[0], left.shape[1])), right]])
        k = 0.0 if parent is None else V[parent[0], parent[1]]
        local = V[lo : hi + 1, lo : hi + 1] - k
        errors = []
        for c in candidates:
            A = np.vstack([c * np.ones((1, hi - lo + 1)), (1 - c) * children])
            errors.append(np.trace(np.linalg.pinv(A.T @ A) @ local))
        c = candidates[int(np.argmin(errors))]
        A = np.vstack([c * np.ones((1, hi - lo + 1)), (1 - c) * children])
        nodes = [(lo, hi, c)] + [(a, b, w * (1 - c)) for a, b, w in nodes_left + nodes_right]
        return A, nodes

    _, nodes = build(0, n - 1, None)
    rows = [np.where((np.arange(n) >= a) & (np.arange(n) <= b), w, 0.0) for a, b, w in nodes if w > 0]
    return np.array(rows)


def _row_set(A: np.ndarray) -> np.ndarray:
    return A[np.lexsort(np.round(A, 12).T[::-1])]


def _assert_greedy_h_follows_its_documented_rule(W, monkeypatch):
    """On W and on W as a dense matrix, and with W's Gram read from W made sparse (products) or from
    its structured products (explicit materialization switched off)."""
    expected = _row_set(_naive_greedy(gram(W).dense(), grid=10))
    for workload in (W, Dense(W.dense())):
        assert np.allclose(_row_set(classic.greedy_h(workload, grid=10).matrix.dense()), expected, atol=1e-12)
    with monkeypatch.context() as patch:
        patch.setattr(classic, "EXPLICIT_NONZEROS", 0)
        assert np.allclose(_row_set(classic.greedy_h(W, grid=10).matrix.dense()), expected, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 12, 16])
def test_greedy_h_follows_its_documented_rule(n, monkeypatch):
    rng = np.random.default_rng(n)
    lo = rng.integers(0, n, 15)
    hi = np.maximum(lo, rng.integers(0, n, 15))
    W = Product([Diagonal(rng.uniform(0.5, 2.0, 15)), Intervals(n, lo, hi)])  # weighted: no ties
    _assert_greedy_h_follows_its_documented_rule(W, monkeypatch)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_h_on_boxes_reduced_by_a_partition_follows_its_documented_rule(seed, monkeypatch):
    """DAWA in 2-D: weighted boxes times a partition's expansion P^+ (cells in groups of sizes 1 to 4)."""
    rng = np.random.default_rng(seed)
    ends = rng.integers(0, 6, (12, 2, 2))
    boxes = Ranges((6, 6), ends.min(axis=2), ends.max(axis=2))
    groups = Partition(np.repeat(np.arange(36), rng.integers(1, 5, 36))[:36])
    W = Product([Diagonal(rng.uniform(0.5, 2.0, 12)), boxes, groups.expand()])
    _assert_greedy_h_follows_its_documented_rule(W, monkeypatch)


def test_greedy_h_paths_sum_to_one():
    A = classic.greedy_h(RandomRange(300, 200, seed=3)).matrix
    assert np.allclose(A.column_norms("l1"), 1.0)


GREEDY_TABLE = {  # J Table 4: (workload, n) -> (GreedyH, H2, Identity)
    ("all-range", 64): (6.34, 11.28, 6.63),
    ("all-range", 256): (9.72, 16.27, 13.11),
    ("all-range", 1024): (14.70, 21.83, 26.15),
    ("prefix", 64): (6.04, 9.42, 8.06),
    ("prefix", 256): (9.13, 13.16, 16.03),
    ("prefix", 1024): (14.32, 17.29, 32.02),
    ("width32", 256): (8.00, 15.50, 8.00),
}


@pytest.mark.parametrize("case", sorted(GREEDY_TABLE))
def test_greedy_h_against_hdmm_table_4(case):
    """Our GreedyH is within 1% of the table at n = 256, within 4% at n = 64 (all-range lower,
    prefix higher), and better than the table beyond (n = 1024, width32): the published
    implementation is not documented in enough detail to reproduce exactly (see greedy_h)."""
    workload, n = case
    W = {"all-range": AllRange, "prefix": Prefix, "width32": lambda n: WidthRange(n, 32)}[workload](n)
    table, h2_error, identity_error = GREEDY_TABLE[case]
    ours = rmse(W, classic.greedy_h(W).matrix)
    assert ours < min(h2_error, identity_error)
    if n == 64:
        assert abs(ours / table - 1) < 0.04
    elif n == 256 and workload != "width32":
        assert abs(ours / table - 1) < 0.01
    else:
        assert ours < table


def test_greedy_h_scales_to_dpbench_sizes():
    A = classic.greedy_h(RandomRange(4096, 1000, seed=0)).matrix
    assert A.shape[1] == 4096 and A.sensitivity() == pytest.approx(1.0)


# ---- boxes -----------------------------------------------------------------------------


def _explicit_quadtree(shape):
    boxes = []

    def split(lo, hi):
        boxes.append((tuple(lo), tuple(hi)))
        if all(a == b for a, b in zip(lo, hi)):
            return
        halves = []
        for a, b in zip(lo, hi):
            mid = a + (b - a + 1) // 2
            halves.append([(a, mid - 1), (mid, b)] if b > a else [(a, b)])
        for choice in itertools.product(*halves):
            split([c[0] for c in choice], [c[1] for c in choice])

    split([0] * len(shape), [s - 1 for s in shape])
    return boxes


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (1, 6), (8, 8), (3, 2, 2)])
def test_quadtree_rows_brute_force(shape):
    Q = classic.quadtree(shape, split="uniform").matrix
    got = sorted(zip(map(tuple, Q.lo.tolist()), map(tuple, Q.hi.tolist())))
    assert got == sorted(_explicit_quadtree(shape))
    assert Q.lo[0].tolist() == [0] * len(shape)  # root first
    depth = math.ceil(math.log2(max(shape))) + 1
    assert Q.sensitivity() == depth  # every cell is in one box per level


def test_quadtree_in_one_dimension_is_h2():
    assert np.array_equal(classic.quadtree(13, split="uniform").matrix.dense(), Hierarchical(13, 2).dense())


@pytest.mark.parametrize("shape", [(8, 8), (5, 3), (16, 16)])
def test_quadtree_geometric_split_gives_each_level_down_2_to_the_third_more(shape):
    """DPBench's QuadTree (Cormode et al.): level t (root 0) gets epsilon 2^(t/3) / sum_s 2^(s/3)."""
    uniform = classic.quadtree(shape, split="uniform").matrix
    geometric = classic.quadtree(shape).matrix
    depth = {}

    def visit(lo, hi, t):
        depth[(tuple(lo), tuple(hi))] = t
        if any(a < b for a, b in zip(lo, hi)):
            halves = [[(a, a + (b - a + 1) // 2 - 1), (a + (b - a + 1) // 2, b)] if b > a else [(a, b)]
                      for a, b in zip(lo, hi)]
            for choice in itertools.product(*halves):
                visit([c[0] for c in choice], [c[1] for c in choice], t + 1)

    visit([0] * len(shape), [n - 1 for n in shape], 0)
    rows = uniform.dense()
    weights = geometric.dense().sum(axis=1) / rows.sum(axis=1)
    assert np.allclose(geometric.dense(), rows * weights[:, None])  # the same boxes, scaled
    boxes = zip(map(tuple, uniform.lo.tolist()), map(tuple, uniform.hi.tolist()))
    assert np.allclose(weights, [2.0 ** (depth[box] / 3) for box in boxes])
    levels = math.ceil(math.log2(max(shape))) + 1
    expected = 2.0 ** (np.arange(levels) / 3)
    assert geometric.sensitivity("l1") == pytest.approx(expected.sum())  # level t's epsilon share: 2^(t/3) / sum


def test_geometric_quadtree_answers_random_ranges_better_than_uniform():
    W = RandomRange((32, 32), 300, seed=2)
    assert rmse(W, classic.quadtree((32, 32))) < 0.8 * rmse(W, classic.quadtree((32, 32), split="uniform"))


def _covers_once(R) -> bool:
    return bool(np.all(R.column_norms("l1") == 1.0))


def _sides(R) -> list[tuple[int, ...]]:
    return sorted(set(map(tuple, (R.hi - R.lo + 1).tolist())))


def test_uniform_grid_cell_side():
    # N eps / c = 100 cells wanted on 64 x 64: DPBench's side int(sqrt(40.96) - 1) + 1 = 6 (floor, not
    # ceil), so 11 x 11 cells: ten of 6 and one of 4 along each side
    U = classic.uniform_grid((64, 64), 10_000, 0.1).matrix
    assert U.shape == (121, 4096) and _covers_once(U)
    assert _sides(U) == [(4, 4), (4, 6), (6, 4), (6, 6)]
    # DPBench at 128 x 128, eps 0.1: N = 1e4 -> side 12 (11 x 11 cells), 1e5 -> 4, 1e6 -> 1 (every cell)
    assert [classic.uniform_grid((128, 128), n, 0.1).matrix.shape[0] for n in (1e4, 1e5, 1e6)] == [121, 1024, 16384]
    assert classic.uniform_grid((12, 12), 16 * 10 / 0.1, 0.1).matrix.shape[0] == 16  # sqrt(144 / 16) = 3 exactly
    assert classic.uniform_grid((64, 64), -5.0, 0.1).matrix.shape == (1, 4096)  # noisy N <= 0: the total
    assert np.array_equal(classic.uniform_grid((8, 8), 1e9, 1.0).matrix.dense(), np.eye(64))
    assert classic.uniform_grid((4, 4, 4), 8 * 10.0, 1.0).matrix.shape[0] == 8  # 3-D: cube root of 64 / 8 = 2


def test_adaptive_grid_levels():
    # m1 = max(10, int(sqrt(N eps / c) / 4 - 1) + 1) = max(10, floor(25)) = 25; cells
    # int(sqrt(4096 / 625) - 1) + 1 = 2 wide: 32 x 32 of them, more than m1^2
    L1 = classic.adaptive_grid_level1((64, 64), 1e5, 1.0)
    assert L1.shape == (1024, 4096) and _covers_once(L1) and _sides(L1) == [(2, 2)]
    # 128 x 128 at eps 0.1: N = 1e6 gives m1 = 25, 5 wide (26 x 26, 3 at the edge); 1e7 gives m1 =
    # floor(79.06) = 79 (not 80), 1 wide: every cell
    assert _sides(classic.adaptive_grid_level1((128, 128), 1e6, 0.1)) == [(3, 3), (3, 5), (5, 3), (5, 5)]
    assert classic.adaptive_grid_level1((128, 128), 1e7, 0.1).shape == (16384, 16384)
    small = classic.adaptive_grid_level1((64, 64), 10.0, 0.1)  # m1 = 10: 6 wide, 11 x 11 cells
    assert small.shape == (121, 4096) and _sides(small) == [(4, 4), (4, 6), (6, 4), (6, 6)]
    assert classic.adaptive_grid_level1((4, 64), 10.0, 0.1).shape == (256, 256)  # sqrt(256) / 10 -> 1 wide
    # level-1 cell -> (noisy count, sub-cells): m2 = floor(sqrt(count * 0.5 / 5)), sub-cells
    # floor(sqrt(area) / m2) wide, the last cut short
    cases = {
        0: (-50.0, 1),  # 6 x 6, count <= 0: m2 = 1, the cell itself
        1: (90.0, 9),  # 6 x 6, m2 = 3: 2 wide, 3 x 3
        5: (170.0, 36),  # 6 x 6, m2 = floor(4.12) = 4: 1 wide, 6 x 6 (not 4 x 4)
        10: (40.0, 6),  # 6 x 4 (right edge), m2 = 2: floor(sqrt(24) / 2) = 2 wide, 3 x 2
        120: (90.0, 16),  # 4 x 4 corner, m2 = 3: 1 wide
    }
    counts = np.zeros(small.shape[0])
    for j, (count, _) in cases.items():
        counts[j] = count
    L2 = classic.adaptive_grid_level2(small, counts, 0.5)
    assert _covers_once(L2)
    for j, (_, expected) in cases.items():
        inside = np.all((L2.lo >= small.lo[j]) & (L2.hi <= small.hi[j]), axis=1)
        assert inside.sum() == expected
    # a 12 x 12 cell with count 250: m2 = 5, sub-cells int(12 / 5) = 2 wide, 6 x 6 of them (not 5 x 5)
    one = classic.adaptive_grid_level1((120, 120), 1.0, 0.1)
    assert _sides(one) == [(12, 12)]
    L2 = classic.adaptive_grid_level2(one, np.full(100, 250.0), 0.1, c2=1.0)
    assert L2.shape == (3600, 14400) and _sides(L2) == [(2, 2)]
    with pytest.raises(ValueError):
        classic.adaptive_grid_level1(64, 1e5, 1.0)


def test_adaptive_grid_even_layout():
    # the paper's sizes: m1 = max(10, ceil(sqrt(N eps / c) / 4)), each side in m1 nearly equal parts
    L1 = classic.adaptive_grid_level1((128, 128), 1e7, 0.1, layout="even")  # ceil(79.06) = 80
    assert L1.shape == (6400, 16384) and _covers_once(L1) and _sides(L1) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    small = classic.adaptive_grid_level1((64, 64), 10.0, 0.1, layout="even")  # m1 = 10: 6 and 7 wide
    assert small.shape == (100, 4096) and _sides(small) == [(6, 6), (6, 7), (7, 6), (7, 7)]
    assert classic.adaptive_grid_level1((4, 64), 10.0, 0.1, layout="even").shape == (40, 256)  # short side: 4 parts
    # m2 = ceil(sqrt(count * 0.5 / 5)): count 90 -> 3 (3 x 3), 170 -> ceil(4.12) = 5 (5 x 5), <= 0 -> 1
    counts = np.zeros(100)
    counts[[0, 1, 2]] = [-50.0, 90.0, 170.0]
    L2 = classic.adaptive_grid_level2(small, counts, 0.5, layout="even")
    assert _covers_once(L2)
    for j, expected in [(0, 1), (1, 9), (2, 25), (3, 1)]:
        assert np.all((L2.lo >= small.lo[j]) & (L2.hi <= small.hi[j]), axis=1).sum() == expected
    with pytest.raises(ValueError, match="layout"):
        classic.adaptive_grid_level1((64, 64), 1e5, 1.0, layout="odd")


# ---- MWEM augmentation ------------------------------------------------------------------


@pytest.mark.parametrize("round_index", [0, 1, 2, 3])
def test_mwem_h2_augmentation(round_index):
    n = 37
    query = np.zeros(n)
    query[11:20] = 1.0
    A = classic.mwem_h2_augmentation(query, n, round_index).dense()
    assert np.array_equal(A[0], query)
    width = 2**round_index
    expected = [
        [1.0 if start <= j < start + width else 0.0 for j in range(n)]
        for start in range(0, n, width)
        if not query[start : start + width].any()
    ]
    assert np.array_equal(A[1:], np.array(expected).reshape(-1, n))
    assert A.sum(axis=0).max() == 1.0  # disjoint: no extra sensitivity
