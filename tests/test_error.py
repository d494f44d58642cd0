"""Error formulas against dense brute force, the HDMM journal's Table 4/5, and structure rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ektelo_ng.operators.matrix import AllRange, Dense, Identity, Kronecker, Total, VStack
from ektelo_ng.operators.matrices import Haar, Hierarchical, Prefix, WidthRange
from ektelo_ng.operators.error import expected_error, reconstruction_error, rmse
from ektelo_ng.operators.selection.hdmm.bound import svd_bound

SIGMA = 4.22468  # analytic Gaussian, eps = 1, delta = 1e-6 (J Table 5 scale)


def dense_error(W, A, noise):
    Wd, Ad = W.dense(), A.dense()
    sens = np.abs(Ad).sum(0).max() if noise == "laplace" else np.sqrt((Ad**2).sum(0)).max()
    return (2.0 if noise == "laplace" else 1.0) * sens**2 * np.linalg.norm(Wd @ np.linalg.pinv(Ad)) ** 2


# J Table 4 (Laplace RMSE, eps = 1) and Table 5 (Gaussian, eps = 1, delta = 1e-6).
TABLE = [
    # workload, Identity, H2, Privelet, SVDB
    (lambda: AllRange(64), 6.63, 11.28, 10.11, 3.22),
    (lambda: AllRange(256), 13.11, 16.27, 14.87, 4.07),
    (lambda: Prefix(64), 8.06, 9.42, 9.37, 2.89),
    (lambda: Prefix(1024), 32.02, 17.29, 17.20, 4.11),
    (lambda: WidthRange(256, 32), 8.00, 15.50, 13.57, 3.26),
]


@pytest.mark.parametrize("make, identity, h2, privelet, svdb", TABLE)
def test_hdmm_journal_table_4(make, identity, h2, privelet, svdb):
    W = make()
    n, m = W.shape[1], W.shape[0]
    assert rmse(W, Identity(n)) == pytest.approx(identity, abs=0.006)
    assert rmse(W, Hierarchical(n, 2)) == pytest.approx(h2, abs=0.006)
    assert rmse(W, Haar(n)) == pytest.approx(privelet, abs=0.006)
    assert math.sqrt(svd_bound(W) / m) == pytest.approx(svdb, abs=0.006)


def test_hdmm_journal_table_5_gaussian():
    W = AllRange(64)
    assert SIGMA * rmse(W, Identity(64), "gaussian") == pytest.approx(19.82, abs=0.006)
    assert SIGMA * math.sqrt(svd_bound(W, "gaussian") / W.shape[0]) == pytest.approx(9.62, abs=0.006)


small_dense = st.integers(2, 5).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(-2, 2, allow_nan=False), min_size=3 * n, max_size=3 * n).map(
            lambda v, n=n: np.array(v).reshape(3, n)
        ),
        st.just(n),
    )
)


@settings(max_examples=60, deadline=None)
@given(small_dense, st.sampled_from(["laplace", "gaussian"]), st.integers(0, 1000))
def test_expected_error_matches_dense_pinv(data, noise, seed):
    Wd, n = data
    rng = np.random.default_rng(seed)
    A = Dense(rng.normal(size=(n + 2, n)))  # full column rank almost surely
    W = Dense(Wd)
    assert expected_error(W, A, noise) == pytest.approx(dense_error(W, A, noise), rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_kronecker_and_union_structure_match_dense(noise):
    W = VStack([Kronecker([Prefix(4), Total(3)]), Kronecker([Identity(4), AllRange(3)]) * 2.0])
    A = Kronecker([Hierarchical(4, 2), Identity(3)])
    assert expected_error(W, A, noise) == pytest.approx(dense_error(W, A, noise), rel=1e-9)
    assert rmse(W, A, noise) == pytest.approx(math.sqrt(dense_error(W, A, noise) / W.shape[0]), rel=1e-9)


def test_kronecker_svd_bound_is_product_of_factors():
    W = Kronecker([Prefix(6), AllRange(5)])
    singular = np.linalg.svd(W.dense(), compute_uv=False)
    assert svd_bound(W, "gaussian") == pytest.approx(singular.sum() ** 2 / 30, rel=1e-9)


def test_unanswerable_workload_has_infinite_error():
    assert reconstruction_error(Identity(4), Total(4)) == math.inf
    assert expected_error(Total(4), Total(4)) == pytest.approx(2.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="same domain"):
        expected_error(Prefix(4), Identity(5))
    with pytest.raises(ValueError, match="noise must be"):
        expected_error(Prefix(4), Identity(4), noise="cauchy")


def test_prefix_4096_under_identity_is_closed_form():
    # ||W||_F^2 = n(n+1)/2 with no dense step.
    assert expected_error(Prefix(4096), Identity(4096)) == pytest.approx(2 * 4096 * 4097 / 2)
