"""Side-by-side: mbi 2.0 (Private-PGM's reference implementation, JAX, Python >= 3.11) on the measurement pieces
that ``bench_pgm.py --save PATH.npz`` wrote; its approximate mirror descent (fixed step, no line search), timed
from the start of estimation (JIT compilation included). Run it in a scratch venv, never in the project's:

    python -m venv /tmp/venv_mbi && /tmp/venv_mbi/bin/pip install mbi jax numpy scipy networkx
    /tmp/venv_mbi/bin/python benchmarks/mbi_compare.py PATH.npz ITERATIONS TOTAL STEP_MULTIPLIER

TOTAL: the record count (ours, from the JSON line; mbi's own estimate ignores matrix queries); the step is
STEP_MULTIPLIER * 2 / (L * TOTAL), L the loss's Lipschitz constant (100 worked best of 10, 30, 100, 300 for d=20).
"""
import json, sys, time, resource
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np, jax.numpy as jnp
from mbi import Domain, LinearMeasurement
from mbi import approximate_oracles, marginal_loss, estimation

class MatrixQuery:
    def __init__(self, M): self.M = jnp.asarray(M); self.norm = float(np.linalg.norm(M, 2) ** 2)
    def __call__(self, f): return self.M @ f.datavector()
    def op_norm_sq(self): return self.norm
    def __hash__(self): return id(self)
    def __eq__(self, other): return self is other

data = np.load(sys.argv[1])
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
sizes = data["sizes"]
names = [f"a{i}" for i in range(len(sizes))]
domain = Domain(names, [int(n) for n in sizes])
queries = {}
ms = []
for k in range(int(data["count"])):
    clique = tuple(names[i] for i in data[f"p{k}_clique"])
    M = data[f"p{k}_matrix"]
    key = M.tobytes()
    q = queries.setdefault(key, MatrixQuery(M))
    std = data[f"p{k}_std"]
    assert np.allclose(std, std[0])
    ms.append(LinearMeasurement(data[f"p{k}_answers"], clique, float(std[0]), q))
total = float(sys.argv[3]) if len(sys.argv) > 3 else float(estimation.minimum_variance_unbiased_total(ms))
loss_fn = marginal_loss.from_linear_measurements(ms, domain)
L = loss_fn.lipschitz
start = time.perf_counter()
mu = approximate_oracles.mirror_descent(domain, loss_fn, known_total=total, stepsize=float(sys.argv[4] if len(sys.argv) > 4 else 1) * 2.0 / (L * total), iters=iters)
pairs = [tuple(int(x) for x in key[1:].split("_")) for key in data.files if key.startswith("t")]
errs = []
for i, j in pairs:
    est = np.asarray(mu.project((names[i], names[j])).datavector(flatten=False))
    errs.append(np.abs(est - data[f"t{i}_{j}"]).sum() / data[f"t{i}_{j}"].sum())
elapsed = time.perf_counter() - start
print(json.dumps({"mbi_seconds": round(elapsed, 2), "mbi_total": total, "mbi_iters": iters, "step_multiplier": sys.argv[4:5],
                  "l1_mbi_2way": float(np.mean(errs)), "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
