"""One set of measurements, three estimates: least squares, ``operators.pgm`` and mbi (Private-PGM's reference
implementation by its authors, on JAX), with their errors against the true marginals and their times.

mbi is optional: mbi 2 needs Python >= 3.11 and JAX (``pip install -e ".[bench]"``); without it the mbi
columns are left out. It is handed the measurements exactly as ``operators.pgm`` cuts them into pieces (one
per residual or conditional table, each with its matrix, answers and noise scale) and the same record
count, so the two fit the same loss; each matrix in its cheapest form for mbi (identities as mbi's own
datavector query, Kronecker products factor by factor, the rest dense). Its times include JIT compilation, as
a user of it waits for it: in a case's runs the first seed compiles, later seeds (same shapes) reuse the code.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from common import true_marginal
from ektelo_ng.operators.matrix import Identity, Kronecker, Weighted
from ektelo_ng.operators import pgm
from ektelo_ng.operators.pgm.loss import terms

#: mbi's approximate method has a fixed step size and no line search: these multiples of its 2 / (L total) are
#: tried and the run with the lowest final loss is kept (its time is that run's), so mbi gets its best tuned run.
STEP_MULTIPLIERS = (1, 10, 100, 1000)

Marginal = Callable[[tuple[int, ...]], np.ndarray]
"""The estimated count tensor over sorted attribute positions."""


def mbi_available() -> bool:
    """Whether mbi is installed here (not imported: JAX is configured first, in :func:`mbi_fit`)."""
    return importlib.util.find_spec("mbi") is not None


def mbi_fit(names: Sequence[str], sizes: Sequence[int], measurements, total: float, method: str,
            iterations: int) -> tuple[Marginal, dict]:
    """mbi's fit of ``measurements`` over the domain ``names``/``sizes`` with the record count ``total``:
    ``method="exact"`` is its Armijo mirror descent on a junction tree (``estimation.MirrorDescent``),
    ``"approximate"`` its mirror descent on a region graph (``approximate_oracles.mirror_descent``) at the best
    of :data:`STEP_MULTIPLIERS`. Returns the fitted marginals and ``{"mbi_seconds", ...}``."""
    import jax

    jax.config.update("jax_enable_x64", True)  # as mbi asks: float32 stalls its fits at these record counts
    jax.config.update("jax_enable_compilation_cache", False)  # as mbi asks: many small programs
    from mbi import DatavectorQuery, Domain, LinearMeasurement, approximate_oracles, estimation, marginal_loss

    @dataclasses.dataclass(frozen=True, eq=False)
    class MatrixQuery:
        """``matrix @ datavector``, hashed by identity as mbi's static queries are."""

        matrix: np.ndarray

        def __call__(self, factor):
            return jax.numpy.asarray(self.matrix) @ factor.datavector()

        def op_norm_sq(self) -> float:
            return float(np.linalg.norm(self.matrix, 2) ** 2)

    @dataclasses.dataclass(frozen=True, eq=False)
    class KroneckerQuery:
        """A Kronecker product applied factor by factor to the marginal's tensor (axes in clique order)."""

        factors: tuple[np.ndarray, ...]

        def __call__(self, factor):
            x = factor.values
            for axis, f in enumerate(self.factors):
                x = jax.numpy.moveaxis(jax.numpy.tensordot(jax.numpy.asarray(f), x, axes=(1, axis)), 0, axis)
            return x.reshape(-1)

        def op_norm_sq(self) -> float:
            return float(np.prod([np.linalg.norm(f, 2) ** 2 for f in self.factors]))

    converted = []
    for term in terms(measurements, sizes, "l2", 10**8):
        matrix, weight = (term.matrix.base, term.matrix.weight) if isinstance(term.matrix, Weighted) else (term.matrix, 1.0)
        if isinstance(matrix, Identity):
            query = DatavectorQuery()
        elif isinstance(matrix, Kronecker):
            query = KroneckerQuery(tuple(f.dense() for f in matrix.factors))
        else:
            query, weight = MatrixQuery(np.asarray(term.matrix if isinstance(term.matrix, np.ndarray)
                                                   else term.matrix.dense())), 1.0
        for clique, answers, weights in zip(term.cliques, term.answers, term.weights):
            if not np.allclose(weights, weights[0]):
                raise ValueError("mbi takes one noise scale per measurement")
            # answers = weight M mu + noise (std s) is answers / weight = M mu + noise (std s / weight)
            converted.append(LinearMeasurement(answers / weight, tuple(names[i] for i in clique),
                                               float(1.0 / (weights[0] * weight)), query))
    domain = Domain(list(names), [int(n) for n in sizes])
    started = time.perf_counter()
    loss = marginal_loss.from_linear_measurements(converted, domain)
    if method == "exact":
        model = jax.block_until_ready(estimation.MirrorDescent().estimate(domain, loss, known_total=total,
                                                                          iters=iterations))  # JAX runs ahead
        seconds, extra = time.perf_counter() - started, {}
    else:
        runs = []
        for multiplier in STEP_MULTIPLIERS:
            started = time.perf_counter()
            mu = approximate_oracles.mirror_descent(domain, loss, known_total=total, iters=iterations,
                                                    stepsize=multiplier * 2.0 / (loss.lipschitz * total))
            final = float(loss(mu))  # waits for the fit (JAX dispatches ahead of its results)
            runs.append((final if np.isfinite(final) else np.inf, time.perf_counter() - started, multiplier, mu))
        final, seconds, multiplier, model = min(runs, key=lambda run: run[:2])
        extra = {"mbi_step_multiplier": multiplier, "mbi_final_loss": final}

    def marginal(subset: tuple[int, ...]) -> np.ndarray:
        return np.asarray(model.project(tuple(names[i] for i in subset)).datavector(flatten=False))

    return marginal, {"mbi_seconds": round(seconds, 2), **extra}


def compare(columns: Mapping[str, np.ndarray], sizes: Mapping[str, int], measurements,
            groups: Mapping[str, Sequence[tuple[int, ...]]], least_squares: Marginal, *, iterations: int = 1000,
            with_mbi: bool = True) -> dict:
    """Fit ``measurements`` with ``operators.pgm`` (and mbi, if here and ``with_mbi``) and score each estimate,
    ``least_squares`` included, by its mean L1 error over N on each group of marginals (sorted positions).

    Returns seconds, the model's method, and per group ``l1_{ls,pgm,mbi}_GROUP`` with the ratios
    ``pgm_over_ls_GROUP`` and ``pgm_over_mbi_GROUP``; ``pgm_over_mbi_seconds`` compares the fits' times."""
    names, shape = list(sizes), list(sizes.values())
    rows = len(next(iter(columns.values())))
    started = time.perf_counter()
    model = pgm.fit(dict(sizes), measurements, iterations=iterations)
    out: dict = {"method": model.method, "pgm_seconds": round(time.perf_counter() - started, 2),
                 "pgm_iterations": len(model.history) - 1}
    estimates: dict[str, Marginal] = {"ls": least_squares, "pgm": model.marginal}
    if with_mbi and mbi_available():
        estimates["mbi"], times = mbi_fit(names, shape, measurements, model.total, model.method, iterations)
        out.update(times, pgm_over_mbi_seconds=round(out["pgm_seconds"] / times["mbi_seconds"], 3))
    for group, subsets in groups.items():
        truths = [true_marginal(columns, sizes, [names[i] for i in s]) for s in subsets]
        for who, marginal in estimates.items():
            errors = [np.abs(marginal(s) - t).sum() / rows for s, t in zip(subsets, truths)]
            out[f"l1_{who}_{group}"] = round(float(np.mean(errors)), 6) if errors else None
        for who in ("ls", "mbi"):
            if out.get(f"l1_{who}_{group}"):
                out[f"pgm_over_{who}_{group}"] = round(out[f"l1_pgm_{group}"] / out[f"l1_{who}_{group}"], 4)
    return out


def summary(runs: Sequence[dict]) -> dict:
    """Means over seeds of every error and time, the worst ratio of each kind, and whether the model was at or
    below least squares on every group in every seed."""
    keys = [k for k in runs[0] if k != "seed" and all(isinstance(r.get(k), (int, float)) for r in runs)]
    out = {f"mean_{k}": round(float(np.mean([r[k] for r in runs])), 6) for k in keys if not k.startswith("pgm_over")}
    out.update({f"max_{k}": max(r[k] for r in runs) for k in keys if k.startswith("pgm_over")})
    out["pgm_at_or_below_ls_every_seed"] = all(r[k] <= 1 for r in runs for k in r if k.startswith("pgm_over_ls"))
    return out
