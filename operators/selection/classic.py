"""Classic query selection: the fixed and workload-adapted strategies of DPBench and ektelo.

Every selector is public computation (domain sizes, a workload, public or noisy scalars; never
data) and returns a ``LinearStrategy`` (its ``.matrix`` an implicit ``kernel.matrix`` Matrix);
the two AdaptiveGrid levels and MWEM's augmentation are building blocks of data-dependent plans
and return matrices. Shapes are an int (1-D), a list of attribute sizes, a mapping of names to
sizes, or a Domain; data vectors are row-major.

- ``identity``, ``total``, ``prefix``: the trivial strategies.
- ``h2`` (binary tree with root), ``hb`` (Qardaji et al.'s branching, root excluded),
  ``privelet`` (Haar): per dimension, Kronecker in d-D.
- ``greedy_h``: a weighted binary tree adapted to the workload (DAWA's GreedyH, see its docstring).
- ``quadtree``: recursive midpoint splits down to cells, as range (box) queries.
- ``uniform_grid``, ``adaptive_grid_level1``, ``adaptive_grid_level2``: Qardaji et al.'s grids, cut as
  DPBench cuts them (AdaptiveGrid also evenly, as its paper sizes them).
- ``stripe``: HB along one attribute, identity on the others (HB-Striped_kron).
- ``mwem_h2_augmentation``: MWEM's selected query plus disjoint dyadic intervals (ektelo 9.1).

>>> hb_branching(4096)
(16, 3)
>>> h2(4).shape, quadtree((2, 2)).shape
((7, 4), (5, 4))
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

import numpy as np
import scipy.sparse as sp

from ..matrix import (
    Dense,
    Diagonal,
    Identity,
    Intervals,
    Kronecker,
    Matrix,
    Product,
    Ranges,
    Total,
    VStack,
    Weighted,
)
from ..matrices import Haar, Hierarchical, Prefix
from .. import algebra
from ..domains import Shape, shape_sizes
from ..linalg import explicit_sparse
from .linear import LinearStrategy

#: Entries of a structured Gram product computed at once by ``greedy_h`` (small: cache-friendly).
_CHUNK_ENTRIES = 1 << 15
#: Largest workload (non-zeros) ``greedy_h`` materializes as a sparse array to read its Gram from.
EXPLICIT_NONZEROS = 1 << 25


def _per_dimension(shape: Shape, block) -> Matrix:
    dims = shape_sizes(shape)
    return block(dims[0]) if len(dims) == 1 else Kronecker([block(n) for n in dims])


def identity(shape: Shape) -> LinearStrategy:
    """Measure every cell (the Laplace mechanism on the histogram)."""
    return LinearStrategy(Identity(math.prod(shape_sizes(shape))), name="Identity")


def total(shape: Shape) -> LinearStrategy:
    """Measure only the total count (DPBench's Uniform)."""
    return LinearStrategy(Total(math.prod(shape_sizes(shape))), name="Uniform")


def prefix(n: int) -> LinearStrategy:
    """The n prefix sums of a 1-D domain."""
    return LinearStrategy(Prefix(n), name="Prefix")


def h2(shape: Shape) -> LinearStrategy:
    """Hay et al.'s binary hierarchy with its root; Kronecker of one per dimension in d-D."""
    return LinearStrategy(_per_dimension(shape, lambda n: Hierarchical(n, 2) if n > 1 else Identity(1)), name="H2")


def hb_branching(size: int) -> tuple[int, int]:
    """Qardaji et al.'s HB branching factor b and height h for a domain of ``size`` cells.

    Minimizes (b - 1) h^3 - (2/3)(b + 1) h^2 with h = ceil(log_b size). For a fixed h the
    objective grows with b, so only the smallest b reaching each height is a candidate; ties
    go to the smaller b.
    """
    if size < 2:
        return 2, 1
    candidates = []
    for height in range(1, size.bit_length() + 1):
        b = max(2, math.ceil(size ** (1.0 / height)) - 1)
        while b**height < size:
            b += 1
        h = 1
        while b**h < size:
            h += 1
        # three times the objective, in exact integers; ties go to the smaller branching
        candidates.append((3 * (b - 1) * h**3 - 2 * (b + 1) * h**2, b, h))
    _, b, h = min(candidates)
    return b, h


def _hb_tree(n: int, branching: int, root: bool = False) -> Matrix:
    return Identity(n) if branching >= n else Hierarchical(n, branching, include_root=root)


def hb(shape: Shape, *, root: bool = False) -> LinearStrategy:
    """HB: a b-ary tree without its root (leaves = identity), b from ``hb_branching``, as HDMM's tables measure
    it; ``root=True`` measures the root too, as DPBench's HB engine does in 1-D.

    In d-D, b is chosen for the whole domain size and used in every dimension (Kronecker).
    """
    dims = shape_sizes(shape)
    branching, _ = hb_branching(math.prod(dims))
    return LinearStrategy(_per_dimension(dims, lambda n: _hb_tree(n, branching, root)), name="HB")


def privelet(shape: Shape) -> LinearStrategy:
    """Privelet: the Haar wavelet per dimension (power-of-two sizes), Kronecker in d-D."""
    return LinearStrategy(_per_dimension(shape, Haar), name="Privelet")


# ---- GreedyH -----------------------------------------------------------------------------


def greedy_h(W: Matrix, *, grid: int = 100) -> LinearStrategy:
    """DAWA's GreedyH: a binary tree of intervals with weights adapted to the workload W (1-D).

    Every node v splits its interval at the midpoint; its query gets weight c_v times what its
    ancestors left, and its two children share the rest (1 - c_v), so every root-to-leaf path
    sums to 1 (L1 sensitivity 1; a leaf takes all that is left). Bottom-up, each node picks c_v
    from {0, 1/grid, ..., (grid-1)/grid} minimizing tr[(A_v^T A_v)^{-1} V_v], A_v its subtree
    strategy and V_v its local workload Gram, in closed form by Sherman-Morrison on the
    children's results: with u = (blockdiag G_k)^{-1} 1, s = 1^T u, T = sum_k tr[G_k^{-1} V_kk],
    q = u^T V_v u and a = c^2 / (1 - c)^2, the error is (T - a q / (1 + a s)) / (1 - c)^2.

    Local workload (DAWA does not pin it down; of the rules tried, the closest to the published
    numbers): V_v is (W^T W)[I_v, I_v] minus the part of the queries covering the parent's
    whole interval, k 1 1^T with k = (W^T W)[lo_parent, hi_parent], as those are answered from
    the parent's level and above; the root keeps everything. The subtraction is exact for range
    (interval) workloads and a heuristic otherwise. Using all of (W^T W)[I_v, I_v] instead is
    myopic: low nodes spend the budget on totals their ancestors provide (prefix 1024: 24.5).
    HDMM journal Table 4, RMSE ours / published: all-range 64 6.14 / 6.34, 256 9.77 / 9.72,
    1024 14.16 / 14.70; prefix 64 6.25 / 6.04, 256 9.21 / 9.13, 1024 12.61 / 14.32; width-32
    ranges 256: 7.07 / 8.00.

    Only block quadratic forms and single entries of W^T W are used, never V itself: through V's
    structured products, O(n) columns in all (n = 4096 ranges: well under a second), or, for a
    workload without a structured Gram (DAWA's reduced workloads: 2000 boxes on 256 x 256 cells in
    1712 groups, 0.2 s), as |W_I u_I|^2 and column products of W made sparse once. Its matrix is
    diag(weights) @ Intervals with zero-weight nodes dropped.
    """
    if int(grid) < 1:
        raise ValueError(f"grid must be a positive number of candidate weights, got {grid}")
    gram = _workload_gram(W)
    n = W.shape[1]
    diagonal = gram.diagonal()
    levels = _binary_levels(n)
    candidates = np.arange(grid) / grid
    a = candidates**2 / (1.0 - candidates) ** 2
    u = np.ones(n)  # (A_v^T A_v)^{-1} 1 on the interval of every node processed so far
    choices: list[np.ndarray] = [np.empty(0)] * len(levels)
    errors_below = np.empty(0)  # tr[G^{-1} V[I, I]] of the nodes one level down
    for depth in range(len(levels) - 1, -1, -1):
        lo, hi = levels[depth]
        inner = lo < hi
        c, errors = np.ones(lo.size), np.empty(lo.size)
        errors[~inner] = diagonal[lo[~inner]]
        if inner.any():
            cells, owner = _cells(lo[inner], hi[inner])
            s = np.bincount(owner, weights=u[cells], minlength=owner[-1] + 1)
            T = errors_below.reshape(-1, 2).sum(axis=1)
            q = gram.quadratic_forms(u, cells, owner)
            if depth == 0:
                k = np.zeros(1)
            else:
                plo, phi = levels[depth - 1]
                parents = plo < phi
                k = np.repeat(gram.entries(plo[parents], phi[parents]), 2)[inner]
            shrink = 1.0 + a * s[:, None]
            local = (T - k * s)[:, None] - a * (q - k * s * s)[:, None] / shrink
            best = np.argmin(local / (1.0 - candidates) ** 2, axis=1)
            cb, ab = candidates[best], a[best]
            errors[inner] = (T - ab * q / (1.0 + ab * s)) / (1.0 - cb) ** 2
            c[inner] = cb
            u[cells] *= (1.0 / ((1.0 - cb) ** 2 * (1.0 + ab * s)))[owner]
        choices[depth] = c
        errors_below = errors
    return LinearStrategy(_weighted_tree(levels, choices, n), W, name="GreedyH")


def _binary_levels(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Nodes of the midpoint binary tree by depth; the children of the i-th inner node of a
    level are nodes 2i and 2i+1 of the next level."""
    lo, hi = np.array([0]), np.array([n - 1])
    levels = [(lo, hi)]
    while np.any(lo < hi):
        split = lo < hi
        mid = lo[split] + (hi[split] - lo[split] + 1) // 2
        lo = np.stack([lo[split], mid], axis=1).ravel()
        hi = np.stack([mid - 1, hi[split]], axis=1).ravel()
        levels.append((lo, hi))
    return levels


def _cells(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cells of disjoint sorted intervals, and which interval owns each."""
    sizes = hi - lo + 1
    owner = np.repeat(np.arange(lo.size), sizes)
    starts = np.cumsum(sizes) - sizes
    return lo[owner] + np.arange(owner.size) - starts[owner], owner


def _workload_gram(W: Matrix) -> _ExplicitGram | _ImplicitGram:
    """What GreedyH reads of V = W^T W: for intervals, from V's products (O(n) per column); for other
    workloads from W made sparse when that is cheap (dense, boxes, a workload reduced by a partition:
    a product with their V costs O(n^2) per column, or all of W twice); else from V's products."""
    explicit = None if isinstance(W, Intervals) else explicit_sparse(W, EXPLICIT_NONZEROS)
    return _ImplicitGram(W) if explicit is None else _ExplicitGram(explicit)


class _ExplicitGram:
    """Entries and block quadratic forms of V = W^T W from W (m x n, sparse): each a pass over W's
    non-zeros, never V (n x n, and dense once queries overlap)."""

    def __init__(self, W: sp.csr_array):
        self.W, self.columns = W, sp.csc_array(W)

    def diagonal(self) -> np.ndarray:
        """diag(V): the squared column norms of W."""
        return np.bincount(self.W.indices, weights=self.W.data**2, minlength=self.W.shape[1])

    def entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """V[rows[j], cols[j]] = W[:, rows[j]] . W[:, cols[j]] for every j."""
        return np.asarray(self.columns[:, rows].multiply(self.columns[:, cols]).sum(axis=0)).ravel()

    def quadratic_forms(self, u: np.ndarray, cells: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """u_I^T V[I, I] u_I = |W[:, I] u_I|^2 for every interval I (given by its cells and owner index)."""
        count = int(owner[-1]) + 1
        blocks = sp.csr_array((u[cells], (cells, owner)), shape=(self.W.shape[1], count))
        products = sp.csr_array(self.W @ blocks)
        return np.bincount(products.indices, weights=products.data**2, minlength=count)


class _ImplicitGram:
    """Entries and block quadratic forms of V = W^T W from V's structured products, a block of
    columns at a time: O(n) columns in all, never n x n."""

    def __init__(self, W: Matrix):
        self.W, self.V = W, algebra.gram(W)

    def diagonal(self) -> np.ndarray:
        """diag(V): the squared column norms of W."""
        return self.W.column_norms("l2") ** 2

    def entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """V[rows[j], cols[j]] for every j, from columns of V."""
        n = self.V.shape[0]
        unique, where = np.unique(cols, return_inverse=True)
        out = np.empty(rows.size)
        step = max(1, _CHUNK_ENTRIES // n)
        for start in range(0, unique.size, step):
            block = unique[start : start + step]
            units = np.zeros((n, block.size))
            units[block, np.arange(block.size)] = 1.0
            columns = self.V @ units
            pick = (where >= start) & (where < start + block.size)
            out[pick] = columns[rows[pick], where[pick] - start]
        return out

    def quadratic_forms(self, u: np.ndarray, cells: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """u_I^T V[I, I] u_I for every interval I (given by its cells and owner index)."""
        count = int(owner[-1]) + 1
        bounds = np.searchsorted(owner, np.arange(count + 1))
        n = self.V.shape[0]
        out = np.empty(count)
        step = max(1, _CHUNK_ENTRIES // n)
        for first in range(0, count, step):
            last = min(count, first + step)
            a, b = bounds[first], bounds[last]
            X = np.zeros((n, last - first))
            X[cells[a:b], owner[a:b] - first] = u[cells[a:b]]
            out[first:last] = np.einsum("ij,ij->j", X, self.V @ X)
        return out


def _weighted_tree(levels: list[tuple[np.ndarray, np.ndarray]], choices: list[np.ndarray], n: int) -> Matrix:
    """Top-down: node weight = c_v * (budget left by its ancestors); zero weights dropped."""
    lows, highs, weights = [], [], []
    left = np.ones(1)
    for (lo, hi), c in zip(levels, choices):
        w = left * c
        keep = w > 0
        lows.append(lo[keep])
        highs.append(hi[keep])
        weights.append(w[keep])
        left = np.repeat((left * (1.0 - c))[lo < hi], 2)
    return Product([Diagonal(np.concatenate(weights)), Intervals(n, np.concatenate(lows), np.concatenate(highs))])


# ---- boxes: quadtree and grids -------------------------------------------------------------


def quadtree(shape: Shape, *, split: Literal["geometric", "uniform"] = "geometric") -> LinearStrategy:
    """Cormode et al.'s quadtree: the root box, split at the midpoint of every side longer than
    one cell (4 children, 2 for one-row or one-column boxes; 2^d in d-D), down to single cells.

    Boxes are listed level by level; a side of s cells splits into s // 2 and the rest. ``split``:
    how the budget is shared among the levels. ``"geometric"`` (the paper's, and DPBench's) weights
    depth t by 2^(t/3), so each level down gets 2^(1/3) times the budget of the one above and the
    leaves the most; ``"uniform"`` gives every level the same. (The strategy's L1 sensitivity is the
    sum of the weights, so level t's share of epsilon is its weight over that sum.)
    """
    if split not in ("geometric", "uniform"):
        raise ValueError(f"split must be 'geometric' or 'uniform', got {split!r}")
    dims = shape_sizes(shape)
    lo, hi = np.zeros((1, len(dims)), dtype=np.int64), np.array([dims], dtype=np.int64) - 1
    los, his = [lo], [hi]
    while True:
        divided = lo < hi
        parent = divided.any(axis=1)
        if not parent.any():
            break
        lo, hi, divided = lo[parent], hi[parent], divided[parent]
        mid = lo + (hi - lo + 1) // 2
        children_lo, children_hi, owner = [], [], []
        for upper in itertools.product((False, True), repeat=len(dims)):
            upper = np.array(upper)
            valid = np.all(divided | ~upper, axis=1)
            children_lo.append(np.where(upper, mid, lo)[valid])
            children_hi.append(np.where(upper | ~divided, hi, mid - 1)[valid])
            owner.append(np.flatnonzero(valid))
        order = np.argsort(np.concatenate(owner), kind="stable")
        lo, hi = np.concatenate(children_lo)[order], np.concatenate(children_hi)[order]
        los.append(lo)
        his.append(hi)
    if split == "uniform":
        return LinearStrategy(Ranges(dims, np.concatenate(los), np.concatenate(his)), name="QuadTree")
    levels = [Weighted(Ranges(dims, a, b), 2.0 ** (depth / 3)) for depth, (a, b) in enumerate(zip(los, his))]
    return LinearStrategy(VStack(levels), name="QuadTree")


def _cell_width(area: float, cells: float, dimensions: int = 2) -> int:
    """DPBench's grid cell width for about ``cells`` cells over ``area`` domain cells: the d-th root
    of area / cells rounded down (at least 1). DPBench writes it int(r - 1) + 1, which is floor(r)
    for r >= 1, not ceil(r): a grid has at least the cells asked for. No cells asked for: one cell."""
    if not cells > 0:
        return int(area)
    ratio = area / cells
    root = math.sqrt(ratio) if dimensions == 2 else ratio ** (1.0 / dimensions)
    width = math.floor(root)
    if (width + 1) ** dimensions <= ratio:  # a d-th root computed just below an integer
        width += 1
    return max(width, 1)


def _tiles(lo: np.ndarray, hi: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The box [lo, hi] cut into squares ``width`` cells wide, the last along each side cut short."""
    starts = np.meshgrid(*[np.arange(a, b + 1, width) for a, b in zip(lo, hi)], indexing="ij")
    tile_lo = np.stack([g.ravel() for g in starts], axis=1)
    return tile_lo, np.minimum(tile_lo + width - 1, hi)


def uniform_grid(shape: Shape, scale_estimate: float, epsilon: float, *, c: float = 10.0) -> LinearStrategy:
    """Qardaji et al.'s UniformGrid as DPBench builds it: about M = N eps / c cells, one count each.

    N is the number of records: the caller passes a public value or a noisy estimate (spending
    budget on it), never the private count. Cells are g domain cells wide along every side, the
    last one cut short, g = ``_cell_width`` (floor((n m / M)^(1/2)) in 2-D, so at least M cells);
    M <= 0 gives one cell, the total.
    """
    dims = np.array(shape_sizes(shape))
    width = _cell_width(float(dims.prod()), scale_estimate * epsilon / c, dims.size)
    lo, hi = _tiles(np.zeros(dims.size, dtype=np.int64), dims - 1, width)
    return LinearStrategy(Ranges(tuple(dims), lo, hi), name="UGrid")


def _two_dimensional(shape: Shape) -> tuple[int, int]:
    dims = shape_sizes(shape)
    if len(dims) != 2:
        raise ValueError(f"AdaptiveGrid is defined for 2-D domains, got {len(dims)} dimensions")
    return dims


#: How AdaptiveGrid turns a number m of cells per side into cells: ``"dpbench"`` rounds m down and
#: cuts squares floor(sqrt(area) / m) wide, the last cut short (more than m^2 cells when that floor
#: rounds down: 36 on a 12 x 12 cell for m = 5); ``"even"`` rounds m up and cuts each side into m
#: nearly equal parts (exactly m^2 cells, fewer where a side is shorter than m), as the paper sizes them.
GridLayout = Literal["dpbench", "even"]


def _cells_per_side(root: float, layout: GridLayout) -> int:
    """m from its real value ``root``: DPBench's int(root - 1) + 1 (floor), or the paper's ceil; at least 1."""
    if layout not in ("dpbench", "even"):
        raise ValueError(f"layout must be 'dpbench' or 'even', got {layout!r}")
    return max(1, math.floor(root) if layout == "dpbench" else math.ceil(root))


def _grid_cells(lo: np.ndarray, hi: np.ndarray, m: int, layout: GridLayout) -> tuple[np.ndarray, np.ndarray]:
    """The box [lo, hi] cut for m x m cells, as ``layout`` says."""
    if layout == "dpbench":
        return _tiles(lo, hi, _cell_width(float(np.prod(hi - lo + 1)), m**2))
    sides = []
    for a, b in zip(lo, hi):
        parts = min(m, int(b - a + 1))
        cuts = a + (np.arange(parts + 1) * int(b - a + 1)) // parts
        sides.append((cuts[:-1], cuts[1:] - 1))
    grid_lo = np.meshgrid(*[side[0] for side in sides], indexing="ij")
    grid_hi = np.meshgrid(*[side[1] for side in sides], indexing="ij")
    return np.stack([g.ravel() for g in grid_lo], axis=1), np.stack([g.ravel() for g in grid_hi], axis=1)


def adaptive_grid_level1(shape: Shape, scale_estimate: float, epsilon: float, c: float = 10.0, *,
                         layout: GridLayout = "dpbench") -> Ranges:
    """AdaptiveGrid's first level, for m1 = max(10, sqrt(N eps / c) / 4 rounded) cells per side.

    DPBench's ``layout`` (the default): m1 rounded down, square cells floor(sqrt(n m) / m1) wide,
    the last along each side cut short: on 128 x 128 with m1 = 10, 11 x 11 cells of 12 (8 at the
    edge). ``"even"``: m1 rounded up, each side in m1 nearly equal parts (see ``GridLayout``).
    N is public or a noisy estimate (as in ``uniform_grid``); eps is the whole budget, of which
    the plan spends alpha (0.5) measuring these cells.
    """
    dims = _two_dimensional(shape)
    m1 = max(10, _cells_per_side(math.sqrt(max(scale_estimate * epsilon / c, 0.0)) / 4, layout))
    return Ranges(dims, *_grid_cells(np.zeros(2, np.int64), np.array(dims) - 1, m1, layout))


def adaptive_grid_level2(level1: Ranges, noisy_counts, epsilon: float, c2: float = 5.0, *,
                         layout: GridLayout = "dpbench") -> Ranges:
    """AdaptiveGrid's second level: cell j with noisy count N'_j is cut for m2 x m2 sub-cells,
    m2 = sqrt(N'_j eps / c2) rounded as ``layout`` says (1 when N'_j <= 0); eps is the second
    level's budget, (1 - alpha) times the total. With DPBench's layout a 12 x 12 cell with m2 = 5
    gets 6 x 6 sub-cells 2 wide. Sub-cells of all cells are disjoint: one matrix, sensitivity 1.
    """
    counts = np.asarray(noisy_counts, dtype=np.float64).ravel()
    if counts.size != level1.shape[0]:
        raise ValueError(f"need one noisy count per level-1 cell ({level1.shape[0]}), got {counts.size}")
    pieces = []
    for lo, hi, count in zip(level1.lo, level1.hi, counts):
        m2 = _cells_per_side(math.sqrt(max(count * epsilon / c2, 0.0)), layout)
        pieces.append(_grid_cells(lo, hi, m2, layout))
    return Ranges(level1.domain_shape, np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))


# ---- striping and MWEM augmentation ----------------------------------------------------


def stripe(shape: Shape, attribute: int) -> LinearStrategy:
    """Stripe(attr) (HB-Striped_kron): HB on ``attribute`` (branching for its own size),
    identity on every other attribute: the same HB measured on every 1-D stripe."""
    dims = shape_sizes(shape)
    if not 0 <= attribute < len(dims):
        raise ValueError(f"attribute must be a position 0..{len(dims) - 1}, got {attribute}")
    branching, _ = hb_branching(dims[attribute])
    matrix = Kronecker([_hb_tree(n, branching) if i == attribute else Identity(n) for i, n in enumerate(dims)])
    return LinearStrategy(matrix, name=f"HB-Striped_kron({attribute})")


def mwem_h2_augmentation(query, n: int, round_index: int) -> Matrix:
    """MWEM's selected query plus, for free, aligned intervals of width 2^round_index that it
    does not touch (ektelo section 9.1: width 1 in the first round, 2 in the second, ...).

    The added intervals are disjoint from each other and from the query's support, so the L1
    sensitivity is max(|query|_max, 1): they cost no extra budget. Row 0 is the query.
    """
    query = np.asarray(query, dtype=np.float64).ravel()
    if query.size != n:
        raise ValueError(f"the query has {query.size} entries for a domain of {n} cells")
    width = 1 << int(round_index)
    lo = np.arange(0, n, width)
    hi = np.minimum(lo + width, n) - 1
    touched = np.add.reduceat((query != 0).astype(np.int64), lo) > 0
    lo, hi = lo[~touched], hi[~touched]
    selected = Dense(query[None, :])
    return VStack([selected, Intervals(n, lo, hi)]) if lo.size else selected
