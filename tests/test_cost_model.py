"""The kernel's cost model against what it measures: for random matrices from the whole sealed language, the steps
``Work`` counts while the kernel builds the matrix, derives its sensitivities and applies it, and the peak memory
``tracemalloc`` sees (numpy reports its arrays to it), stay within a constant of what ``SealedMatrix.cost``
predicted from the spec before anything was built (docs/privacy/arithmetic.md#cost)."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import scipy.sparse as sp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.kernel.limits import Limits, Work
from ektelo_ng.kernel.matrix import ArrayData, SealedMatrix, Stack

STEPS = 4
"""Measured steps stay within STEPS times the predicted ones (and above a fifth of them: the model is not vacuous)."""
BYTES, SLACK = 3, 1 << 20
"""Peak bytes stay within BYTES times the predicted ones, plus SLACK for Python's own objects."""


def array(values) -> dict:
    return ArrayData.of(np.asarray(values)).model_dump()


def leaf(rng: np.random.Generator, cols: int) -> dict:
    """A random leaf over ``cols`` columns, of every kind."""
    kind = rng.choice(["identity", "ones", "ranges", "dense", "sparse", "fourier"])
    rows = int(rng.integers(1, 40))
    if kind == "identity":
        return {"kind": "identity", "n": cols}
    if kind == "ones":
        return {"kind": "ones", "rows": rows, "cols": cols}
    if kind == "ranges":
        splits = [d for d in range(1, cols + 1) if cols % d == 0]
        first = int(rng.choice(splits))
        shape = [first, cols // first] if cols // first > 1 and rng.random() < 0.5 else [cols]
        if rng.random() < 0.3:  # many dimensions: 2^d corners, each with its Python work
            shape = (_factors(cols) + [1] * int(rng.integers(0, 12)))[:16]
        lo = np.stack([rng.integers(0, n, rows) for n in shape], axis=1)
        hi = np.stack([rng.integers(l, n) for l, n in zip(lo.T, shape)], axis=1)
        return {"kind": "ranges", "shape": shape, "lo": array(lo), "hi": array(hi)}
    if kind == "dense":
        return {"kind": "dense", "data": array(rng.normal(size=(rows, cols)))}
    if kind == "sparse":
        m = sp.random_array((rows, cols), density=0.3, rng=rng, format="csr")
        return {"kind": "sparse", "rows": rows, "cols": cols, "data": array(m.data),
                "indices": array(m.indices.astype(np.int64)), "indptr": array(m.indptr.astype(np.int64))}
    return {"kind": "fourier", "n": cols, "k": int(rng.integers(1, cols + 1))}


def _factors(n: int) -> list[int]:
    """n's prime factors (n itself if it has none)."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out, n = out + [p], n // p
        p += 1
    return out + [n] if n > 1 or not out else out


def matrix(seed: int) -> tuple[dict, int]:
    rng = np.random.default_rng(seed)
    split = [int(n) for n in rng.integers(1, 24, rng.integers(1, 4))]
    blocks = []
    for _ in range(int(rng.integers(1, 5))):
        if rng.random() < 0.3:
            one = leaf(rng, math.prod(split))
            rows = SealedMatrix(Stack.model_validate({"blocks": [{"factors": [one]}]}), Work()).shape[0]
            blocks.append({"factors": [one], "row_weights": array(rng.normal(size=rows)), "weight": float(rng.normal())})
        else:
            blocks.append({"factors": [leaf(rng, n) for n in split], "weight": float(rng.normal())})
    return {"kind": "stack", "blocks": blocks}, math.prod(split)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_measured_work_and_memory_stay_within_a_constant_of_the_model(seed):
    """30 random matrices in the default run (25 s); the slow run's copy below draws 120."""
    _check_the_model(seed)


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_measured_work_and_memory_stay_within_a_constant_of_the_model_on_many_matrices(seed):
    _check_the_model(seed)


def _check_the_model(seed: int) -> None:
    spec, cols = matrix(seed)
    stack = Stack.model_validate(spec)
    _, build, apply = SealedMatrix.cost(stack, Limits(max_cells=1 << 30), cols)
    x = np.random.default_rng(seed).integers(0, 100, cols)
    work = Work()
    tracemalloc.start()
    try:
        M = SealedMatrix(stack, work)
        for norm in ("l1", "l2"):
            M.sensitivity(norm)
        M.apply(x, work)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    predicted = build.then(apply)
    assert predicted.steps / 5 <= work.steps <= STEPS * predicted.steps, (work.steps, predicted)
    assert peak <= BYTES * (build.bytes + apply.bytes) + SLACK, (peak, build, apply)
