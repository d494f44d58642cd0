"""The library's plans by their DPBench / ektelo names, with what a user needs to know to run them.

``catalog[name](source, workload, budget, *, shape=None, **params)`` returns an Estimate (the data
vector's, or the marginals' for ResidualPlanner and QuerySmasher, whose workload is their marginals
or queries).
``info[name]`` says which dimensions a plan supports, whether it treats the record count as
public (those plans take it as ``records=``, or spend part of the budget on a noisy total
when it is not given), and its default parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import (
    advised, ahp, aim, dawa, dpcube, efpa, grids, hdmm, mst, mwem, pgm, php, privbayes, query_smasher, residual_planner,
    static, striped, structure_first,
)


@dataclass(frozen=True)
class PlanInfo:
    plan: Callable
    dimensions: tuple[int, ...]
    data_dependent: bool
    public_records: bool = False
    defaults: dict = field(default_factory=dict)
    summary: str = ""
    #: Data-independent plans: (shape of the data vector, workload) -> the LinearStrategy they measure.
    strategy: Callable | None = None
    #: Returns a fitted model with ``synthetic(n_rows, seed)`` (what ``ektelo-ng run --synthetic`` needs).
    model: bool = False
    #: What a model plan's ``callback(step, value)`` counts: a fit's iterations ("fit") or, for plans that fit
    #: after every round, the percent of the budget spent ("budget").
    progress: str = "fit"


info: dict[str, PlanInfo] = {
    "Identity": PlanInfo(static.identity, (1, 2), False, strategy=static.SELECTORS["Identity"], summary="noisy cell counts"),
    "Uniform": PlanInfo(static.uniform, (1, 2), False, strategy=static.SELECTORS["Uniform"], summary="noisy total spread evenly"),
    "Privelet": PlanInfo(static.privelet, (1, 2), False, strategy=static.SELECTORS["Privelet"], summary="Haar wavelet (power-of-two sides)"),
    "H2": PlanInfo(static.h2, (1, 2), False, strategy=static.SELECTORS["H2"], summary="binary hierarchy"),
    "HB": PlanInfo(static.hb, (1, 2), False, strategy=static.SELECTORS["HB"], summary="hierarchy with optimal branching"),
    "GreedyH": PlanInfo(static.greedy_h, (1,), False, strategy=static.SELECTORS["GreedyH"], summary="weighted hierarchy fit to the workload"),
    "QuadTree": PlanInfo(static.quadtree, (2,), False, strategy=static.SELECTORS["QuadTree"], summary="recursive quadrants"),
    "HB-Striped_kron": PlanInfo(
        static.hb_striped_kron, (2,), False, defaults={"attribute": 0}, summary="HB along one attribute",
        strategy=static.striped(0),
    ),
    "HDMM": PlanInfo(hdmm.hdmm, (1, 2), False, defaults={"restarts": 3, "seed": 0}, summary="optimized strategy"),
    "ResidualPlanner": PlanInfo(
        residual_planner.residual_planner, (), False, defaults={"loss": "sum"},
        summary="marginal workloads (a MarginalStack) under zCDP; returns a reconstruction with .marginal(A)",
    ),
    "QuerySmasher": PlanInfo(
        query_smasher.query_smasher, (), False, defaults={"solver": "exact"},
        summary="linear queries on marginals ([(attributes, matrix)]) under zCDP; returns .answers(), .variance()",
    ),
    "MWEM": PlanInfo(
        mwem.mwem, (1, 2), True, True, {"rounds": 10, "records": None, "total_share": 0.05},
        summary="worst-approx query selection, Laplace, multiplicative weights",
    ),
    "MWEM-b": PlanInfo(
        mwem.mwem_b, (1,), True, True, {"rounds": 10, "records": None, "total_share": 0.05},
        summary="MWEM plus free H2 augmentation intervals each round",
    ),
    "MWEM-c": PlanInfo(
        mwem.mwem_c, (1, 2), True, True, {"rounds": 10, "records": None, "total_share": 0.05},
        summary="MWEM with NNLS and the total instead of multiplicative weights",
    ),
    "MWEM-d": PlanInfo(
        mwem.mwem_d, (1,), True, True, {"rounds": 10, "records": None, "total_share": 0.05},
        summary="MWEM with H2 augmentation and NNLS",
    ),
    "MWEM*": PlanInfo(
        mwem.mwem_star, (1, 2), True, True, {"records": None, "total_share": 0.05},
        summary="MWEM with the rounds read from a tuned table of eps * N",
    ),
    "AHP": PlanInfo(
        ahp.ahp, (1, 2), True, defaults={"selection_share": 0.85, "eta": 0.35},
        summary="noisy-histogram clustering of similar counts, one noisy count per group",
    ),
    "AHP*": PlanInfo(
        ahp.ahp_star, (1, 2), True, True, {"records": None, "total_share": 0.05},
        summary="AHP with selection_share and eta read from a tuned table of eps * N",
    ),
    "DPCube": PlanInfo(
        dpcube.dpcube, (1, 2), True, defaults={"gz": 11, "alpha": 0.5},
        summary="noisy grid of gz-cell blocks, kd-tree of low-error boxes from it, noisy box counts spread evenly",
    ),
    "DPCube+": PlanInfo(
        dpcube.dpcube_plus, (1, 2), True, defaults={"selection_share": 0.5, "variance_factor": 2.0},
        summary="DPCube from a full-resolution noisy histogram, least squares over cells and boxes (ours)",
    ),
    "DAWA": PlanInfo(
        dawa.dawa, (1, 2), True, defaults={"selection_share": None},
        summary="private dyadic partition into uniform blocks, GreedyH on the blocks (2-D: Hilbert order)",
    ),
    "PHP": PlanInfo(
        php.php, (1,), True, defaults={"selection_share": 0.5, "depth": None},
        summary="private recursive bisection, a private choice among its partitions, one noisy count an interval",
    ),
    "PHP+": PlanInfo(
        php.php_plus, (1,), True, defaults={"selection_share": 0.5},
        summary="PHP with half the rounds (ours): better at small scales, worse at large ones",
    ),
    "EFPA": PlanInfo(
        efpa.efpa, (1,), True, defaults={"selection_share": 0.5},
        summary="the k lowest Fourier frequencies, k chosen privately, measured with Laplace",
    ),
    "SF": PlanInfo(
        structure_first.structure_first, (1,), True, True, {"records": None, "total_share": 0.05},
        summary="StructureFirst as DPBench ran it: n / 10 private buckets, a binary tree of noisy counts in each",
    ),
    "SF+": PlanInfo(
        structure_first.structure_first_plus, (1,), True, True,
        {"buckets": 32, "selection_share": 0.3, "bound": None, "records": None, "total_share": 0.05},
        summary="StructureFirst with 32 buckets from counts clipped at 4 N / n (ours), one noisy count each",
    ),
    "UGrid": PlanInfo(
        grids.uniform_grid, (2,), True, True, {"records": None, "total_share": 0.05, "c": 10.0},
        summary="uniform grid sized from the record count",
    ),
    "AGrid": PlanInfo(
        grids.adaptive_grid, (2,), True, True,
        {"records": None, "total_share": 0.05, "alpha": 0.5, "c": 10.0, "c2": 5.0},
        summary="coarse grid, each cell refined by its noisy count, least squares",
    ),
    "AGrid+": PlanInfo(
        grids.adaptive_grid, (2,), True, True,
        {"records": None, "total_share": 0.05, "alpha": 0.5, "c": 10.0, "c2": 5.0, "layout": "even"},
        summary="AGrid with each level cut evenly into the paper's m x m cells (ours): 0.7-0.9 of AGrid's error",
    ),
    "HB-Striped": PlanInfo(
        striped.hb_striped, (2,), False, defaults={"attribute": 0},
        summary="HB on every stripe with the whole budget (parallel composition)",
    ),
    "DAWA-Striped": PlanInfo(
        dawa.dawa_striped, (2,), True, defaults={"attribute": 0, "selection_share": 0.25},
        summary="DAWA on every stripe with the whole budget (parallel composition)",
    ),
    "ResidualPlanner+PGM": PlanInfo(
        pgm.residual_planner_pgm, (), False, defaults={"loss": "sum", "iterations": 10_000, "method": "auto"},
        summary="ResidualPlanner's measurements fitted by one graphical model: consistent marginals, synthetic records",
        model=True,
    ),
    "PrivBayesLS": PlanInfo(
        privbayes.privbayes_ls, (), True, defaults={"selection_share": 0.3, "degree": 2, "max_cells": 10_000},
        summary="PrivBayes's private Bayesian network, Laplace on its conditional marginals, least squares (pure DP)",
    ),
    "PrivBayes+PGM": PlanInfo(
        privbayes.privbayes_pgm, (), True,
        defaults={"selection_share": 0.3, "degree": 2, "max_cells": 10_000, "iterations": 10_000, "method": "auto"},
        summary="PrivBayes's measurements fitted by one graphical model: consistent marginals, synthetic records",
        model=True,
    ),
    "MST": PlanInfo(
        mst.mst, (), True, defaults={"iterations": 10_000},
        summary="MST (NIST 2018 winner): 1-way marginals, a private maximum spanning tree of pairs, one graphical "
                "model; synthetic records (zCDP or (epsilon, delta))",
        model=True,
    ),
    "AIM": PlanInfo(
        aim.aim, (), True, defaults={"iterations": 1000, "max_cells": aim.MAX_CELLS},
        summary="AIM: workload-aware private rounds of selection and measurement, a graphical model refitted after "
                "each; synthetic records (zCDP or (epsilon, delta))",
        model=True, progress="budget",
    ),
    "Advised": PlanInfo(
        advised.advised, (), False, defaults={"advice": "strategy.json"},
        summary="the strategy ektelo-ng advise picked and saved (--out), rebuilt, checked and measured",
    ),
}

catalog: dict[str, Callable] = {name: entry.plan for name, entry in info.items()}
