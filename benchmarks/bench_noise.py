"""Exact noise throughput: our discrete Laplace and Gaussian against OpenDP's exact samplers, same run.

Prints one JSON object per line: for each kind and scale (t or sigma, rounded up to a supported scale) our
secure sampler on 10 M samples, then OpenDP's (`make_laplace` / `make_gaussian` on an i64 vector domain,
which sample the discrete laws exactly, Canonne, Kamath and Steinke 2020) on 200 k, and the ratio of rates.
Also our seeded (single-thread) sampler. Targets (issue 15): >= 5 M/s Laplace, >= 3 M/s Gaussian, secure,
on 2 cores. OpenDP is skipped if it cannot be imported (`pip install opendp`). Usage:
``python benchmarks/bench_noise.py [name-substring ...]``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ektelo_ng.kernel.noise import NoiseSource, discrete_gaussian, discrete_laplace, supported_scale  # noqa: E402

SAMPLES = 10_000_000
OPENDP_SAMPLES = 200_000
SCALES = [1e2, 1e4, 1e7]
SAMPLERS = {"laplace": discrete_laplace, "gaussian": discrete_gaussian}


def ours(kind: str, scale: float, seeded: bool) -> dict:
    sampler, source = SAMPLERS[kind], NoiseSource.seeded(0) if seeded else NoiseSource()
    sampler(source, scale, 1000)  # builds the tables once
    start = time.perf_counter()
    samples = sampler(source, scale, SAMPLES)
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 3), "samples": SAMPLES, "samples_per_second": round(SAMPLES / seconds),
            "std_over_scale": round(float(samples.std()) / scale, 4)}


def opendp(kind: str, scale: float) -> dict | None:
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T="i64"), size=OPENDP_SAMPLES)
    metric = dp.l1_distance(T="i64") if kind == "laplace" else dp.l2_distance(T="i64")
    make = dp.m.make_laplace if kind == "laplace" else dp.m.make_gaussian
    measurement = make(domain, metric, scale=scale)
    data = [0] * OPENDP_SAMPLES
    start = time.perf_counter()
    measurement(data)
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 3), "samples": OPENDP_SAMPLES,
            "samples_per_second": round(OPENDP_SAMPLES / seconds), "opendp": dp.__version__}


def main(filters: list[str]) -> None:
    for kind in SAMPLERS:
        for requested in SCALES:
            scale = supported_scale(kind, requested)
            names = {f"{kind}_{requested:g}": "secure", f"{kind}_{requested:g}_seeded": "seeded"}
            if filters and not any(f in name for name in names for f in filters):
                continue
            secure = {"name": f"{kind}_{requested:g}", "scale": scale, "mode": "secure", **ours(kind, scale, False)}
            other = opendp(kind, scale)
            if other is not None:
                secure["ratio_to_opendp"] = round(secure["samples_per_second"] / other["samples_per_second"], 1)
            print(json.dumps(secure), flush=True)
            print(json.dumps({"name": f"{kind}_{requested:g}_seeded", "scale": scale, "mode": "seeded, one thread",
                              **ours(kind, scale, True)}), flush=True)
            print(json.dumps({"name": f"opendp_{kind}_{requested:g}", "scale": scale,
                              **(other or {"skipped": "opendp cannot be imported"})}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
