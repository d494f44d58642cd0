"""One BLAS thread for memory-bound work (short or skinny GEMMs): measured on 2 cores, a 10^8-cell Kronecker
mat-vec ran in 2.0 s with one OpenBLAS thread and 4.2 s with two, HDMM's OPT_0 5x faster single-threaded."""

from functools import partial

import scipy.linalg  # noqa: F401  (loads scipy's BLAS beside numpy's, so that both are found below)
from threadpoolctl import ThreadpoolController

#: ``with single_threaded_blas(): ...`` runs numpy's and scipy's BLAS on one thread. The libraries are found once,
#: here: threadpool_limits() finds and reads them again on every call (5 ms, a third of a 32-cell least-squares plan).
single_threaded_blas = partial(ThreadpoolController().limit, limits=1, user_api="blas")
