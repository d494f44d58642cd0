"""One BLAS thread per test process: the suite already runs one pytest-xdist worker per core, and OpenBLAS's own
threads on top of that oversubscribe the cores (the HB Laplace coverage test took 40 s with two threads a worker
and 20 s with one). The environment variables reach the kernel processes the tests start; threadpoolctl limits
the libraries this process has already loaded."""

import os

import pytest
from threadpoolctl import threadpool_limits

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
threadpool_limits(1)


@pytest.fixture()
def sandboxed():
    """For a test of ``ektelo-ng run``'s default mode: skipped where no sandbox for the plan can be made here (the
    reason says what is missing and how to get it; .ci/run installs bubblewrap)."""
    from ektelo_ng import sandbox

    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as error:
        pytest.skip(str(error))
