"""Single-threaded BLAS around the optimizers' inner loops.

L-BFGS-B and the losses make many short BLAS calls; waking OpenBLAS threads costs more than
they save there, and with more runnable threads than cores (a shared machine) L-BFGS-B ran
5x slower multi-threaded on AllRange(256) (0.95 s vs 0.19 s for 300 iterations, measured).
Uses threadpoolctl when it is installed, and does nothing otherwise.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext


def single_threaded_blas() -> AbstractContextManager:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")
