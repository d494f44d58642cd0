"""The kernel's whole API: typed request and response messages (pydantic). Nothing else crosses the trust
boundary: matrices travel in the sealed language (``kernel.matrix.spec``), predicates as typed trees, arrays as
base64 data, all rebuilt by the kernel with its own classes. A client never states a charge, only the parameters
that set the noise. ``OPERATIONS`` in ``kernel.service`` maps each request to the one function that answers it."""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, NonNegativeInt, TypeAdapter, model_validator

from .domain import Domain
from .matrix.spec import ArrayData, Stack
from .predicate import Predicate
from .privacy import Accounted, requested_amount

SourceId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Privacy parameters are read with bounded size, must be positive and finite, and are rounded down onto the
# amount grid here, so the value that sets the noise is the value charged (docs/privacy/numbers.md).
Epsilon = Annotated[Fraction, BeforeValidator(lambda value: requested_amount("epsilon", value))]
Rho = Annotated[Fraction, BeforeValidator(lambda value: requested_amount("rho", value))]
Sigma = Annotated[float, BeforeValidator(lambda value: float(requested_amount("sigma", value)))]


class PartitionSpec(_Message):
    """A partition of a vector's cells into ``groups`` groups: a group label (0..groups - 1) per cell."""

    labels: ArrayData
    groups: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _integer_labels(self) -> PartitionSpec:
        if self.labels.dtype != "int64" or len(self.labels.shape) != 1:
            raise ValueError("partition labels must be a 1-D array of integers, one group per cell")
        return self


# ---- requests --------------------------------------------------------------------------


class _OnSource(_Message):
    op: str  # each request type sets its own
    source: SourceId


class Root(_Message):
    op: Literal["root"] = "root"


class Describe(_OnSource):
    op: Literal["describe"] = "describe"


class Where(_OnSource):
    op: Literal["where"] = "where"
    predicate: Predicate


class Project(_OnSource):
    op: Literal["project"] = "project"
    attributes: list[str] = Field(min_length=1, max_length=1 << 10, fail_fast=True)


class Vectorize(_OnSource):
    """The table's histogram, or with ``attributes`` its marginal on them (project and vectorize in one step)."""

    op: Literal["vectorize"] = "vectorize"
    attributes: list[str] | None = Field(default=None, min_length=1, max_length=1 << 10, fail_fast=True)


class VectorizeMany(_OnSource):
    """Several marginals of one table: exactly one ``vectorize`` request per entry of ``attributes``, in order."""

    op: Literal["vectorize_many"] = "vectorize_many"
    attributes: list[Annotated[list[str], Field(min_length=1, max_length=1 << 10)]] = Field(
        min_length=1, max_length=1 << 12, fail_fast=True
    )


class Transform(_OnSource):
    op: Literal["transform"] = "transform"
    matrix: Stack


class ReduceByPartition(_OnSource):
    op: Literal["reduce_by_partition"] = "reduce_by_partition"
    partition: PartitionSpec


class SplitByPartition(_OnSource):
    op: Literal["split_by_partition"] = "split_by_partition"
    partition: PartitionSpec


class Release(_OnSource):
    """Free the data of a source and of everything derived from it; lineage and charges stay."""

    op: Literal["release"] = "release"


class Laplace(_OnSource):
    """y = M x + Laplace noise of scale (L1 sensitivity of M) / epsilon, released on a grid."""

    op: Literal["laplace"] = "laplace"
    matrix: Stack
    epsilon: Epsilon


class _GaussianNoise(_Message):
    rho: Rho | None = None
    sigma: Sigma | None = None

    @model_validator(mode="after")
    def _one_parameter(self) -> _GaussianNoise:
        if (self.rho is None) == (self.sigma is None):
            raise ValueError("give exactly one of rho or sigma")
        return self


class Gaussian(_GaussianNoise):
    """y = M x + Gaussian noise; give rho (zCDP spent) or sigma (noise per unit L2 sensitivity)."""

    op: Literal["gaussian"] = "gaussian"
    source: SourceId
    matrix: Stack


class GaussianItem(_GaussianNoise):
    """One measurement of a ``gaussian_batch``: ``matrices[matrix]`` on ``source``, with rho or sigma."""

    source: SourceId
    matrix: NonNegativeInt


class GaussianBatch(_Message):
    """Several ``gaussian`` requests in one, composed in order, all charged or none (docs/privacy/gaussian.md);
    items name their matrix by position in ``matrices``, so a matrix shared by many items travels once."""

    op: Literal["gaussian_batch"] = "gaussian_batch"
    matrices: list[Stack] = Field(min_length=1, max_length=1 << 16, fail_fast=True)
    items: list[GaussianItem] = Field(min_length=1, max_length=1 << 16, fail_fast=True)

    @model_validator(mode="after")
    def _matrices_exist(self) -> GaussianBatch:
        named = max(item.matrix for item in self.items)
        if named >= len(self.matrices):
            raise ValueError(f"an item names matrix {named}; there are {len(self.matrices)}")
        return self


class NoisyCount(_OnSource):
    op: Literal["noisy_count"] = "noisy_count"
    epsilon: Epsilon


class WorstApprox(_OnSource):
    """Exponential mechanism: pick a query of W where the estimate is worst, |w x - w x_hat|."""

    op: Literal["worst_approx"] = "worst_approx"
    workload: Stack
    estimate: ArrayData
    epsilon: Epsilon


class DyadicDeviations(_OnSource):
    """DAWA's partition costs: Laplace-noised deviations of the vector's aligned dyadic blocks."""

    op: Literal["dyadic_deviations"] = "dyadic_deviations"
    epsilon: Epsilon


Penalty = Annotated[float, Field(ge=0, le=2.0**500, allow_inf_nan=False, strict=True)]
"""PHP's public cost of an interval: a number (not a bool or a string), 0 to 2^500."""


class SplitPoints(_OnSource):
    """PHP's bisection step: one private split point in each of several disjoint intervals [start, stop); with a
    ``split_penalty`` b, an interval may also be kept whole (its score b - dev against a split's -(dev + dev))."""

    op: Literal["split_points"] = "split_points"
    intervals: list[tuple[NonNegativeInt, NonNegativeInt]] = Field(min_length=1, max_length=1 << 13, fail_fast=True)
    epsilon: Epsilon
    split_penalty: Penalty | None = None


class ChoosePartition(_OnSource):
    """PHP's final choice: one partition of a public chain, by the exponential mechanism on -(sum of deviations +
    ``penalty`` per interval). The chain starts with the whole vector; each step adds one cut, or (None) repeats."""

    op: Literal["choose_partition"] = "choose_partition"
    cuts: list[Annotated[int, Field(ge=0, strict=True)] | None] = Field(
        min_length=1, max_length=1 << 13, fail_fast=True
    )
    penalty: Penalty
    epsilon: Epsilon


class FourierSelect(_OnSource):
    """EFPA's choice of k: the exponential mechanism on -(||x - P_k x||_2 + offsets[k - 1]), k = 1 .. n."""

    op: Literal["fourier_select"] = "fourier_select"
    offsets: ArrayData
    epsilon: Epsilon


class StructureFirst(_OnSource):
    """StructureFirst's boundaries: ``buckets - 1`` exponential-mechanism draws on SSEs of counts clipped to bound."""

    op: Literal["structure_first"] = "structure_first"
    buckets: Annotated[int, Field(ge=2)]
    bound: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    epsilon: Epsilon


class PrivBayesSelect(_OnSource):
    """PrivBayes's network step: one (child, parents) candidate of a table by the exponential mechanism on its
    counts' distance from independence, sum |c(x, pi) - c(x) c(pi) / n| (docs/privacy/privbayes.md)."""

    op: Literal["privbayes_select"] = "privbayes_select"
    candidates: list[tuple[str, Annotated[list[str], Field(max_length=1 << 10)]]] = Field(
        min_length=1, max_length=1 << 12, fail_fast=True
    )
    epsilon: Epsilon


class MarginalSelect(_OnSource):
    """MST's and AIM's selection step: one candidate attribute set of a table by the exponential mechanism on
    ``weight * ||marginal - estimate||_1 - offset`` (docs/privacy/marginal-selection.md). Each estimate has the
    candidate's marginal's shape, axes in the table's attribute order, after ``recode`` (per attribute, a public map
    of its values to new ones 0..k-1) merges values."""

    op: Literal["marginal_select"] = "marginal_select"
    candidates: list[Annotated[list[str], Field(min_length=1, max_length=1 << 10)]] = Field(
        min_length=1, max_length=1 << 12, fail_fast=True
    )
    estimates: list[ArrayData] = Field(min_length=1, max_length=1 << 12, fail_fast=True)
    weights: list[float] = Field(min_length=1, max_length=1 << 12, fail_fast=True)
    offsets: list[float] = Field(min_length=1, max_length=1 << 12, fail_fast=True)
    recode: dict[str, ArrayData] = Field(default_factory=dict, max_length=1 << 10)
    epsilon: Epsilon

    @model_validator(mode="after")
    def _one_of_each(self) -> MarginalSelect:
        if not len(self.candidates) == len(self.estimates) == len(self.weights) == len(self.offsets):
            raise ValueError("give one estimate, weight and offset per candidate")
        for name, values in self.recode.items():
            if values.dtype != "int64" or len(values.shape) != 1:
                raise ValueError(f"the recoding of {name!r} must be a 1-D array of integers, one per value")
        return self


class _Paged(_Message):
    """Public state, a page at a time: from ``cursor`` (0, then each reply's ``next``) on."""

    cursor: Annotated[int, Field(ge=0, lt=1 << 63)] = 0


class BudgetStatus(_Paged):
    """The budget, and the spend of a page of the sources, in the order they were made."""

    op: Literal["budget"] = "budget"


class LineageGraph(_Paged):
    """A page of the lineage: sources in the order they were made, each with the derivation that made it."""

    op: Literal["lineage"] = "lineage"


class TranscriptLog(_Paged):
    """A page of the transcript, from the entry numbered ``cursor`` (or the oldest kept) on."""

    op: Literal["transcript"] = "transcript"


Request = Annotated[
    Union[
        Root,
        Describe,
        Where,
        Project,
        Vectorize,
        VectorizeMany,
        Transform,
        ReduceByPartition,
        SplitByPartition,
        Release,
        Laplace,
        Gaussian,
        GaussianBatch,
        NoisyCount,
        WorstApprox,
        DyadicDeviations,
        SplitPoints,
        ChoosePartition,
        FourierSelect,
        StructureFirst,
        PrivBayesSelect,
        MarginalSelect,
        BudgetStatus,
        LineageGraph,
        TranscriptLog,
    ],
    Field(discriminator="op"),
]
RequestAdapter: TypeAdapter = TypeAdapter(Request)

# ---- responses -------------------------------------------------------------------------


class SourceInfo(_Message):
    """Public facts about a source: its kind and domain (tables) or length (vectors)."""

    kind: Literal["source"] = "source"
    source: SourceId
    source_kind: Literal["table", "vector"]
    domain: Domain | None = None
    size: int


class Parts(_Message):
    kind: Literal["parts"] = "parts"
    parts: list[SourceInfo]


class Sources(_Message):
    """New sources, in the order they were asked for."""

    kind: Literal["sources"] = "sources"
    sources: list[SourceInfo]


class Answer(_Message):
    """Noisy answers and how they were made; ``seeded`` flags the reproducible (non-secure) mode."""

    kind: Literal["answer"] = "answer"
    values: ArrayData
    noise: Literal["laplace", "gaussian"]
    scale: float
    grid: float
    charge: Accounted
    seeded: bool


class Answers(_Message):
    """One answer per item of a batch, in order."""

    kind: Literal["answers"] = "answers"
    answers: list[Answer]


class Selected(_Message):
    kind: Literal["selected"] = "selected"
    index: int
    charge: Accounted
    seeded: bool


class Splits(_Message):
    kind: Literal["splits"] = "splits"
    indices: list[int | None]
    charge: Accounted
    seeded: bool


class _Page(_Message):
    next: int | None = None
    """The cursor of the next page, None after the last."""


class BudgetInfo(_Page):
    """The session's budget; ``seeded`` says the kernel draws reproducible (non-secure) noise."""

    kind: Literal["budget"] = "budget"
    total: Accounted
    spent: Accounted
    remaining: Accounted
    per_source: dict[str, Accounted]
    seeded: bool = False


class LineageInfo(_Page):
    """A page of the lineage graph (networkx's node-link data): its sources with their data and spend, the edges into
    them (a parent listed on an earlier page appears by its id only)."""

    kind: Literal["lineage"] = "lineage"
    graph: dict[str, Any]


class TranscriptInfo(_Page):
    kind: Literal["transcript"] = "transcript"
    seeded: bool
    entries: list[dict[str, Any]]


class ErrorInfo(_Message):
    kind: Literal["error"] = "error"
    error: Literal[
        "invalid_request", "unknown_source", "budget_exceeded", "unauthenticated", "rate_limited", "timeout", "busy"
    ]
    message: str
