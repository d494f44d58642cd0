"""The one Estimate every plan and every strategy's ``reconstruct`` returns: answers with error bars.

``answer(W)`` answers a workload from the estimate, ``variances(W)`` gives each answer's noise
variance (infinite where the measurements do not determine the answer), ``intervals(W, level)`` a
confidence interval per answer that holds at ``level``, with the method that made it
(``operators.confidence``: exact for Gaussian noise; numerically exact or a sound bound for
Laplace; for a data-dependent partition, plus a bound on its bias), or withheld (NaN) with the reason,
and ``to_frame`` / ``to_csv`` / ``to_json`` export all of it. ``note`` says what the error bars mean;
for non-linear inference (multiplicative weights, thresholding, non-negativity) there are none
(variances are NaN and the note says why). docs/error-bars.md has the table of what each plan's
intervals account for.

Two kinds exist: :class:`VectorEstimate` (a data vector from least squares over
``Measurement`` objects) and the marginal estimates of ResidualPlanner and QuerySmasher, whose
workload items are attribute sets or ``(attributes, matrix)`` queries.
"""

from __future__ import annotations

import csv
import io
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal

import numpy as np
import scipy.sparse

from . import laplace_laws
from .confidence import ConfidenceIntervals, bound_halfwidths, check_level, normal_halfwidths
from .covariance import LeastSquaresCovariance, row_blocks
from .matrix import Identity, Matrix, Sparse
from .measurement import Measurement

IntervalMethod = Literal["auto", "exact", "bound", "noise"]

#: ``auto`` computes exact Laplace intervals when the answers' laws take at most this many terms (answers x measured
#: rows; for a Kronecker measurement and workload, factor by factor: ``operators.laplace_laws``).
EXACT_WORK = 1 << 26
#: ``method="exact"`` takes at most this many (beyond: ask for fewer answers at a time).
EXACT_WORK_ASKED = 1 << 29
#: Beyond, the sound bound reads each answer's largest term from the coefficients up to this many answers x measured
#: rows (a Kronecker measurement and workload: factor by factor, at any size).
SHARE_WORK = 1 << 26


class Estimate(ABC):
    """Answers to workloads, each with its variance and a confidence interval (see the module docstring)."""

    note: str = ""

    @abstractmethod
    def answer(self, W=None) -> np.ndarray:
        """The estimate's answers to ``W`` (default: the workload the plan was run with, or every cell)."""

    @abstractmethod
    def variances(self, W=None) -> np.ndarray:
        """Each answer's noise variance (NaN where the estimate cannot say: see ``note``)."""

    @abstractmethod
    def intervals(self, W=None, level: float = 0.95, method: IntervalMethod = "auto") -> ConfidenceIntervals:
        """Confidence intervals at ``level`` for the answers to ``W``."""

    def labels(self, W=None) -> list[str]:
        """A name per answer for exports (query indices unless the estimate knows better)."""
        return [str(i) for i in range(len(self.answer(W)))]

    def records(self, W=None, level: float = 0.95) -> list[dict]:
        """One dict per answer: query, answer, variance, std, lower, upper, level, method."""
        found = self.intervals(W, level)
        variances = self.variances(W)
        return [
            {"query": label, "answer": float(a), "variance": float(v), "std": math.sqrt(v) if v >= 0 else math.nan,
             "lower": float(lo), "upper": float(hi), "level": found.level, "method": found.method}
            for label, a, v, lo, hi in zip(self.labels(W), found.answers, variances, found.lower, found.upper)
        ]

    def to_frame(self, W=None, level: float = 0.95):
        """The records as a pandas DataFrame (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("to_frame needs pandas (pip install -e '.[pandas]'); to_csv and to_json do not") from None
        return pandas.DataFrame.from_records(self.records(W, level))

    def to_csv(self, path=None, W=None, level: float = 0.95) -> str | None:
        """The records as CSV, written to ``path`` (or returned as a string when no path is given)."""
        records = self.records(W, level)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(records[0]) if records else ["query"], lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
        if path is None:
            return buffer.getvalue()
        with open(path, "w", encoding="utf-8", newline="") as out:
            out.write(buffer.getvalue())
        return None

    def to_json(self, W=None, level: float = 0.95) -> str:
        """The note and the records as a JSON document (NaN written as null)."""
        records = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                   for r in self.records(W, level)]
        return json.dumps({"note": self.note, "answers": records})


def intervals_from(answers: np.ndarray, level: float, half: np.ndarray, method: str) -> ConfidenceIntervals:
    """Intervals ``answers +- half``, withheld (NaN) where the half-width is not finite."""
    answers = np.asarray(answers, dtype=np.float64)
    half = np.asarray(half, dtype=np.float64)
    half = np.where(np.isfinite(half), half, np.nan)
    return ConfidenceIntervals(answers, answers - half, answers + half, check_level(level), method)


def unavailable(answers: np.ndarray, level: float, why: str) -> ConfidenceIntervals:
    """NaN intervals that say why there are none."""
    nan = np.full(np.shape(answers), np.nan)
    answers = np.asarray(answers, dtype=np.float64)
    return ConfidenceIntervals(answers, nan, nan, check_level(level), f"unavailable: {why}")


class VectorEstimate(Estimate):
    """An estimated data vector ``x`` and the measurements it was fitted to (least squares).

    ``np.asarray(estimate)`` is ``x``. Error bars come from the least-squares covariance of the
    measurements (``operators.covariance``); give ``error_bars=False`` when ``x`` came from a
    non-linear inference (the measurements are kept to inspect), and say why in ``note``.

    ``chosen`` names what a data-dependent plan chose privately before these measurements (its partition,
    its grid): least squares then spreads each group of cells the measurements cannot tell apart evenly, a
    bias the noise does not describe. An interval then adds a bound on that bias (:meth:`intervals`), or is
    withheld when no sound one is available: when ``reused`` (measurements that made the choice are also in
    the estimate, so their noise given the choice is not the noise they were drawn with), or when the
    measurements do not determine every group's total.
    """

    def __init__(self, x: np.ndarray, measurements: Sequence[Measurement] = (), *, workload: Matrix | None = None,
                 note: str = "", error_bars: bool = True, chosen: str = "", reused: bool = False) -> None:
        self.x = np.asarray(x, dtype=np.float64).ravel()
        self.measurements = tuple(measurements)
        self.workload = workload
        self.chosen, self.reused = chosen, reused
        error_bars = error_bars and bool(self.measurements)
        self.note = note or ("least squares: unbiased for queries the measurements determine"
                             if error_bars else "no error bars")
        self._covariance = LeastSquaresCovariance(self.measurements, self.x.size) if error_bars else None

    def __array__(self, dtype=None, copy=None):
        return self.x if dtype is None else self.x.astype(dtype)

    def __len__(self) -> int:
        return self.x.size

    def __repr__(self) -> str:
        return f"VectorEstimate({self.x.size} cells, {len(self.measurements)} measurements; {self.note})"

    @property
    def noise(self) -> frozenset[str]:
        """The kinds of noise in the measurements."""
        return frozenset(m.noise for m in self.measurements)

    def _workload(self, W) -> Matrix:
        if W is None:
            W = self.workload if self.workload is not None else Identity(self.x.size)
        if not isinstance(W, Matrix):
            raise TypeError(f"a workload must be a Matrix over the {self.x.size} cells, got {type(W).__name__}")
        if W.shape[1] != self.x.size:
            raise ValueError(f"the workload has {W.shape[1]} columns but the estimate has {self.x.size} cells")
        return W

    def answer(self, W=None) -> np.ndarray:
        return np.asarray(self._workload(W) @ self.x, dtype=np.float64)

    def variances(self, W=None) -> np.ndarray:
        W = self._workload(W)
        if self._covariance is None:
            return np.full(W.shape[0], np.nan)
        return self._covariance.variances(W)

    def intervals(self, W=None, level: float = 0.95, method: IntervalMethod = "auto") -> ConfidenceIntervals:
        """Intervals that hold at ``level``: the noise's (``exact`` or a Chernoff ``bound``; ``auto`` picks exact
        where affordable) for the answers the measurements determine, plus a bound on the bias of what a
        data-dependent plan chose; withheld (NaN, with the reason in ``method``) where neither holds.
        ``method="noise"`` gives the noise's intervals alone, labelled as leaving the bias out."""
        W = self._workload(W)
        level = check_level(level)
        answers = self.answer(W)
        if self._covariance is None:
            return unavailable(answers, level, self.note)
        if method not in ("auto", "exact", "bound", "noise"):
            raise ValueError(f"method must be 'auto', 'exact', 'bound' or 'noise', got {method!r}")
        if method == "noise":
            half, how = self._noise_halfwidths(W, level, "auto")
            return intervals_from(answers, level, half, f"noise only: {how}; excludes the bias of "
                                  f"{self.chosen or 'unmeasured directions'}")
        if self.chosen:
            return self._chosen_intervals(W, answers, level, method)
        undetermined = self._covariance.undetermined(W)
        half, how = self._noise_halfwidths(W, level, method)
        half[undetermined] = np.nan
        if undetermined.any():
            how += (f"; {int(undetermined.sum())} of {undetermined.size} withheld: not determined by the "
                    "measurements (least squares assumes their unmeasured part is zero)")
        return intervals_from(answers, level, half, how)

    def _noise_halfwidths(self, W: Matrix, level: float, method: IntervalMethod) -> tuple[np.ndarray, str]:
        """Half-widths of the noise's part of each answer's error at ``level``, and how they were made."""
        if self.noise == {"gaussian"}:
            return normal_halfwidths(self._covariance.noise_variances(W), level), "exact (Gaussian)"
        if method != "bound":
            laws = self._covariance.error_laws(W, EXACT_WORK if method == "auto" else EXACT_WORK_ASKED)
            if laws is not None:
                of_answer, found = laws
                return laplace_laws.halfwidths(found, level)[of_answer], (
                    f"exact (numerical, Laplace combination; scales rounded up, at most "
                    f"{100 * found.widening:.2g}% wider)")
            if method == "exact":
                raise ValueError(f"exact Laplace intervals for these {W.shape[0]} answers would take more than "
                                 f"{EXACT_WORK_ASKED} terms: ask for fewer answers at a time, or method='bound'")
        variances = self._covariance.noise_variances(W)
        shares = self._covariance.largest_shares(W, SHARE_WORK)
        if shares is None:
            return bound_halfwidths(variances, level), "sound bound (Chernoff, from the variance; wider than exact)"
        return bound_halfwidths(variances, level, shares), ("sound bound (Chernoff, from the variance and the largest "
                                                            "term's share of it; wider than exact)")

    def _chosen_intervals(self, W: Matrix, answers: np.ndarray, level: float,
                          method: IntervalMethod) -> ConfidenceIntervals:
        """A data-dependent plan's intervals: the noise's at ``1 - alpha / 2`` plus a bound on the bias of
        spreading each group evenly, from upper bounds on the groups' totals that hold at ``alpha / 2`` in all
        (a union bound), or withheld when no such bound is sound (the class docstring)."""
        groups = self._covariance.groups
        count = int(groups.max()) + 1
        if self.reused or self._covariance.rank != count:
            why = ("the noisy counts that chose it are also in the estimate" if self.reused else
                   "the measurements do not determine every group's total")
            return unavailable(answers, level, f"no sound interval for what the plan chose privately "
                               f"({self.chosen}): {why}; method='noise' gives the noise's intervals alone")
        spreads = _spreads(W, groups, count)  # per answer and group: how far the even spread can be off per record
        cut = spreads > 0  # every cut counts, even one from rounding in a group's mean: never less than sound
        alpha = 1 - level
        per_group = alpha / 2 / max(int(cut.sum(axis=1).max(initial=0)), 1)
        half, how = self._noise_halfwidths(W, 1 - alpha / 2, method)
        if cut.any():
            members = np.flatnonzero(cut.any(axis=0))
            totals = _indicators(groups, members)
            upper_half, _ = self._noise_halfwidths(totals, 1 - 2 * per_group, method)
            ceiling = np.maximum(totals @ self.x + upper_half, 0.0)  # each group's total, from above
            half = half + spreads[:, members] @ ceiling
        return intervals_from(answers, level, half, f"sound: {how} at 1 - alpha/2, plus a bound on the "
                              f"bias of spreading evenly within {self.chosen} at alpha/2")

def _spreads(W: Matrix, groups: np.ndarray, count: int) -> np.ndarray:
    """Per answer and group ``b``: ``max(max w_b - mean w_b, mean w_b - min w_b)``. Spreading a group's total
    ``T_b`` evenly answers ``mean(w_b) T_b`` where the truth is ``sum_{i in b} w_i x_i`` with ``x >= 0`` summing to
    ``T_b``, so the two differ by at most ``T_b`` times this."""
    sizes = np.bincount(groups, minlength=count)
    out = []
    for block in row_blocks(W):
        low = np.full((block.shape[0], count), np.inf)
        high = np.full((block.shape[0], count), -np.inf)
        np.minimum.at(low.T, groups, block.T)
        np.maximum.at(high.T, groups, block.T)
        mean = np.stack([np.bincount(groups, weights=row, minlength=count) for row in block]) / sizes
        out.append(np.where(high == low, 0.0, np.maximum(high - mean, mean - low)))  # constant: exactly no bias
    return np.vstack(out) if out else np.zeros((0, count))


def _indicators(groups: np.ndarray, members: np.ndarray) -> Matrix:
    """The queries of the totals of the groups ``members``."""
    position = np.full(int(groups.max()) + 1, -1)
    position[members] = np.arange(members.size)
    cells = np.flatnonzero(position[groups] >= 0)
    return Sparse(scipy.sparse.csr_array((np.ones(cells.size), (position[groups[cells]], cells)),
                                         shape=(members.size, groups.size)))
