"""Partition selection: groupings of the cells of a data vector (public computation only).

A ``Partition`` gives every cell a group label. It feeds V-ReduceByPartition (x' = P x, one
cell per group, P the 0/1 groups x cells matrix) and V-SplitByPartition (one sub-vector per
group). Measurements on a reduced vector map back to the root by P, and workloads move to the
reduced domain by P^+ = P^T diag(1 / group sizes) (ektelo section 8).

Labels are canonical: groups are numbered in the order of their first cell, so the reduced
vector keeps the domain's order (interval partitions stay intervals).

The selectors here read no data: ``grid``, ``stripe`` and ``marginal`` use only the domain,
``workload_based`` only the workload, ``hilbert_order`` only the side, and ``ahp_cluster``
only counts that are already noisy (the private half of AHP, the noisy histogram, is the
kernel's), ``dawa_partition`` only the kernel's noisy dyadic deviations, and ``kd_partition`` (DPCube+'s
kd-tree) and ``sse_kd_partition`` (DPCube's) only a noisy histogram, returning boxes as a Ranges matrix.

>>> p = grid((4, 4), (2, 2))
>>> p.groups, p.sizes.tolist()
(4, [4, 4, 4, 4])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .matrix import Matrix, Product, Ranges, Sparse
from .domains import Shape, shape_sizes


@dataclass(frozen=True, eq=False)
class Partition:
    """Group labels, one per cell; relabelled on construction so groups appear in cell order."""

    labels: np.ndarray

    def __post_init__(self) -> None:
        labels = np.asarray(self.labels)
        if labels.ndim != 1 or labels.size == 0:
            raise ValueError("a partition needs a non-empty 1-D array of labels, one per cell")
        if not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"partition labels must be integers, got dtype {labels.dtype}")
        _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
        rank = np.empty(first.size, dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(first.size)
        canonical = rank[inverse.ravel()]
        canonical.setflags(write=False)
        object.__setattr__(self, "labels", canonical)

    @property
    def cells(self) -> int:
        return int(self.labels.size)

    @property
    def groups(self) -> int:
        return int(self.labels.max()) + 1

    @property
    def sizes(self) -> np.ndarray:
        """Number of cells in each group."""
        return np.bincount(self.labels, minlength=self.groups)

    def matrix(self) -> Sparse:
        """P (groups x cells): P[g, j] = 1 when cell j is in group g; x' = P x sums each group."""
        n = self.cells
        return Sparse(sp.csr_array((np.ones(n), (self.labels, np.arange(n))), shape=(self.groups, n)))

    def expand(self) -> Sparse:
        """P^+ = P^T diag(1 / sizes) (cells x groups): spreads each group's value evenly."""
        n = self.cells
        weights = 1.0 / self.sizes[self.labels]
        return Sparse(sp.csr_array((weights, (np.arange(n), self.labels)), shape=(n, self.groups)))

    def reduce(self, W: Matrix) -> Matrix:
        """W P^+: the workload over the reduced vector (lossless when W is constant on groups)."""
        return Product([W, self.expand()])

    def representatives(self) -> Sparse:
        """R (cells x groups): R[j, g] = 1 when j is the first cell of group g. W R = W P^+ when W is
        constant on groups, with W's own entries (no averaging, so no rounding)."""
        first = np.unique(self.labels, return_index=True)[1]
        picks = (np.ones(first.size), (first, np.arange(first.size)))
        return Sparse(sp.csr_array(picks, shape=(self.cells, self.groups)))

    def selection(self, group: int) -> Sparse:
        """S_g (|group| x cells): the rows of the identity picking group g's cells in order,
        the lineage matrix of one part of V-SplitByPartition (x_g = S_g x)."""
        cells = np.flatnonzero(self.labels == group)
        if cells.size == 0:
            raise ValueError(f"no group {group}: groups are 0..{self.groups - 1}")
        rows = np.arange(cells.size)
        return Sparse(sp.csr_array((np.ones(cells.size), (rows, cells)), shape=(cells.size, self.cells)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Partition) and np.array_equal(self.labels, other.labels)

    def __hash__(self) -> int:
        return hash(self.labels.tobytes())

    def __repr__(self) -> str:
        return f"Partition(cells={self.cells}, groups={self.groups})"


def _block_labels(dims: tuple[int, ...], block: tuple[int, ...]) -> np.ndarray:
    coords = np.indices(dims).reshape(len(dims), -1)
    counts = [-(-n // b) for n, b in zip(dims, block)]
    return np.ravel_multi_index(tuple(c // b for c, b in zip(coords, block)), counts)


def grid(shape: Shape, cell_shape: int | tuple[int, ...]) -> Partition:
    """Blocks of ``cell_shape`` cells (the last block along a side may be smaller)."""
    dims = shape_sizes(shape)
    block = (int(cell_shape),) * len(dims) if np.ndim(cell_shape) == 0 else tuple(int(b) for b in cell_shape)
    if len(block) != len(dims) or min(block) < 1:
        raise ValueError(f"cell_shape must give a positive size for each of the {len(dims)} dimensions")
    return Partition(_block_labels(dims, block))


def stripe(shape: Shape, attribute: int) -> Partition:
    """One group per 1-D stripe along ``attribute``: cells that agree on every other attribute."""
    dims = shape_sizes(shape)
    _check_attribute(dims, attribute)
    return Partition(_block_labels(dims, tuple(n if i == attribute else 1 for i, n in enumerate(dims))))


def marginal(shape: Shape, attribute: int) -> Partition:
    """One group per value of ``attribute``: reducing by it gives that attribute's marginal."""
    dims = shape_sizes(shape)
    _check_attribute(dims, attribute)
    return Partition(np.indices(dims)[attribute].ravel())


def _check_attribute(dims: tuple[int, ...], attribute: int) -> None:
    if not 0 <= attribute < len(dims):
        raise ValueError(f"attribute must be a position 0..{len(dims) - 1}, got {attribute}")


def workload_based(W: Matrix, seed: int | None = None) -> Partition:
    """Group the identical columns of W (ektelo Algorithm 4): lossless, W x = (W P^+)(P x).

    Two random projections h = W^T v (v uniform on [0, 1)^m) are compared: identical columns
    give equal values up to rounding, distinct columns collide with probability ~0. Values are
    grouped when within 1e-9 of the largest |h| (rounding stays far below that).
    """
    rng = np.random.default_rng(seed)
    h = W.T @ rng.random((W.shape[0], 2))
    tolerance = 1e-9 * max(float(np.abs(h).max()), 1.0)
    labels = np.zeros(W.shape[1], dtype=np.int64)
    for column in (0, 1):  # refine the groups by each projection in turn
        order = np.lexsort((h[:, column], labels))
        values, groups = h[order, column], labels[order]
        breaks = (np.diff(groups) != 0) | (np.diff(values) > tolerance)
        labels[order] = np.concatenate([[0], np.cumsum(breaks)])
    return Partition(labels)


def hilbert_order(side: int) -> np.ndarray:
    """Cells of a side x side grid (side a power of two) in Hilbert-curve order.

    Returns ``order`` with ``order[t]`` the row-major index of the t-th cell on the curve;
    consecutive cells are neighbours (DAWA's 2-D ordering). Classic bit-by-bit construction,
    vectorized over t.
    """
    if side < 1 or side & (side - 1):
        raise ValueError(f"the Hilbert curve needs a power-of-two side, got {side}")
    t = np.arange(side * side, dtype=np.int64)
    x, y = np.zeros_like(t), np.zeros_like(t)
    s = 1
    while s < side:
        rx = (t // 2) & 1
        ry = (t ^ rx) & 1
        flip = ry == 0
        swap_x = np.where(flip & (rx == 1), s - 1 - x, x)
        swap_y = np.where(flip & (rx == 1), s - 1 - y, y)
        x, y = np.where(flip, swap_y, swap_x), np.where(flip, swap_x, swap_y)
        x, y = x + s * rx, y + s * ry
        t //= 4
        s *= 2
    return y * side + x


def ahp_cluster(noisy_values, epsilon2: float) -> Partition:
    """The public half of AHP's partition: greedy clustering of sorted, already noisy and
    thresholded counts (see ``operators.inference.ahp_threshold``), as Zhang et al. (SDM 2014) and
    DPBench's implementation run it.

    Values are sorted; a cluster [i..j] costs SSE + 2 / (eps2^2 len), the error of measuring its
    average with Laplace(1 / eps2). Cell j joins the open cluster [i..j-1] unless
    cost(i..j) >= cost(i..j-1) + alone(j), where alone(j) (``_ahp_alone``) is the least error of
    cell j as the first cell of a new cluster. Clusters map back to cells through the sort order
    (ties keep cell order).
    """
    values = np.asarray(noisy_values, dtype=np.float64).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("ahp_cluster needs a non-empty array of finite values")
    if not epsilon2 > 0:
        raise ValueError(f"epsilon2 must be positive, got {epsilon2}")
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    prefix = np.concatenate(([0.0], np.cumsum(ordered)))
    noise = 2.0 / epsilon2**2
    cluster = np.empty(values.size, dtype=np.int64)
    label, count, mean, spread = 0, 0, 0.0, 0.0  # open cluster: size, mean, SSE (Welford)
    for position, value in enumerate(ordered):
        delta = value - mean
        grown_mean = mean + delta / (count + 1)
        grown_spread = spread + delta * (value - grown_mean)
        if count:
            increase = grown_spread + noise / (count + 1) - spread - noise / count
            # 0 < alone <= noise (up to rounding): compute it only when it decides
            if increase >= noise or (increase > 0 and increase >= _ahp_alone(ordered, prefix, position, noise)):
                label += 1
                count, grown_mean, grown_spread = 0, value, 0.0
        count, mean, spread = count + 1, grown_mean, grown_spread
        cluster[position] = label
    labels = np.empty(values.size, dtype=np.int64)
    labels[order] = cluster
    return Partition(labels)


def _ahp_alone(ordered: np.ndarray, prefix: np.ndarray, j: int, noise: float) -> float:
    """AHP's err*(j): the least error of sorted cell j as the first of a cluster [j..l].

    That error is (x_j - mean(x_j..x_l))^2 + noise / len^2 (its bias and its share of the
    cluster's noise). l grows from j and stops before the first step whose bias increase is at
    least the variance still to gain, var(l - 1) - noise / (m + 1)^2 with m the cells from j on
    (the paper's early termination, with the floor DPBench's implementation uses).
    Scanned in growing windows, so a short scan costs little.
    """
    n = ordered.size
    floor = noise / (n - j + 1) ** 2
    width = 64
    while True:
        end = min(j + width, n)
        lengths = np.arange(1, end - j + 1, dtype=np.float64)
        bias = (ordered[j] - (prefix[j + 1 : end + 1] - prefix[j]) / lengths) ** 2
        variance = noise / lengths**2
        stops = np.flatnonzero(np.diff(bias) >= variance[:-1] - floor)
        if stops.size or end == n:
            kept = stops[0] + 1 if stops.size else lengths.size
            return float(np.min(bias[:kept] + variance[:kept]))
        width *= 4


def dawa_partition(noisy_costs, n: int, epsilon2: float) -> Partition:
    """The public half of DAWA's partition: the cheapest partition of n cells into aligned dyadic blocks.

    ``noisy_costs`` are the kernel's noisy deviations of the blocks of widths 2, 4, .., 2^K >= n
    (``Handle.dyadic_deviations``, level by level, left to right). A block costs its noisy deviation
    (floored at 0) plus 1 / eps2, the error of measuring its total with Laplace(1 / eps2); a single
    cell costs 1 / eps2. Bottom-up, each block keeps itself or the best split into its two halves.
    """
    if n < 2:
        return Partition(np.zeros(max(n, 1), dtype=np.int64))
    if not epsilon2 > 0:
        raise ValueError(f"epsilon2 must be positive, got {epsilon2}")
    costs = np.asarray(noisy_costs, dtype=np.float64).ravel()
    widths = [2**k for k in range(1, (n - 1).bit_length() + 1)]
    counts = [-(-n // w) for w in widths]
    if costs.size != sum(counts) or not np.all(np.isfinite(costs)):
        raise ValueError(f"expected {sum(counts)} finite dyadic costs for {n} cells, got {costs.size}")
    penalty = 1.0 / epsilon2
    best = np.full(n, penalty)  # level 0: single cells
    keep = []  # per level: does the block stay whole?
    for level in np.split(costs, np.cumsum(counts)[:-1]):
        children = np.add.reduceat(best, np.arange(0, best.size, 2))
        whole = np.maximum(level, 0.0) + penalty
        keep.append(whole <= children)
        best = np.minimum(whole, children)
    labels = np.arange(n)  # top-down: a kept block's cells take the label of its first cell
    for width, kept in zip(reversed(widths), reversed(keep)):
        starts = np.flatnonzero(kept) * width
        for start in starts[labels[starts] == starts]:  # not already inside a larger kept block
            labels[start:min(start + width, n)] = start
    return Partition(labels)


def kd_partition(noisy_counts, noise_scale: float, variance_factor: float = 2.0) -> Ranges:
    """DPCube's kd-tree over a noisy histogram: boxes whose noisy counts look uniform.

    ``noisy_counts`` is the histogram (a d-D array) with Laplace noise of scale ``noise_scale`` = b
    added to every cell; nothing else is read, so this is post-processing. From the whole domain,
    a box is kept when it is a single cell or when its counts look uniform: all equal, or with a
    sample variance (ddof 1) of at most ``variance_factor`` * 2 b^2, the variance the noise alone
    gives. Any other box is split in two along its longest side (ties: the first longest side at
    or after the one following its parent's split side, so square boxes alternate) at the median
    of its noisy mass: with m_1..m_L the sums of the box's slices along that side (negative counts
    as 0), the first part is the first k slices, k the smallest with m_1 + .. + m_k >= half the
    sum (L // 2 when the box has no positive mass), kept within 1..L-1.

    Returns the kept boxes, depth first, lower part first, as a Ranges matrix: they are disjoint
    and cover the domain, so measuring them has L1 sensitivity 1.

    >>> boxes = kd_partition(np.array([0.0, 0, 0, 0, 5, 5, 5, 5]), noise_scale=0.0)
    >>> boxes.lo.ravel().tolist(), boxes.hi.ravel().tolist()
    ([0, 4, 5, 6], [3, 4, 5, 7])
    """
    values = np.asarray(noisy_counts, dtype=np.float64)
    if values.ndim == 0 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("kd_partition needs a non-empty array of finite noisy counts (one axis per attribute)")
    if not (np.isfinite(noise_scale) and noise_scale >= 0):
        raise ValueError(f"noise_scale must be a finite Laplace scale >= 0, got {noise_scale}")
    if not (np.isfinite(variance_factor) and variance_factor >= 0):
        raise ValueError(f"variance_factor must be a finite number >= 0, got {variance_factor}")
    d, limit = values.ndim, variance_factor * 2.0 * float(noise_scale) ** 2
    kept_lo, kept_hi = [], []
    stack = [(np.zeros(d, dtype=np.int64), np.array(values.shape, dtype=np.int64) - 1, 0)]
    while stack:
        lo, hi, preferred = stack.pop()
        box = values[tuple(slice(a, b + 1) for a, b in zip(lo, hi))]
        if box.size == 1 or np.ptp(box) == 0 or np.var(box, ddof=1) <= limit:
            kept_lo.append(lo)
            kept_hi.append(hi)
            continue
        sides = hi - lo + 1
        axis = max(((preferred + i) % d for i in range(d)), key=lambda a: sides[a])
        mass = np.clip(box, 0.0, None).sum(axis=tuple(a for a in range(d) if a != axis))
        half = mass.sum() / 2
        k = int(np.argmax(np.cumsum(mass) >= half)) + 1 if half > 0 else int(sides[axis]) // 2
        k = min(max(k, 1), int(sides[axis]) - 1)
        upper_lo, lower_hi = lo.copy(), hi.copy()
        upper_lo[axis], lower_hi[axis] = lo[axis] + k, lo[axis] + k - 1
        following = (axis + 1) % d
        stack.append((upper_lo, hi, following))
        stack.append((lo, lower_hi, following))
    return Ranges(values.shape, np.array(kept_lo), np.array(kept_hi))


def sse_kd_partition(estimate, penalty: float) -> Ranges:
    """DPCube's kd-tree as DPBench builds it: split a box where that lowers the squared error the most.

    ``estimate`` is a d-D array read as public (DPCube's noisy grid spread over its cells). The
    cost of a box is the sum of squared deviations of its values from their mean. From the whole
    domain, a box is cut along its longest side (the last such side on ties: DPBench's 2-D engine
    cuts rows only when there are more rows than columns) at the cut k (first part: the first k of
    its L slices, 1 <= k < L) with the lowest total cost of the two parts, the first such k on ties.
    It is cut only when that lowers its cost by more than ``penalty`` (DPBench: 1 / eps of the box
    counts, the price of one more noisy count), and the parts are treated the same way.

    Returns the kept boxes, depth first, lower part first, as a Ranges matrix: disjoint and covering
    the domain, so measuring them has L1 sensitivity 1.

    >>> boxes = sse_kd_partition(np.array([0.0, 0, 0, 9, 9, 9, 9, 9]), penalty=1.0)
    >>> boxes.lo.ravel().tolist(), boxes.hi.ravel().tolist()
    ([0, 3], [2, 7])
    """
    values = np.asarray(estimate, dtype=np.float64)
    if values.ndim == 0 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("sse_kd_partition needs a non-empty array of finite values (one axis per attribute)")
    if not (np.isfinite(penalty) and penalty >= 0):
        raise ValueError(f"penalty must be a finite number >= 0, got {penalty}")
    d = values.ndim
    kept_lo, kept_hi = [], []
    stack = [(np.zeros(d, dtype=np.int64), np.array(values.shape, dtype=np.int64) - 1)]
    while stack:
        lo, hi = stack.pop()
        sides = hi - lo + 1
        axis = d - 1 - int(np.argmax(sides[::-1]))
        box = values[tuple(slice(a, b + 1) for a, b in zip(lo, hi))]
        others = tuple(a for a in range(d) if a != axis)
        sums = np.concatenate([[0.0], np.cumsum(box.sum(axis=others))])  # slices 0..k-1, k = 0..L
        squares = np.concatenate([[0.0], np.cumsum((box**2).sum(axis=others))])
        width = box.size // sides[axis]  # cells per slice
        k = np.arange(1, sides[axis])
        first = squares[k] - sums[k] ** 2 / (k * width)
        second = (squares[-1] - squares[k]) - (sums[-1] - sums[k]) ** 2 / ((sides[axis] - k) * width)
        whole = squares[-1] - sums[-1] ** 2 / box.size
        split = first + second
        best = int(np.argmin(split)) if split.size else -1
        if best < 0 or not split[best] + penalty < whole:
            kept_lo.append(lo)
            kept_hi.append(hi)
            continue
        upper_lo, lower_hi = lo.copy(), hi.copy()
        upper_lo[axis], lower_hi[axis] = lo[axis] + k[best], lo[axis] + k[best] - 1
        stack.append((upper_lo, hi))
        stack.append((lo, lower_hi))
    return Ranges(values.shape, np.array(kept_lo), np.array(kept_hi))
