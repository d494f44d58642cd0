"""Load test of the served kernel: concurrent analyst processes over TLS (loopback) and a unix socket.

    python benchmarks/bench_service.py [CASE ...]

Each case deploys a service as the owner would (`kernel init`, analysts, `kernel serve` in its own process),
then N analyst processes, each with its own credential, send 10^4 requests between them (bounded by
SECONDS as well), timing each round trip from the analyst's side. Targets (issue 16): p99 under 5 ms for a
budget query, under 50 ms for a Laplace measurement of a 10^4-cell vector (loopback only).

Two loads: `saturated` analysts send back to back (the server's throughput; latency is then N / throughput by
Little's law, whatever the server does), `paced` analysts send at random (Poisson) times adding up to OFFERED
requests a second (a fraction of that throughput): the latency an analyst sees on a busy but not overloaded
server. On this 2-core machine the analysts' own processes share the cores with the kernel.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import main  # noqa: E402

import ektelo_ng as ek  # noqa: E402
from ektelo_ng.gateway.owner import init_service  # noqa: E402
from ektelo_ng.operators.matrix import Identity  # noqa: E402

REQUESTS = 10_000
SECONDS = 20.0
CELLS = 10_000
TARGET_MS = {"budget": 5.0, "laplace": 50.0}
OFFERED = {"budget": 1000.0, "laplace": 200.0}
"""Requests a second offered by all analysts together in the paced cases."""


def _analyst(credential: str, address: str, op: str, count: int, interval: float, deadline: float, start,
             results) -> None:
    """Send ``count`` requests, starting one every ``interval`` seconds on average (0: back to back)."""
    try:
        session = ek.connect(address, credential=credential, timeout=60)
        x = session.source.vectorize() if op == "laplace" else None
        M = Identity(CELLS)
        start.wait(timeout=120)
        times, rng, due = [], np.random.default_rng(), time.perf_counter()
        while len(times) < count and time.time() < deadline:
            due += rng.exponential(interval) if interval else 0.0
            time.sleep(max(0.0, due - time.perf_counter()))
            began = time.perf_counter()
            if op == "budget":
                session.budget
            else:
                x.laplace(M, 1)
            times.append(time.perf_counter() - began)
        results.put(times)
    except Exception as error:  # the parent reports it instead of waiting
        results.put(f"{type(error).__name__}: {error}")


def load(op: str, transport: str, analysts: int, paced: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="ek-bench-", dir="/tmp") as folder:
        folder = Path(folder)
        rows = np.random.default_rng(0).integers(0, CELLS, 100_000)
        (folder / "t.csv").write_text("v\n" + "\n".join(map(str, rows)) + "\n")
        (folder / "d.json").write_text(f'{{"v": {CELLS}}}')
        service = init_service(folder / "svc", ek.PureDP(10**7), hosts=["127.0.0.1"], tls=transport == "tls")
        credentials = [str(service.add_analyst(f"a{i}", Fraction(10**7, analysts))) for i in range(analysts)]
        listen = "127.0.0.1:0" if transport == "tls" else f"unix:{folder / 'svc' / 'kernel.sock'}"
        server = subprocess.Popen(
            [sys.executable, "-m", "ektelo_ng.cli", "kernel", "serve", "--dir", str(service.path), "--table",
             str(folder / "t.csv"), "--domain", str(folder / "d.json"), "--listen", listen, "--rate", "1000000"],
            stdout=subprocess.PIPE, text=True)
        try:
            address = server.stdout.readline().split("listening on ", 1)[1].split(" ", 1)[0]
            context = multiprocessing.get_context("fork")
            start, results = context.Barrier(analysts + 1), context.Queue()
            deadline = time.time() + SECONDS
            interval = analysts / OFFERED[op] if paced else 0.0
            workers = [context.Process(target=_analyst, args=(c, address, op, REQUESTS // analysts, interval, deadline,
                                                              start, results)) for c in credentials]
            for worker in workers:
                worker.start()
            start.wait(timeout=120)
            began = time.perf_counter()
            replies = [results.get(timeout=SECONDS + 120) for _ in workers]
            failed = [reply for reply in replies if isinstance(reply, str)]
            if failed:
                raise RuntimeError(f"{len(failed)} analysts failed: {failed[0]}")
            times = np.concatenate(replies)
            elapsed = time.perf_counter() - began
            for worker in workers:
                worker.join()
        finally:
            server.kill()
            server.wait()
    p99 = 1000 * float(np.quantile(times, 0.99))
    return {"op": op, "transport": transport, "analysts": analysts, "load": "paced" if paced else "saturated",
            "offered_per_s": OFFERED[op] if paced else None, "requests": int(times.size),
            "p50_ms": round(1000 * float(np.median(times)), 3), "p99_ms": round(p99, 3),
            "throughput_per_s": round(times.size / elapsed, 1), "target_p99_ms": TARGET_MS[op],
            "meets_target": p99 < TARGET_MS[op]}


CASES = {f"{op}_{transport}_{n}_{kind}": (lambda op=op, transport=transport, n=n, kind=kind:
                                            load(op, transport, n, kind == "paced"))
         for kind in ("saturated", "paced") for op in ("budget", "laplace") for transport in ("unix", "tls")
         for n in (8, 32)}

if __name__ == "__main__":
    main(CASES)
