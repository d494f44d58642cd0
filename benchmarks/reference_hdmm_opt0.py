"""Run the reference HDMM code's OPT_0 once on one BLAS thread; print one JSON line and save its strategy.

Run with the Python of a scratch environment where the reference (github.com/dpcomp-org/hdmm) is installed,
never this project's:

    PYTHON benchmarks/reference_hdmm_opt0.py --workload allrange --n 1024 --noise laplace --out theta.npy

Laplace runs its PIdentity template with p = n / 16 (as its OPT0 does), Gaussian its McKennaConvex, each with the
reference's own optimizer settings; the loss and gradient calls are counted. The strategy is saved (Laplace: the
p x n parameters; Gaussian: the dense strategy) for this project to score, so that both sides' errors are
computed by one formula.
"""

import argparse
import json
import time

import numpy as np
from threadpoolctl import threadpool_limits
from hdmm import templates, workload

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--workload", choices=["allrange", "prefix"], required=True)
parser.add_argument("--n", type=int, required=True)
parser.add_argument("--noise", choices=["laplace", "gaussian"], required=True)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--out", required=True, help="where to save the strategy (.npy)")
args = parser.parse_args()

W = {"allrange": workload.AllRange, "prefix": workload.Prefix}[args.workload](args.n)
with threadpool_limits(1, "blas"):
    if args.noise == "laplace":
        template = templates.PIdentity(max(args.n // 16, 1), args.n, seed=args.seed)
    else:
        template = templates.McKennaConvex(args.n)
    calls = 0
    loss_and_grad = template._loss_and_grad

    def counted(params):
        global calls
        calls += 1
        return loss_and_grad(params)

    template._loss_and_grad = counted
    start = time.perf_counter()
    template.optimize(W)
    seconds = time.perf_counter() - start
if args.noise == "laplace":
    np.save(args.out, np.maximum(template._params.reshape(template.p, template.n), 0.0))
else:
    np.save(args.out, template.strategy().dense_matrix())
print(json.dumps({"seconds": seconds, "evaluations": calls}))
