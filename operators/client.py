"""The client side of the kernel protocol: a Session and the Handles that name sources.

It runs in the analyst's process and is not trusted: the kernel validates every message it sends, so it
lives with the client operators rather than in the audited kernel/.

A handle knows only public facts (kind, domain or length). Every method builds a protocol
request, sends it as JSON through the session's transport (a function call in-process, a
socket out-of-process) and turns the response into Python values or a clear exception.
"""

from __future__ import annotations

import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Union

import networkx as nx
import numpy as np
import scipy.sparse as sp
from pydantic import Field, TypeAdapter, ValidationError

from ..kernel import protocol as p
from ..kernel.domain import Domain
from .matrix import Matrix, Product, Sparse
from ..kernel.matrix.spec import ArrayData
from ..kernel.predicate import Predicate
from ..kernel.privacy import PureDP, ZCDP
from .privacy import zcdp_to_approx_dp
from .normal_form import normal_form
from ..gateway.credentials import Credential
from ..gateway.wire import Hello, Welcome, parse_address, read_frame, tune_socket, write_frame

Transport = Callable[[str], str]

Response = Annotated[
    Union[
        p.SourceInfo, p.Parts, p.Sources, p.Answer, p.Answers, p.Selected, p.Splits, p.BudgetInfo, p.LineageInfo,
        p.TranscriptInfo, p.ErrorInfo,
    ],
    Field(discriminator="kind"),
]
ResponseAdapter: TypeAdapter = TypeAdapter(Response)
"""Reads any kernel reply: the kernel's response messages (``kernel.protocol``), told apart by ``kind``."""


class KernelError(Exception):
    """The kernel refused a request."""


class BudgetExceededError(KernelError):
    """The request would overspend; nothing was measured or charged."""


class UnknownSourceError(KernelError, KeyError):
    """The handle does not belong to this kernel session."""


class InvalidRequestError(KernelError, ValueError):
    """The request was malformed or does not fit the source."""


class AccessDeniedError(KernelError, PermissionError):
    """The served kernel does not know this credential, or it was revoked; nothing was done."""


class ServerBusyError(KernelError, ConnectionError):
    """The served kernel had no room for this connection (or cannot write its audit log); nothing was done."""


_ERRORS = {"budget_exceeded": BudgetExceededError, "unknown_source": UnknownSourceError,
           "unauthenticated": AccessDeniedError, "invalid_request": InvalidRequestError, "busy": ServerBusyError}


def _error(reply: p.ErrorInfo) -> KernelError:
    """The exception for a refusal (rate limits, timeouts and a busy server are plain KernelErrors)."""
    return _ERRORS.get(reply.error, KernelError)(f"{reply.error}: {reply.message}" if reply.error not in _ERRORS
                                                 else reply.message)


@dataclass(frozen=True)
class NoisyAnswer:
    """Noisy answers from a vetted mechanism and how they were made."""

    values: np.ndarray
    noise: str
    scale: float
    grid: float
    charge: PureDP | ZCDP
    seeded: bool

    @property
    def variance(self) -> float:
        """Per-answer noise variance (2 b^2 for Laplace, sigma^2 for Gaussian; the grid adds nothing material)."""
        return 2 * self.scale**2 if self.noise == "laplace" else self.scale**2


READABLE_DELTA = 1e-9
"""The delta at which a zCDP budget is also shown as (epsilon, delta)-DP."""


@dataclass(frozen=True)
class BudgetView:
    total: PureDP | ZCDP
    spent: PureDP | ZCDP
    remaining: PureDP | ZCDP
    per_source: dict[str, PureDP | ZCDP]
    seeded: bool = False
    """Whether the kernel draws reproducible (non-secure) noise."""

    def approx_dp(self, delta: float, amount: PureDP | ZCDP | None = None) -> float:
        """The (epsilon, delta)-DP epsilon of what was spent, or of ``amount`` (pure DP: epsilon itself)."""
        amount = self.spent if amount is None else amount
        if isinstance(amount, PureDP):
            return float(amount.epsilon)
        return zcdp_to_approx_dp(amount, delta) if amount.rho > 0 else 0.0

    def __str__(self) -> str:
        """One readable line: what was spent of what, and under zCDP the (epsilon, delta) it amounts to."""
        unit, spent, total = ("epsilon", self.spent.epsilon, self.total.epsilon) if isinstance(self.total, PureDP) \
            else ("rho", self.spent.rho, self.total.rho)
        line = f"spent {unit} = {float(spent):.4g} of {float(total):.4g} ({float(total - spent):.4g} left"
        line += f", on {len(self.per_source)} sources)" if self.per_source else ")"
        if isinstance(self.total, ZCDP):
            line += (f"; as (epsilon, delta = {READABLE_DELTA:g})-DP: spent epsilon = "
                     f"{self.approx_dp(READABLE_DELTA):.4g} of {self.approx_dp(READABLE_DELTA, self.total):.4g}")
        return line


_RATE_WAITS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 4.0, None)
"""Seconds to wait before sending a rate-limited request again (None: give up)."""


class Session:
    """A conversation with one kernel; ``source`` is the root table handle."""

    def __init__(self, transport: Transport):
        self.transport = transport
        """How requests reach the kernel: JSON text in, JSON text out."""
        self._root: Handle | None = None

    def request(self, message) -> object:
        """The kernel's reply to ``message``; a served kernel's ``rate_limited`` (which changed nothing) is waited
        out and the request sent again, for up to about 20 s."""
        text = message.model_dump_json()
        for wait in _RATE_WAITS:
            reply = ResponseAdapter.validate_json(self.transport(text))
            if not (isinstance(reply, p.ErrorInfo) and reply.error == "rate_limited") or wait is None:
                break
            time.sleep(wait * random.uniform(0.5, 1.5))  # jitter: sessions do not retry in lockstep
        if isinstance(reply, p.ErrorInfo):
            raise _error(reply)
        return reply

    @property
    def source(self) -> Handle:
        if self._root is None:
            self._root = Handle(self, self.request(p.Root()))
        return self._root

    @property
    def budget(self) -> BudgetView:
        info = self.request(p.BudgetStatus())
        return BudgetView(info.total, info.spent, info.remaining, dict(info.per_source), info.seeded)

    def lineage(self) -> nx.DiGraph:
        """The lineage graph: sources, derivations with their stability, spend per source."""
        return nx.node_link_graph(self.request(p.LineageGraph()).graph, edges="links")

    def transcript(self) -> list[dict]:
        """Every request so far with its charge and outcome (requests, never data)."""
        return self.request(p.TranscriptLog()).entries

    def answer(self, queries, budget, **options):
        """Answer a batch of queries (``ek.query(...)...``) jointly from one measurement of the table, spending
        all of ``budget``: :func:`operators.queries.answer.answer_batch` (``options``: schema, level, strategy,
        nonnegative, integer)."""
        from .queries.answer import answer_batch

        return answer_batch(self.source, queries, budget, **options)

    def gaussian_batch(self, handles: Sequence[Handle], matrices: Sequence[Matrix],
                       rho: Sequence[float | Fraction | str] | None = None,
                       sigma: Sequence[float] | None = None) -> list[NoisyAnswer]:
        """``handles[i].gaussian(matrices[i], rho=rho[i])`` (or ``sigma=sigma[i]``) for every i in one
        request: each is charged exactly as that request alone, in order, and all are made or none. A
        matrix object repeated in ``matrices`` travels (and is checked by the kernel) once."""
        handles, matrices = list(handles), list(matrices)
        if (rho is None) == (sigma is None):
            raise ValueError("give exactly one of rho or sigma (one value per measurement)")
        params = list(rho if rho is not None else sigma)
        if not (len(handles) == len(matrices) == len(params)):
            raise ValueError(f"{len(handles)} handles, {len(matrices)} matrices and {len(params)} rho/sigma values: "
                             "give one of each per measurement")
        if any(h.session is not self for h in handles):
            raise ValueError("every handle must belong to this session")
        specs: list = []
        index: dict[int, int] = {}
        items = []
        for handle, matrix, value in zip(handles, matrices, params):
            if id(matrix) not in index:
                index[id(matrix)] = len(specs)
                specs.append(normal_form(matrix))
            key = "rho" if rho is not None else "sigma"
            items.append(p.GaussianItem(source=handle.id, matrix=index[id(matrix)], **{key: value}))
        reply = self.request(p.GaussianBatch(matrices=specs, items=items))
        return [_answer(answer) for answer in reply.answers]


class Handle:
    """A name for a source in the kernel, with its public facts.

    A vector handle derived from another vector (transform, reduce, split) remembers the public
    linear map from its parent, so measurements on it can be mapped back (``to_base``).
    """

    def __init__(self, session: Session, info: p.SourceInfo, parent: Handle | None = None, linear: Matrix | None = None):
        self._session = session
        self.id: str = info.source
        self.kind: str = info.source_kind
        self.domain: Domain | None = info.domain
        self.size: int = info.size
        self._parent, self._linear = parent, linear

    def to_base(self) -> tuple[Handle, Matrix | None]:
        """The vector this one was derived from by linear maps only, and the map (None: it is the base)."""
        if self._parent is None:
            return self, None
        base, above = self._parent.to_base()
        return base, self._linear if above is None else Product([self._linear, above])

    def __repr__(self) -> str:
        shape = list(self.domain.names) if self.domain is not None else self.size
        return f"Handle({self.kind}, {shape})"

    @property
    def session(self) -> Session:
        return self._session

    def _derived(self, message, linear: Matrix | None = None) -> Handle:
        parent = self if linear is not None else None
        return Handle(self._session, self._session.request(message), parent, linear)

    # ---- transformations (no budget) ---------------------------------------------------
    def where(self, predicate: Predicate) -> Handle:
        return self._derived(p.Where(source=self.id, predicate=predicate))

    def project(self, attributes: Sequence[str]) -> Handle:
        return self._derived(p.Project(source=self.id, attributes=list(attributes)))

    def vectorize(self, attributes: Sequence[str] | None = None) -> Handle:
        """The histogram of this table, or its marginal on ``attributes`` (one request, no table left behind)."""
        return self._derived(p.Vectorize(source=self.id, attributes=None if attributes is None else list(attributes)))

    def vectorize_many(self, attributes: Sequence[Sequence[str]]) -> list[Handle]:
        """The marginals of this table on each attribute list, in one request (as many ``vectorize`` calls)."""
        reply = self._session.request(p.VectorizeMany(source=self.id, attributes=[list(a) for a in attributes]))
        return [Handle(self._session, info) for info in reply.sources]

    def transform(self, matrix: Matrix) -> Handle:
        return self._derived(p.Transform(source=self.id, matrix=normal_form(matrix)), matrix)

    def release(self) -> int:
        """Free this source's data and its descendants' in the kernel (their lineage and charges stay);
        returns how many sources were freed. Later requests on them are refused."""
        return len(self._session.request(p.Release(source=self.id)).sources)

    def reduce_by_partition(self, partition: Matrix | np.ndarray) -> Handle:
        labels = _labels(partition, self.size)
        groups = partition.shape[0] if isinstance(partition, Matrix) else None
        message = p.ReduceByPartition(source=self.id, partition=_partition(labels, groups))
        return self._derived(message, Sparse(sp.csr_array((np.ones(labels.size), (labels, np.arange(labels.size))))))

    def split_by_partition(self, partition: Matrix | np.ndarray) -> list[Handle]:
        """One handle per group, holding that group's cells in their original order."""
        labels = _labels(partition, self.size)
        groups = partition.shape[0] if isinstance(partition, Matrix) else None
        parts = self._session.request(p.SplitByPartition(source=self.id, partition=_partition(labels, groups)))
        handles = []
        for group, info in enumerate(parts.parts):
            cells = np.flatnonzero(labels == group)
            select = Sparse(sp.csr_array((np.ones(cells.size), (np.arange(cells.size), cells)), shape=(cells.size, self.size)))
            handles.append(Handle(self._session, info, self, select))
        return handles

    # ---- measurements (spend budget) ---------------------------------------------------
    def laplace(self, matrix: Matrix, epsilon: float | Fraction | str) -> NoisyAnswer:
        return _answer(self._session.request(p.Laplace(source=self.id, matrix=normal_form(matrix), epsilon=epsilon)))

    def gaussian(self, matrix: Matrix, rho: float | Fraction | str | None = None, sigma: float | None = None) -> NoisyAnswer:
        message = p.Gaussian(source=self.id, matrix=normal_form(matrix), rho=rho, sigma=sigma)
        return _answer(self._session.request(message))

    def noisy_count(self, epsilon: float | Fraction | str) -> NoisyAnswer:
        return _answer(self._session.request(p.NoisyCount(source=self.id, epsilon=epsilon)))

    def worst_approx(self, workload: Matrix, estimate: np.ndarray, epsilon: float | Fraction | str) -> int:
        """Index of a workload query chosen by the exponential mechanism, favouring large |w x - w x_hat|."""
        message = p.WorstApprox(
            source=self.id, workload=normal_form(workload), estimate=ArrayData.of(np.asarray(estimate, float)), epsilon=epsilon
        )
        return self._session.request(message).index

    def split_points(self, intervals: Sequence[tuple[int, int]], epsilon: float | Fraction | str, *,
                     split_penalty: float | None = None) -> list[int | None]:
        """PHP's private bisection: a split point k (start < k < stop) in each sorted, disjoint interval,
        chosen by the exponential mechanism favouring small deviation on both sides (docs/privacy/php.md). With a
        ``split_penalty`` b an interval may also stay whole (None), as if a split cost b more deviation."""
        message = p.SplitPoints(source=self.id, intervals=[tuple(i) for i in intervals], epsilon=epsilon,
                                split_penalty=split_penalty)
        return self._session.request(message).indices

    def choose_partition(self, cuts: Sequence[int | None], penalty: float, epsilon: float | Fraction | str) -> int:
        """PHP's final private choice among a public chain of partitions: 0 for the whole vector, i for the one
        after the first i ``cuts`` (a cut adds a boundary, None repeats the partition), favouring a small total
        deviation plus ``penalty`` per interval (docs/privacy/php.md)."""
        message = p.ChoosePartition(source=self.id, cuts=list(cuts), penalty=penalty, epsilon=epsilon)
        return self._session.request(message).index

    def fourier_select(self, offsets: np.ndarray, epsilon: float | Fraction | str) -> int:
        """EFPA's private k: how many of the lowest real Fourier frequencies to keep, favouring a small
        dropped norm plus the public ``offsets[k - 1]`` (the expected noise error of measuring k)."""
        message = p.FourierSelect(source=self.id, offsets=ArrayData.of(np.asarray(offsets, float)), epsilon=epsilon)
        return self._session.request(message).index

    def structure_first(self, buckets: int, bound: float, epsilon: float | Fraction | str) -> list[int]:
        """StructureFirst's private bucket boundaries (``buckets - 1`` sorted cut points), from SSE costs of
        the counts clipped to the public ``bound`` (docs/privacy/structure-first.md)."""
        message = p.StructureFirst(source=self.id, buckets=buckets, bound=bound, epsilon=epsilon)
        return self._session.request(message).indices

    def privbayes_select(self, candidates: Sequence[tuple[str, Sequence[str]]], epsilon: float | Fraction | str) -> int:
        """PrivBayes's private network step on this table: the index of one ``(child, parents)`` candidate, chosen
        by the exponential mechanism favouring children that depend most on their parents (the L1 distance of
        their counts from independence; docs/privacy/privbayes.md)."""
        message = p.PrivBayesSelect(source=self.id, candidates=[(c, list(ps)) for c, ps in candidates], epsilon=epsilon)
        return self._session.request(message).index

    def marginal_select(self, candidates: Sequence[Sequence[str]], estimates: Sequence[np.ndarray],
                        epsilon: float | Fraction | str, *, weights: Sequence[float] | None = None,
                        offsets: Sequence[float] | None = None,
                        recode: Mapping[str, Sequence[int]] | None = None) -> int:
        """MST's and AIM's private selection on this table: the index of one candidate attribute set, chosen by the
        exponential mechanism favouring ``weight * ||marginal - estimate||_1 - offset`` (docs/privacy/
        marginal-selection.md). Each estimate has its candidate's marginal's shape, axes in the candidate's order,
        after ``recode`` (per attribute, a map of its values onto new values 0..k-1) merges values."""
        order = {name: i for i, name in enumerate(self.domain.names)}
        arrays = []
        for names, estimate in zip(candidates, estimates, strict=True):
            axes = sorted(range(len(names)), key=lambda axis: order.get(names[axis], -1))  # the table's order
            arrays.append(ArrayData.of(np.transpose(np.asarray(estimate, dtype=float), axes)))
        message = p.MarginalSelect(
            source=self.id, candidates=[list(c) for c in candidates], estimates=arrays,
            weights=list(weights) if weights is not None else [1.0] * len(candidates),
            offsets=list(offsets) if offsets is not None else [0.0] * len(candidates),
            recode={name: ArrayData.of(np.asarray(values, dtype=np.int64)) for name, values in (recode or {}).items()},
            epsilon=epsilon)
        return self._session.request(message).index

    def dyadic_deviations(self, epsilon: float | Fraction | str) -> NoisyAnswer:
        """DAWA's noisy bucket costs: the deviation of every aligned dyadic block (kernel docs/privacy/dawa.md)."""
        return _answer(self._session.request(p.DyadicDeviations(source=self.id, epsilon=epsilon)))


def _labels(partition: Matrix | np.ndarray, size: int) -> np.ndarray:
    """Group label per cell (public: the client chose the partition); a matrix must be 0/1 with one 1 per column."""
    if isinstance(partition, Matrix):
        if partition.shape[1] != size or not partition.binary or not np.all(partition.column_norms("l1") == 1.0):
            raise ValueError(f"not a partition of {size} cells: every cell (column) must belong to exactly one group "
                             "(row), with weight 1")
        return np.rint(partition.T @ np.arange(partition.shape[0], dtype=np.float64)).astype(np.int64)
    labels = np.asarray(partition)
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError("partition labels must be integers (one group number per cell)")
    return labels.astype(np.int64).ravel()


def _partition(labels: np.ndarray, groups: int | None = None) -> p.PartitionSpec:
    groups = int(labels.max(initial=-1)) + 1 if groups is None else groups
    return p.PartitionSpec(labels=ArrayData.of(labels), groups=max(groups, 1))


def _answer(reply: p.Answer) -> NoisyAnswer:
    return NoisyAnswer(reply.values.array(), reply.noise, reply.scale, reply.grid, reply.charge, reply.seeded)


def framed_transport(sock: socket.socket, peer: str) -> Transport:
    """Requests over one connected socket, as length-prefixed frames (``gateway.wire``), one at a time."""
    lock = threading.Lock()

    def send(text: str) -> str:
        with lock:
            write_frame(sock, text.encode("utf-8"))
            reply = read_frame(sock, 1 << 40)
        if reply is None:
            raise ConnectionError(f"{peer} closed the connection")
        return reply.decode("utf-8")

    return send


def socket_transport(address: str, credential: Credential | None = None,
                     timeout: float | None = None) -> Callable[[str], str]:
    """A transport that sends each request over one connection to a serving kernel, opened with the analyst's
    hello; over TCP it speaks TLS, trusting the CA in the credential. A server too busy to take the connection
    (many analysts connecting at once) is tried again, backing off, for up to about 20 s."""
    for wait in _RATE_WAITS:
        try:
            return _connection(address, credential, timeout)
        except (ServerBusyError, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError):
            if wait is None:
                raise
            time.sleep(wait * random.uniform(0.5, 1.5))


def _connection(address: str, credential: Credential | None, timeout: float | None) -> Callable[[str], str]:
    family, where = parse_address(address)
    if family != socket.AF_UNIX and (credential is None or credential.ca is None):
        raise ValueError(f"{address} is a TCP address, and over TCP a kernel is reached with TLS only (the token must "
                         "not cross in clear), but this credential holds no CA certificate to trust: connect to the "
                         "kernel's unix socket, or ask the data owner for a credential of a service with TLS")
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(where)
    except (FileNotFoundError, ConnectionRefusedError) as error:
        sock.close()
        raise ConnectionRefusedError(
            f"no kernel is listening at {address} ({error.strerror or error}): start one with `ektelo-ng kernel serve "
            "--dir DIR --table FILE --domain FILE`, or check the address in your credential") from None
    tune_socket(sock)
    if family != socket.AF_UNIX:
        sock = ssl.create_default_context(cadata=credential.ca).wrap_socket(sock, server_hostname=where[0])
    send = framed_transport(sock, f"the kernel at {address}")

    if credential is not None:
        reply = send(Hello(analyst=credential.analyst, token=credential.token).model_dump_json())
        try:
            Welcome.model_validate_json(reply)
        except ValidationError:
            raise _error(p.ErrorInfo.model_validate_json(reply)) from None
    return send
