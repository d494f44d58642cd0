"""The kernel's whole API: typed request and response messages (pydantic).

Nothing else crosses the trust boundary. Matrices travel as specs, predicates as typed
trees, arrays as base64 data; the kernel rebuilds everything with its own classes. A
client never states a charge: only the parameters that set the noise.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, NonNegativeInt, TypeAdapter, model_validator

from kernel.domain import Domain
from kernel.matrix.spec import ArrayData, MatrixSpec
from kernel.predicate import Predicate
from kernel.privacy import Budget, requested_amount

SourceId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Privacy parameters are read with bounded size, must be positive and finite, and are rounded down onto the
# amount grid here, so the value that sets the noise is the value charged (docs/privacy/numbers.md).
Epsilon = Annotated[Fraction, BeforeValidator(lambda value: requested_amount("epsilon", value))]
Rho = Annotated[Fraction, BeforeValidator(lambda value: requested_amount("rho", value))]
Sigma = Annotated[float, BeforeValidator(lambda value: float(requested_amount("sigma", value)))]


class Partition(_Message):
    """A partition of a vector's cells into groups: group labels per cell, or a 0/1 matrix (groups x cells)."""

    labels: ArrayData | None = None
    groups: Annotated[int, Field(ge=1)] | None = None
    matrix: MatrixSpec | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Partition:
        if (self.labels is None) == (self.matrix is None):
            raise ValueError("a partition is given either by labels (with groups) or by a matrix, not both")
        if self.labels is not None and self.labels.dtype != "int64":
            raise ValueError("partition labels must be integers")
        return self


# ---- requests --------------------------------------------------------------------------


class Root(_Message):
    op: Literal["root"] = "root"


class Describe(_Message):
    op: Literal["describe"] = "describe"
    source: SourceId


class Where(_Message):
    op: Literal["where"] = "where"
    source: SourceId
    predicate: Predicate


class Project(_Message):
    op: Literal["project"] = "project"
    source: SourceId
    attributes: list[str] = Field(min_length=1)


class Vectorize(_Message):
    """The table's histogram, or with ``attributes`` its marginal on them (project and vectorize in one step)."""

    op: Literal["vectorize"] = "vectorize"
    source: SourceId
    attributes: list[str] | None = Field(default=None, min_length=1)


class VectorizeMany(_Message):
    """Several marginals of one table in one message: exactly one ``vectorize`` request per entry of
    ``attributes``, in order (each a new vector source, a 1-stable derivation of ``source``)."""

    op: Literal["vectorize_many"] = "vectorize_many"
    source: SourceId
    attributes: list[Annotated[list[str], Field(min_length=1)]] = Field(min_length=1)


class Transform(_Message):
    op: Literal["transform"] = "transform"
    source: SourceId
    matrix: MatrixSpec


class ReduceByPartition(_Message):
    op: Literal["reduce_by_partition"] = "reduce_by_partition"
    source: SourceId
    partition: Partition


class SplitByPartition(_Message):
    op: Literal["split_by_partition"] = "split_by_partition"
    source: SourceId
    partition: Partition


class Release(_Message):
    """Free the data of a source and of everything derived from it; lineage and charges stay."""

    op: Literal["release"] = "release"
    source: SourceId


class Laplace(_Message):
    """y = M x + Laplace noise of scale (L1 sensitivity of M) / epsilon, released on a grid."""

    op: Literal["laplace"] = "laplace"
    source: SourceId
    matrix: MatrixSpec
    epsilon: Epsilon


class _GaussianNoise(_Message):
    """The noise of a Gaussian measurement: exactly one of rho (zCDP spent) or sigma (per unit L2 sensitivity)."""

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
    matrix: MatrixSpec


class GaussianItem(_GaussianNoise):
    """One measurement of a ``gaussian_batch``: ``matrices[matrix]`` on ``source``, with rho or sigma."""

    source: SourceId
    matrix: NonNegativeInt


class GaussianBatch(_Message):
    """Several Gaussian measurements in one message, each exactly the ``gaussian`` request with the same
    source, matrix and rho or sigma, composed in order; all are charged, or none (docs/privacy/gaussian.md).
    Items name their matrix by position in ``matrices``, so a matrix shared by many items travels once."""

    op: Literal["gaussian_batch"] = "gaussian_batch"
    matrices: list[MatrixSpec] = Field(min_length=1)
    items: list[GaussianItem] = Field(min_length=1)

    @model_validator(mode="after")
    def _matrices_exist(self) -> GaussianBatch:
        named = max(item.matrix for item in self.items)
        if named >= len(self.matrices):
            raise ValueError(f"an item names matrix {named}; there are {len(self.matrices)}")
        return self


class NoisyCount(_Message):
    op: Literal["noisy_count"] = "noisy_count"
    source: SourceId
    epsilon: Epsilon


class WorstApprox(_Message):
    """Exponential mechanism: pick a query of W where the estimate is worst, |w x - w x_hat|."""

    op: Literal["worst_approx"] = "worst_approx"
    source: SourceId
    workload: MatrixSpec
    estimate: ArrayData
    epsilon: Epsilon


class DyadicDeviations(_Message):
    """DAWA's partition costs: Laplace-noised deviations of the vector's aligned dyadic blocks."""

    op: Literal["dyadic_deviations"] = "dyadic_deviations"
    source: SourceId
    epsilon: Epsilon


class SplitPoints(_Message):
    """PHP's bisection step: one private split point in each of several disjoint intervals [start, stop)."""

    op: Literal["split_points"] = "split_points"
    source: SourceId
    intervals: list[tuple[NonNegativeInt, NonNegativeInt]] = Field(min_length=1)
    epsilon: Epsilon


class FourierSelect(_Message):
    """EFPA's choice of k: the exponential mechanism on -(||x - P_k x||_2 + offsets[k - 1]), k = 1 .. n."""

    op: Literal["fourier_select"] = "fourier_select"
    source: SourceId
    offsets: ArrayData
    epsilon: Epsilon


class StructureFirst(_Message):
    """StructureFirst's bucket boundaries: ``buckets - 1`` exponential-mechanism draws on SSE costs of the
    vector clipped to the public ``bound``."""

    op: Literal["structure_first"] = "structure_first"
    source: SourceId
    buckets: Annotated[int, Field(ge=2)]
    bound: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    epsilon: Epsilon


class BudgetStatus(_Message):
    op: Literal["budget"] = "budget"


class LineageGraph(_Message):
    op: Literal["lineage"] = "lineage"


class TranscriptLog(_Message):
    op: Literal["transcript"] = "transcript"


Request = Annotated[
    Union[
        Root, Describe, Where, Project, Vectorize, VectorizeMany, Transform, ReduceByPartition, SplitByPartition,
        Release, Laplace, Gaussian, GaussianBatch, NoisyCount, WorstApprox, DyadicDeviations, SplitPoints, FourierSelect,
        StructureFirst, BudgetStatus, LineageGraph, TranscriptLog,
    ],
    Field(discriminator="op"),
]
RequestAdapter: TypeAdapter = TypeAdapter(Request)

MEASUREMENTS = (
    Laplace, Gaussian, GaussianBatch, NoisyCount, WorstApprox, DyadicDeviations, SplitPoints, FourierSelect,
    StructureFirst,
)

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
    charge: Budget
    seeded: bool


class Answers(_Message):
    """One answer per item of a batch, in order."""

    kind: Literal["answers"] = "answers"
    answers: list[Answer]


class Selected(_Message):
    kind: Literal["selected"] = "selected"
    index: int
    charge: Budget
    seeded: bool


class Splits(_Message):
    kind: Literal["splits"] = "splits"
    indices: list[int]
    charge: Budget
    seeded: bool


class BudgetInfo(_Message):
    kind: Literal["budget"] = "budget"
    total: Budget
    spent: Budget
    remaining: Budget
    per_source: dict[str, Budget]


class LineageInfo(_Message):
    kind: Literal["lineage"] = "lineage"
    graph: dict[str, Any]


class TranscriptInfo(_Message):
    kind: Literal["transcript"] = "transcript"
    seeded: bool
    entries: list[dict[str, Any]]


class ErrorInfo(_Message):
    kind: Literal["error"] = "error"
    error: Literal["invalid_request", "unknown_source", "budget_exceeded"]
    message: str


Response = Annotated[
    Union[
        SourceInfo, Parts, Sources, Answer, Answers, Selected, Splits, BudgetInfo, LineageInfo, TranscriptInfo, ErrorInfo
    ],
    Field(discriminator="kind"),
]
ResponseAdapter: TypeAdapter = TypeAdapter(Response)
