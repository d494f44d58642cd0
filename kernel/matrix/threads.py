"""One BLAS thread for memory-bound work (short or skinny GEMMs): measured on 2 cores, a 10^8-cell Kronecker
mat-vec ran in 2.0 s with one OpenBLAS thread and 4.2 s with two, HDMM's OPT_0 5x faster single-threaded."""

from __future__ import annotations

from contextlib import AbstractContextManager

from threadpoolctl import threadpool_limits


def single_threaded_blas() -> AbstractContextManager:
    return threadpool_limits(limits=1, user_api="blas")
