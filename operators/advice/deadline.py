"""Run jobs in a child process that is killed when a job overruns its deadline.

A selector is ordinary Python calling numpy: it cannot be interrupted from inside, and a thread cannot be
stopped. So the advisor runs each selector in one worker process (started with ``spawn``: no copy of the
caller's threads or locks, and not the caller's script run again), waits for its answer at most until the
deadline, and on overrun kills the worker and starts a fresh one for the next job. A job that runs out of
memory fails alone: the worker limits its own address space.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import resource
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """What became of a job: ``status`` is ``"ok"`` (``value`` set), ``"error"`` or ``"timeout"`` (``reason``)."""

    status: str
    value: Any = None
    reason: str = ""
    seconds: float = 0.0


def _serve(connection, memory_limit: int | None, preload: tuple[str, ...]) -> None:
    """The worker's loop: import ``preload``, say ready, then run each (function, args) it receives and send back
    its outcome; it ends when the caller goes away. Ctrl-C is the caller's to handle (it stops the worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_limit:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        memory_limit = memory_limit if hard == resource.RLIM_INFINITY else min(memory_limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, hard))  # never above a limit set by the caller's shell
    for module in preload:
        importlib.import_module(module)
    connection.send("ready")
    while True:
        try:
            function, args = connection.recv()
        except EOFError:
            return
        try:
            connection.send(("ok", function(*args), ""))
        except MemoryError:
            connection.send(("error", None, f"needs more than the memory limit of {memory_limit / 2**30:.3g} GiB"))
        except Exception as error:  # reported, not raised: one selector's failure is one row of the advice
            connection.send(("error", None, f"{type(error).__name__}: {error}"))


class Worker:
    """One child process running jobs in turn; ``run`` returns an Outcome and never waits past its deadline."""

    def __init__(self, memory_limit: int | None = None, preload: tuple[str, ...] = (),
                 setup: tuple[Callable, tuple] | None = None):
        self.memory_limit, self.preload, self.setup = memory_limit, tuple(preload), setup
        self._process = None
        self._connection = None
        self.last_exit_code: int | None = None

    def start(self, seconds: float) -> bool:
        """Start a worker if none is running (its imports and ``setup`` call included: a job's large arguments,
        sent once), waiting at most ``seconds``; True when ready. Jobs' time limits count from a ready worker."""
        if self._process is not None:
            return True
        if seconds <= 0:
            return False
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, self.memory_limit, self.preload))
        with _without_caller_main():
            self._process.start()
        child.close()
        deadline = time.perf_counter() + seconds
        try:
            if self._connection.poll(max(0.0, seconds)) and self._connection.recv() == "ready":
                if self.setup is None:
                    return True
                self._connection.send(self.setup)
                if self._connection.poll(max(0.0, deadline - time.perf_counter())) and self._connection.recv()[0] == "ok":
                    return True
        except EOFError:  # it failed to start: let it exit, for its exit code
            self._process.join(1)
        self.close()
        return False

    def run(self, function: Callable, args: tuple, seconds: float) -> Outcome:
        """``function(*args)`` in a ready worker, given at most ``seconds`` (a fresh worker's start-up included)."""
        start = time.perf_counter()
        if not self.start(seconds):
            if seconds <= 0 or self.last_exit_code == -signal.SIGKILL:  # killed: still starting at its deadline
                return Outcome("timeout", reason="no time left for it", seconds=time.perf_counter() - start)
            return Outcome("error", reason=f"the worker process could not start (exit code {self.last_exit_code}; "
                           "its error is on stderr)", seconds=time.perf_counter() - start)
        try:
            self._connection.send((function, args))
            ready = self._connection.poll(max(0.0, seconds - (time.perf_counter() - start)))
            status, value, reason = self._connection.recv() if ready else ("timeout", None, "")
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self.close()
            return Outcome("error", reason=f"the worker died (exit code {self.last_exit_code}): likely out of memory",
                           seconds=time.perf_counter() - start)
        if status == "timeout":
            self.close()
            reason = f"stopped at the time limit ({seconds:.3g} s)"
        return Outcome(status, value, reason, time.perf_counter() - start)

    def close(self) -> None:
        """Stop the worker (killed if busy); the next ``run`` starts a fresh one."""
        if self._process is None:
            return
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self.last_exit_code = self._process.exitcode
        self._connection.close()
        self._process = self._connection = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextmanager
def _without_caller_main() -> Iterator[None]:
    """Hide the caller's ``__main__`` while a worker is spawned: spawn would run the caller's script again in the
    worker (all of it, releases included, unless guarded by ``if __name__ == "__main__"``), and the worker runs
    library functions only."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def default_memory_limit() -> int:
    """Three quarters of the memory this process may use (the machine's, or its container's cgroup limit if lower):
    a selector that needs more fails alone instead of swapping or being killed by the container."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        memory = min(memory, int(limit)) if limit.isdigit() else memory
    except OSError:
        pass
    return int(0.75 * memory)
