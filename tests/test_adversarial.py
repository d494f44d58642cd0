"""A hostile analyst against the kernel, through the JSON protocol only.

Every test speaks raw JSON, as a remote analyst can, to a kernel in this process (``Kernel.handle_json``)
and to one served on a unix socket (``kernel.server``), and checks one promise of docs/privacy/:

1. derived sensitivities bound what the released arithmetic can change by (audited on neighbouring
   tables with the same seed, so the noise cancels and the gap is the pre-noise difference);
2. whether a request fails is decided from public quantities, before the charge;
3. numbers are bounded before any work;
4. memory is bounded before any allocation, and sources can be released;
5. the samplers reach every value the exact distribution gives (no float-truncated tail).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

from ektelo_ng.kernel.privacy import PureDP, ZCDP
from ektelo_ng.kernel.protocol import ErrorInfo
from ektelo_ng.gateway.server import make_server
from ektelo_ng.gateway.wire import read_frame, write_frame
from ektelo_ng.kernel.service import Kernel
from ektelo_ng.kernel.limits import OBJECT_STEPS, SOURCE_BYTES, Limits
from ektelo_ng.kernel.table import TableBackend, load_table
from ektelo_ng.kernel.domain import Domain

C53 = 2.0**53  # (C - 1) * x rounds once x > 2^15 or so: C x - (C - 1) x jumps from 32768 to 65536 between 32768 and 32769


# ---- raw protocol ------------------------------------------------------------------------


def array(values, dtype="float64") -> dict:
    data = np.ascontiguousarray(values, dtype="<f8" if dtype == "float64" else "<i8")
    return {"dtype": dtype, "shape": list(data.shape), "base64": base64.b64encode(data.tobytes()).decode()}


def dense(rows) -> dict:
    return {"kind": "dense", "data": array(np.array(rows, dtype=float).reshape(len(rows), -1))}


def diagonal(values) -> dict:
    return {"kind": "diagonal", "values": array(values)}


def product(*factors) -> dict:
    return {"kind": "product", "factors": list(factors)}


def identity(n) -> dict:
    return {"kind": "identity", "n": n}


def ones(rows, cols) -> dict:
    return {"kind": "ones", "rows": rows, "cols": cols}


def sealed(*factors, weight: float = 1.0, row_weights=None) -> dict:
    """A matrix in the kernel's sealed language: one block ``weight * diag(row_weights) * kron(factors)``."""
    block = {"weight": weight, "factors": list(factors)}
    if row_weights is not None:
        block["row_weights"] = array(row_weights)
    return {"kind": "stack", "blocks": [block]}


def stack(*matrices) -> dict:
    """Sealed matrices stacked: their blocks, one after another."""
    return {"kind": "stack", "blocks": [b for m in matrices for b in m["blocks"]]}


class _OneKernel:
    """A gate to one given kernel for analyst "a" (the served transport around the kernel under attack)."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel

    def authenticate(self, analyst: str, token: str, peer: str):
        return None if (analyst, token) == ("a", "t") else ErrorInfo(error="unauthenticated", message="no")

    def handle(self, analyst: str, text: bytes, deadline: float) -> str:
        return self.kernel.handle_json(text, deadline)


class Analyst:
    """Sends JSON requests and returns JSON replies, in process or over a socket."""

    def __init__(self, kernel: Kernel, remote: bool):
        self.kernel = kernel
        self._server = None
        if remote:
            self._server = make_server(_OneKernel(kernel), "unix:" + _socket_path())
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.connect(self._server.server_address)
            assert self.send({"op": "hello", "analyst": "a", "token": "t"})["kind"] == "welcome"

    def send(self, request: dict) -> dict:
        text = json.dumps(request)
        if self._server is None:
            return json.loads(self.kernel.handle_json(text))
        write_frame(self._sock, text.encode())
        reply = read_frame(self._sock)
        if reply is None:
            raise ConnectionError("the kernel dropped the connection")
        return json.loads(reply)

    def close(self):
        if self._server is not None:
            self._sock.close()
            self._server.shutdown()
            self._server.server_close()

    def root(self) -> str:
        return self.send({"op": "root"})["source"]

    def vector(self) -> str:
        return self.send({"op": "vectorize", "source": self.root()})["source"]

    def spent(self):
        return self.send({"op": "budget"})["spent"]

    def work(self, requests: int = 1) -> int:
        """The steps the kernel counted for the last ``requests`` requests (its transcript's own count of their work):
        what a refusal cost, counted instead of timed."""
        entries = self.send({"op": "transcript"})["entries"]
        return sum(entry["work"] for entry in entries[-requests:])


REFUSED_WORK = 4 * OBJECT_STEPS
"""The most a request refused on its public sizes may cost: its objects' Python work, nothing applied or read."""

_counter = iter(range(10**9))


def _socket_path() -> str:
    import tempfile

    return f"{tempfile.gettempdir()}/ektelo-adversarial-{next(_counter)}-{time.monotonic_ns()}.sock"


def make_kernel(counts, budget, seed=None) -> Kernel:
    counts = np.asarray(counts, dtype=np.int64)
    domain = Domain.from_sizes([counts.size], names=["a"])
    return Kernel(load_table({"a": np.repeat(np.arange(counts.size), counts)}, domain), budget, seed=seed)


@pytest.fixture(params=["in_process", "served"])
def remote(request):
    return request.param == "served"


def analyst(counts, budget=PureDP(1), seed=None, remote=False) -> Analyst:
    return Analyst(make_kernel(counts, budget, seed), remote)


def neighbour_replies(counts, cell, send, budget, remote):
    """The replies of one request sequence on a table and on its neighbour with one more record in
    ``cell``, from kernels with the same seed (the noise is then the same draw in both)."""
    replies = []
    for extra in (0, 1):
        data = np.array(counts)
        data[cell] += extra
        a = analyst(data, budget, seed=12345, remote=remote)
        try:
            replies.append((send(a), a.spent()))
        finally:
            a.close()
    return replies


def assert_within_charged_sensitivity(counts, cell, send, budget, remote):
    """Either both neighbours are refused alike with nothing charged, or the answers differ by at most the
    sensitivity the kernel charged for (Laplace: scale * epsilon in L1; Gaussian: sigma * sqrt(2 rho) in L2)."""
    (first, spent_first), (second, spent_second) = neighbour_replies(counts, cell, send, budget, remote)
    assert first.get("kind") == second.get("kind"), f"the outcome depends on the data: {first} / {second}"
    if first["kind"] == "error":
        assert first["error"] == second["error"]
        assert Fraction(spent_first[next(k for k in spent_first if k != "kind")]) == 0, "a refused request was charged"
        return
    answers = [first] if first["kind"] == "answer" else first["answers"]
    others = [second] if second["kind"] == "answer" else second["answers"]
    for a, b in zip(answers, others):
        values_a, values_b = _values(a), _values(b)
        assert np.all(np.isfinite(values_a)) and np.all(np.isfinite(values_b)), "a non-finite value was released"
        charge = a["charge"]
        if a["noise"] == "laplace":
            gap, bound = np.abs(values_a - values_b).sum(), a["scale"] * float(Fraction(charge.get("epsilon") or 0) or
                                                                                 np.sqrt(2 * float(Fraction(charge["rho"]))))
        else:
            gap, bound = np.sqrt(((values_a - values_b) ** 2).sum()), a["scale"] * np.sqrt(2 * float(Fraction(charge["rho"])))
        assert gap <= bound * (1 + 1e-9), f"neighbours' answers differ by {gap}, the charge covers {bound}"


def _values(answer) -> np.ndarray:
    data = answer["values"]
    return np.frombuffer(base64.b64decode(data["base64"]), dtype="<f8").reshape(data["shape"])


# ---- 1. derived sensitivity and stability bound the released arithmetic -----------------

# Factors whose product is exactly 1 on a unit count and exactly x / 2 on larger ones in floats:
# x * 2^-1074 is a subnormal, halving it rounds 1 to 0 (ties to even), and 2^1074 brings it back.
VANISHING_ON_UNITS = [dense([[2.0**74]]), dense([[2.0**1000]]), dense([[0.5]]), dense([[2.0**-1074]])]


def test_a_product_that_vanishes_on_unit_vectors_is_not_a_free_transform(remote):
    a = analyst([10, 20, 31], PureDP(1), remote=remote)
    try:
        x = a.vector()
        cells = [{"kind": "kronecker", "factors": [f, identity(3)]} for f in VANISHING_ON_UNITS]
        reply = a.send({"op": "transform", "source": x, "matrix": product(*cells)})
        if reply["kind"] == "error":
            return
        answer = a.send({"op": "laplace", "source": reply["source"], "matrix": identity(3), "epsilon": "1000"})
        assert answer["kind"] == "error" or Fraction(a.spent()["epsilon"]) > 0, "exact counts for free"
    finally:
        a.close()


CANCELLING = product(dense([[1.0, -1.0]]), dense([[C53], [C53 - 1]]))


def kron(*factors) -> dict:
    return {"kind": "kronecker", "factors": list(factors)}


# Kronecker factors this small are multiplied out (exactly, here) before use, so the cancellation is
# spread across a product of Kronecker products instead.
CANCELLING_PAIRS = product(kron(dense([[1.0, -1.0]]), identity(2)), kron(dense([[C53], [C53 - 1]]), identity(2)))


# The same cancellations in the sealed language: C x - (C - 1) y inside one dense leaf, and through Kronecker
# products, stacks, scalar and row weights.
SEALED_CANCELLING = sealed(dense([[C53, -(C53 - 1)]]), identity(2))


@pytest.mark.parametrize("matrix, counts", [
    pytest.param(sealed(dense([[C53, -(C53 - 1)]])), [32768, 32768], id="sealed-dense"),
    pytest.param(SEALED_CANCELLING, [32768, 7, 32768, 7], id="sealed-kronecker"),
    pytest.param(stack(SEALED_CANCELLING, sealed(identity(4))), [32768, 7, 32768, 7], id="sealed-stack"),
    pytest.param(sealed(dense([[2.0**20 * C53, -(2.0**20) * (C53 - 1)]]), identity(2), weight=2.0**-20),
                 [32768, 7, 32768, 7], id="sealed-weights"),
    pytest.param(sealed(dense([[C53, -(C53 - 1)], [1.0, 1.0]]), row_weights=[2.0**-20, 3.0]), [32768, 32768],
                 id="sealed-row-weights"),
    pytest.param(sealed({"kind": "fourier", "n": 4, "k": 4}, dense([[C53], [-(C53 - 1)]]), weight=0.5),
                 [32768, 3, 0, 9], id="sealed-fourier"),
    pytest.param(CANCELLING, [32768], id="product"),
    pytest.param(CANCELLING_PAIRS, [32768, 7], id="kronecker"),
    pytest.param({"kind": "vstack", "blocks": [CANCELLING_PAIRS, identity(2)]}, [32768, 7], id="stack"),
    pytest.param({"kind": "transpose", "base": product(kron(dense([[C53, C53 - 1]]), identity(2)),
                                                       kron(dense([[1.0], [-1.0]]), identity(2)))},
                 [32768, 7], id="transpose"),
    pytest.param({"kind": "weighted", "weight": 2.0**-20, "base": product(
        kron(dense([[2.0**20, -(2.0**20)]]), identity(2)), kron(dense([[C53], [C53 - 1]]), identity(2)))},
                 [32768, 7], id="weights"),
])
def test_laplace_on_cancelling_matrices_is_charged_for_what_floats_release(matrix, counts, remote):
    def send(a):
        return a.send({"op": "laplace", "source": a.vector(), "matrix": matrix, "epsilon": "1"})

    assert_within_charged_sensitivity(counts, 0, send, PureDP(1), remote)


@pytest.mark.parametrize("matrix", [SEALED_CANCELLING, CANCELLING_PAIRS], ids=["sealed", "as-sent-before"])
def test_gaussian_batches_on_cancelling_matrices_are_charged_for_what_floats_release(remote, matrix):
    def send(a):
        x = a.vector()
        return a.send({"op": "gaussian_batch", "matrices": [matrix, sealed(identity(4))],
                       "items": [{"source": x, "matrix": 0, "rho": "1/4"}, {"source": x, "matrix": 1, "rho": "1/4"}]})

    assert_within_charged_sensitivity([32768, 7, 32768, 7], 0, send, ZCDP(1), remote)


def test_partitions_of_cancelling_matrices_are_charged_for_what_floats_release(remote):
    def send(a):
        parts = a.send({"op": "split_by_partition", "source": a.vector(),
                        "partition": {"labels": array([0, 0, 0, 0, 1, 1], "int64"), "groups": 2}})["parts"]
        return a.send({"op": "laplace", "source": parts[0]["source"],
                       "matrix": SEALED_CANCELLING, "epsilon": "1"})

    assert_within_charged_sensitivity([32768, 7, 32768, 7, 3, 2], 0, send, PureDP(1), remote)


def test_weights_near_the_float_limit_release_only_finite_noised_values(remote):
    matrix = stack(sealed(dense([[1.0]]), weight=2.0**1023), sealed(dense([[-1.0]]), weight=2.0**1023),
                   sealed(identity(1)))

    def send(a):
        return a.send({"op": "laplace", "source": a.vector(), "matrix": matrix, "epsilon": "1"})

    assert_within_charged_sensitivity([1], 0, send, PureDP(1), remote)


# ---- 2. failures are decided before the charge, from public quantities only ----------------


def test_an_answer_too_large_for_the_release_grid_fails_alike_on_neighbours_and_costs_nothing(remote):
    def send(a):
        return a.send({"op": "laplace", "source": a.vector(), "matrix": sealed(identity(1)), "epsilon": str(2**30)})

    assert_within_charged_sensitivity([4095], 0, send, PureDP(2**31), remote)


def test_an_overflowing_product_fails_alike_on_neighbours(remote):
    matrix = sealed(dense([[2.0**-1000]]), dense([[2.0**1023]]))

    def send(a):
        return a.send({"op": "laplace", "source": a.vector(), "matrix": matrix, "epsilon": "1"})

    assert_within_charged_sensitivity([1], 0, send, PureDP(2**40), remote)


def test_a_worst_approx_with_overflowing_scores_fails_alike_and_costs_nothing(remote):
    def send(a):
        return a.send({"op": "worst_approx", "source": a.vector(), "workload": sealed(dense([[2.0**1023], [1.0]])),
                       "estimate": array([0.0]), "epsilon": "1"})

    assert_within_charged_sensitivity([1], 0, send, PureDP(10), remote)


def test_a_selection_at_an_unsamplable_rate_fails_alike_and_costs_nothing(remote):
    """Entries of 1e-305 make epsilon / (2 sensitivity) about 1e305: refused before the charge, not after."""

    def send(a):
        return a.send({"op": "worst_approx", "source": a.vector(), "workload": sealed(dense([[1e-305], [1e-305]])),
                       "estimate": array([0.0]), "epsilon": "1"})

    assert_within_charged_sensitivity([1], 0, send, PureDP(10), remote)


# ---- 3. numbers are bounded before any work ----------------------------------------------


def test_a_sixty_byte_epsilon_is_refused_at_once_naming_the_limit(remote):
    a = analyst([5, 5], remote=remote)
    try:
        x = a.vector()
        reply = a.send({"op": "laplace", "source": x, "matrix": sealed(identity(2)), "epsilon": "1e-10000000"})
        assert a.work() <= REFUSED_WORK
        assert reply["kind"] == "error" and ("digit" in reply["message"] or "exponent" in reply["message"])
    finally:
        a.close()


def test_charges_with_many_distinct_denominators_keep_every_reply_printable(remote):
    primes = [p for p in range(100_003, 400_000, 2) if all(p % d for d in range(3, int(p**0.5) + 1, 2))][:900]
    a = analyst([5, 5], PureDP(1), remote=remote)
    try:
        x = a.vector()
        for p in primes:
            reply = a.send({"op": "noisy_count", "source": x, "epsilon": f"1/{p}"})
            assert reply["kind"] == "answer"
        assert a.send({"op": "budget"})["kind"] == "budget"
        assert a.send({"op": "lineage"})["kind"] == "lineage"
        assert a.send({"op": "transcript"})["kind"] == "transcript"
    finally:
        a.close()


# ---- 4. memory is bounded before any allocation; sources can be released -----------------


def test_a_tiny_transform_cannot_build_a_huge_vector(remote):
    a = analyst([5, 5], remote=remote)
    try:
        x = a.vector()
        reply = a.send({"op": "transform", "source": x, "matrix": sealed(ones(50_000_000, 2))})
        assert reply["kind"] == "error" and "limit" in reply["message"] and "50000000" in reply["message"]
    finally:
        a.close()


def test_a_partition_into_a_trillion_groups_is_refused_at_once(remote):
    a = analyst([5, 5], remote=remote)
    try:
        x = a.vector()
        for op in ("split_by_partition", "reduce_by_partition"):
            reply = a.send({"op": op, "source": x, "partition": {"labels": array([0, 0], "int64"), "groups": 10**12}})
            assert reply["kind"] == "error" and "limit" in reply["message"]
        assert a.work(2) <= 2 * REFUSED_WORK
    finally:
        a.close()


def test_quadratic_selections_cannot_stall_the_kernel(remote):
    """A 2 kB request for PHP on 128 intervals of 8,192 cells, or StructureFirst with 8,192 buckets, would
    take minutes: refused at once, naming the limit."""
    a = analyst(np.r_[np.zeros(2**20 - 1, dtype=np.int64), 5], remote=remote)
    try:
        x = a.vector()
        reply = a.send({"op": "split_points", "source": x, "epsilon": "1",
                        "intervals": [[i * 8192, (i + 1) * 8192] for i in range(128)]})
        assert reply["kind"] == "error" and "limit" in reply["message"], reply
        small = a.send({"op": "transform", "source": x, "matrix": sealed({"kind": "ones", "rows": 8192, "cols": 2**20})})
        reply = a.send({"op": "structure_first", "source": small["source"], "epsilon": "1", "buckets": 8192,
                        "bound": 10.0})
        assert reply["kind"] == "error" and "limit" in reply["message"], reply
        assert a.work() <= REFUSED_WORK  # StructureFirst's, and PHP's before the transform
        assert Fraction(a.spent()["epsilon"]) == 0
    finally:
        a.close()


def test_vectorizing_a_huge_domain_is_refused_with_the_size_and_limit(remote):
    domain = Domain.from_sizes([10**6, 10**6], names=["a", "b"])
    kernel = Kernel(load_table({"a": np.array([1, 2]), "b": np.array([3, 4])}, domain), PureDP(1))
    a = Analyst(kernel, remote)
    try:
        reply = a.send({"op": "vectorize", "source": a.root()})
        assert reply["kind"] == "error" and "limit" in reply["message"] and "1000000000000" in reply["message"]
    finally:
        a.close()


class _Counts(TableBackend):
    """A table given by its histogram (counts beyond 2^31 without building the rows)."""

    def __init__(self, counts):
        self.counts = np.asarray(counts, dtype=np.int64)

    @property
    def domain(self):
        return Domain.from_sizes([self.counts.size], names=["a"])

    def histogram(self, attributes, predicate=None):
        return self.counts if attributes else self.counts.sum()


def test_whether_the_memory_limit_refuses_does_not_depend_on_the_counts(remote):
    """Small counts are held as int32, large ones as int64: the memory check must not see the difference."""
    outcomes = []
    for counts in ([1, 0], [2**33, 0]):
        kernel = Kernel(_Counts(counts), PureDP(1), max_rows=2**40, limits=Limits(memory=3 * SOURCE_BYTES + 8 * 2 * 2))
        a = Analyst(kernel, remote)
        try:
            outcomes.append([a.send({"op": "vectorize", "source": a.root()})["kind"] for _ in range(3)])
        finally:
            a.close()
    assert outcomes[0] == outcomes[1] == ["source", "source", "error"]


def test_a_released_source_frees_its_data_and_keeps_its_charges(remote):
    a = analyst([5, 5], remote=remote)
    try:
        x = a.vector()
        child = a.send({"op": "transform", "source": x, "matrix": sealed(identity(2))})["source"]
        a.send({"op": "noisy_count", "source": child, "epsilon": "1/4"})
        reply = a.send({"op": "release", "source": x})
        assert reply["kind"] == "sources" and {s["source"] for s in reply["sources"]} == {x, child}, reply
        again = a.send({"op": "noisy_count", "source": child, "epsilon": "1/4"})
        assert again["error"] == "unknown_source" and "released" in again["message"]
        assert Fraction(a.spent()["epsilon"]) == Fraction(1, 4)
        graph = a.send({"op": "lineage"})["graph"]
        assert [n["released"] for n in graph["nodes"] if n["id"] == a.root()] == [2]  # counted by their parent
        assert a.send({"op": "release", "source": a.root()})["error"] == "invalid_request"
    finally:
        a.close()


# ---- 5. exact noise: the far tail is reachable ---------------------------------------------


class _SmallestFirst:
    """A noise source whose first word is 0 (the smallest uniform), then secure words."""

    is_seeded = True

    def __init__(self):
        self.first = True

    def words(self, size):
        import os

        out = np.frombuffer(os.urandom(8 * size), dtype=np.uint64).copy()
        if self.first:
            out[0], self.first = 0, False
        return out


def test_the_discrete_laplace_reaches_beyond_forty_scales():
    from ektelo_ng.kernel import noise

    scale = 64
    sample = noise.discrete_laplace(_SmallestFirst(), scale, 1)
    assert abs(int(sample[0])) >= 40 * scale


# ---- requests that would make the kernel keep or scan too much (issue 16's red team) ----------------------------
def test_a_huge_request_leaves_a_small_transcript_entry(remote):
    a = analyst([3, 4], remote=remote)
    try:
        huge = {"op": "split_points", "source": "0" * 32, "epsilon": "1",
                "intervals": [[100_000 + i, 200_000 + i] for i in range(1 << 13)]}  # the most the protocol takes
        assert a.send(huge)["error"] == "unknown_source"
        entry = a.send({"op": "transcript"})["entries"][-1]
        assert "intervals" not in entry and entry["source"] == "0" * 32 and len(json.dumps(entry)) < 400  # refused
        for bulky in ({"op": "worst_approx", "source": "0" * 32, "epsilon": "1", "workload": sealed(identity(2)),
                       "estimate": {"dtype": "float64", "shape": [1] * 100_000, "base64": "AAAAAAAAAAA="}},
                      {"op": "project", "source": "0" * 32, "attributes": ["a" * 1_000_000]}):
            assert a.send(bulky)["error"] in ("unknown_source", "invalid_request")  # refused, parsed or not
            assert len(json.dumps(a.send({"op": "transcript"})["entries"][-1])) < 1000
        assert a.send({"op": "no such op"})["error"] == "invalid_request"  # malformed requests are recorded too
        assert [e["outcome"] for e in a.send({"op": "transcript"})["entries"][-3:]] == [
            "unknown_source", "ok", "invalid_request"]
    finally:
        a.close()


def test_the_transcript_keeps_its_newest_entries_only(monkeypatch):
    monkeypatch.setattr("ektelo_ng.kernel.service.TRANSCRIPT_BYTES", 1000)
    a = analyst([3, 4])
    for _ in range(12):
        a.send({"op": "budget"})
    entries = a.send({"op": "transcript"})["entries"]
    assert len(json.dumps(entries)) <= 1000 and len(entries) > 2  # the transcript request itself is recorded after
    assert [e["seq"] for e in entries] == list(range(12 - len(entries), 12))


def test_a_predicate_with_too_many_nodes_is_refused_before_any_row_is_read(remote):
    a = analyst([3, 4], remote=remote)
    try:
        leaf = {"kind": "compare", "attribute": "a", "op": "==", "value": 1}
        reply = a.send({"op": "where", "source": a.root(), "predicate": {"kind": "or", "terms": [leaf] * 2000}})
        assert reply["error"] == "invalid_request" and "at most 64" in reply["message"]  # refused as it is read
        assert a.work() <= REFUSED_WORK
        source = a.root()
        for _ in range(64):  # one node each: the chain's own nodes count with its parents'
            reply = a.send({"op": "where", "source": source, "predicate": leaf})
            if reply["kind"] == "error":
                break
            source = reply["source"]
        assert reply["error"] == "invalid_request" and "more than 64 nodes" in reply["message"]
        many = {"kind": "in", "attribute": "a", "values": list(range(70_000))}
        assert a.send({"op": "where", "source": a.root(), "predicate": many})["error"] == "invalid_request"
    finally:
        a.close()


def test_a_frame_of_a_million_bad_items_is_refused_quickly(remote):
    a = analyst([3, 4], remote=remote)
    try:
        start = time.perf_counter()
        reply = a.send({"op": "split_points", "source": "0" * 32, "epsilon": "1", "intervals": [[-1, -1]] * 1_000_000})
        assert reply["error"] == "invalid_request" and time.perf_counter() - start < 5.0
    finally:
        a.close()


def test_predicate_values_far_outside_the_domain_count_like_any_outsider(remote):
    a = analyst([3, 4, 5], remote=remote)
    try:
        def count(values):
            where = a.send({"op": "where", "source": a.root(),
                            "predicate": {"kind": "in", "attribute": "a", "values": values}})
            return a.send({"op": "vectorize", "source": where["source"]})

        start = time.perf_counter()
        assert count([2**70, -(2**70), 1] + list(range(3, 1000)))["kind"] == "source"
        assert time.perf_counter() - start < 2.0  # (the kernel counts no steps for a predicate's values: timed)
        in_nodes = a.send({"op": "where", "source": a.root(),
                           "predicate": {"kind": "in", "attribute": "a", "values": list(range(1 << 16))}})
        assert in_nodes["error"] == "invalid_request" and "64 nodes" in in_nodes["message"]  # 1 + 64 per 2^16 values
    finally:
        a.close()


@pytest.mark.parametrize("op, items, one_pass, scans", [
    ("vectorize_many", "attributes", [["a"], ["b"]], 1092),  # 26 histograms of one attribute and 41 nodes
    ("privbayes_select", "candidates", [["a", ["b"]], ["b", []]], 1105),  # one of the pair reads two attributes
])
def test_many_histograms_of_a_filtered_table_are_refused_by_their_scans(remote, op, items, one_pass, scans):
    """26 histograms of a 41-node filtered table would read its columns over 1,024 times, the limit set here:
    refused before any row is read, charging nothing; 24 are made."""
    domain = Domain.from_sizes([4, 4], names=["a", "b"])
    table = load_table({"a": np.array([1, 2]), "b": np.array([3, 0])}, domain)
    a = Analyst(Kernel(table, PureDP(1), limits=Limits(scans=1024)), remote)
    try:
        leaf = {"kind": "compare", "attribute": "a", "op": "<", "value": 3}
        where = a.send({"op": "where", "source": a.root(), "predicate": {"kind": "or", "terms": [leaf] * 40}})
        extra = {"epsilon": "1/2"} if op == "privbayes_select" else {}
        reply = a.send({"op": op, "source": where["source"], items: one_pass * 13, **extra})
        assert reply["error"] == "invalid_request" and f"{scans} times" in reply["message"], reply
        assert Fraction(a.spent()["epsilon"]) == 0
        assert a.send({"op": op, "source": where["source"], items: one_pass * 12, **extra})["kind"] != "error"
    finally:
        a.close()


def test_structure_first_work_is_the_triangle_its_dynamic_program_computes(remote):
    """The work limit counts the SSE table, (n + 1)^2 cells, and (n + 1)(n + 257) / 2 pairs per bucket: with a limit
    set between 21 and 22 buckets on 200 cells, 21 are measured and 22 refused at once, naming the limit, with
    nothing charged; the work measured stays within the model."""
    from ektelo_ng.kernel.mechanisms import structure_first

    counts = np.random.default_rng(0).integers(0, 9, 200)
    limit = structure_first.check(200, 21).steps
    assert structure_first.check(200, 22).steps > limit
    entries = []
    kernel = Kernel(load_table({"a": np.repeat(np.arange(200), counts)}, Domain.from_sizes([200], names=["a"])),
                    PureDP(2), limits=Limits(work=limit), journal=entries.append)
    a = Analyst(kernel, remote)
    try:
        x = a.vector()
        refused = a.send({"op": "structure_first", "source": x, "epsilon": "1", "buckets": 22, "bound": 10.0})
        assert refused["kind"] == "error" and "limit" in refused["message"], refused
        assert Fraction(a.spent()["epsilon"]) == 0
        taken = a.send({"op": "structure_first", "source": x, "epsilon": "1", "buckets": 21, "bound": 10.0})
        assert taken["kind"] == "splits" and len(taken["indices"]) == 20, taken
        assert Fraction(a.spent()["epsilon"]) == 1
        assert limit / 4 <= entries[-2]["work"] <= limit  # the measured work, against the model
    finally:
        a.close()


@pytest.mark.parametrize("bound", [1e-300, 5e-324, 1e300, 1.7e308])
def test_structure_first_at_the_float_limits_of_its_bound_behaves_alike_on_neighbours(remote, bound):
    """A bound near the float limits: either refused before the charge on both neighbours alike (scores that
    could overflow), or answered on both with the same charge; never a data-dependent failure."""
    counts = [0, 3, 7, 7, 1, 0, 9, 2]

    def send(a):
        return a.send({"op": "structure_first", "source": a.vector(), "epsilon": "1/2", "buckets": 3, "bound": bound})

    (first, spent_first), (second, spent_second) = neighbour_replies(counts, 6, send, PureDP(1), remote)
    assert first["kind"] == second["kind"] and spent_first == spent_second, (first, second)
    if first["kind"] == "error":
        assert first["message"] == second["message"] and Fraction(spent_first["epsilon"]) == 0
    else:
        assert first["kind"] == "splits" and Fraction(spent_first["epsilon"]) == Fraction(1, 2)


def test_structure_first_holds_no_more_than_its_sse_table():
    """Memory of one request: the (n + 1)^2 table of SSE costs, the bucket levels and a few 256-row blocks
    (interval_sse's temporaries): nothing quadratic besides the table (a second one would break the bound)."""
    import tracemalloc

    n, buckets = 1024, 103  # DPBench's k = ceil(n / 10)
    a = analyst(np.random.default_rng(1).integers(0, 50, n))
    try:
        x = a.vector()
        tracemalloc.start()
        reply = a.send({"op": "structure_first", "source": x, "epsilon": "1", "buckets": buckets, "bound": 1e4})
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert reply["kind"] == "splits"
        assert peak < 8 * ((n + 1) ** 2 + buckets * (n + 1) + 6 * 256 * (n + 1)) + 2**20, peak
    finally:
        a.close()


@pytest.mark.parametrize("rho", ["1e-20", "3e-17", "0.5", "1e15", "1e20"])
def test_laplace_in_a_zcdp_session_at_the_largest_fitting_epsilon_never_overspends(remote, rho):
    """What the Advised plan sends for a Laplace pick under zCDP: epsilon = epsilon_within_zcdp(rho), at the ends of
    the kernel's amounts. It is charged epsilon^2 / 2 <= rho, quickly; one grid step more is refused, charging
    nothing."""
    from ektelo_ng.operators.privacy import epsilon_within_zcdp

    total = ZCDP(rho).rho
    epsilon = epsilon_within_zcdp(total)
    a = analyst([5, 3], budget=ZCDP(rho), remote=remote)
    try:
        x = a.vector()
        larger = str(epsilon * (1 + Fraction(1, 10**12)))
        over = a.send({"op": "laplace", "source": x, "matrix": sealed(identity(2)), "epsilon": larger})
        assert over["kind"] == "error" and Fraction(a.spent()["rho"]) == 0
        reply = a.send({"op": "laplace", "source": x, "matrix": sealed(identity(2)), "epsilon": str(epsilon)})
        assert reply["kind"] != "error", reply
        # the kernel reads epsilon down onto its amount grid, then charges epsilon^2 / 2 rounded up
        assert epsilon**2 / 2 * (1 - Fraction(1, 10**12)) <= Fraction(a.spent()["rho"]) <= total
    finally:
        a.close()


# ---- PrivBayes's network step (docs/privacy/privbayes.md) ------------------------------------


class _CountsTable(TableBackend):
    """A table given by its full histogram over ``sizes`` (huge counts without building rows)."""

    def __init__(self, counts):
        self.counts = np.asarray(counts, dtype=np.int64)

    @property
    def domain(self):
        return Domain.from_sizes(list(self.counts.shape), names=[f"a{i}" for i in range(self.counts.ndim)])

    def histogram(self, attributes, predicate=None):
        others = tuple(i for i in range(self.counts.ndim) if i not in attributes)
        return self.counts.sum(axis=others)


def test_privbayes_select_refuses_another_analysts_table_and_charges_nothing(remote):
    owner, intruder = analyst([3, 4], remote=remote), analyst([3, 4], remote=remote)
    try:
        reply = intruder.send({"op": "privbayes_select", "source": owner.root(), "candidates": [["a", []]],
                               "epsilon": "1"})
        assert reply["error"] == "unknown_source"
        assert Fraction(owner.spent()["epsilon"]) == Fraction(intruder.spent()["epsilon"]) == 0
    finally:
        owner.close()
        intruder.close()


@pytest.mark.parametrize("sizes, candidates, says", [
    ([10**6, 10**6], [["a0", ["a1"]]], "1000000000000 cells"),  # one joint table over the cell limit
    ([4096, 4096, 2], [["a0", ["a1"]]] * 2048, "steps of work"),  # 2048 tables of 2^24 cells to score
])
def test_privbayes_candidates_too_large_to_count_are_refused_at_once_charging_nothing(remote, sizes, candidates, says):
    domain = Domain.from_sizes(sizes, names=[f"a{i}" for i in range(len(sizes))])
    kernel = Kernel(load_table({name: np.array([1, 0]) for name in domain.names}, domain), PureDP(1))
    a = Analyst(kernel, remote)
    try:
        reply = a.send({"op": "privbayes_select", "source": a.root(), "candidates": candidates, "epsilon": "1"})
        assert a.work() <= REFUSED_WORK
        assert reply["error"] == "invalid_request" and says in reply["message"], reply
        assert Fraction(a.spent()["epsilon"]) == 0
    finally:
        a.close()


@pytest.mark.parametrize("n", [2**31 - 2, 2**52 - 4])
def test_privbayes_select_past_int64_products_behaves_alike_on_neighbours(remote, n):
    """Tables of about 2^31 and 2^52 records, where the score's integers leave int64 on one neighbour and not
    the other (or reach the kernel's largest bound): both are answered, with the same charge."""
    outcomes = []
    for extra in (0, 1, 2):
        counts = np.array([[n // 2, 0], [0, n - n // 2 + extra]], dtype=np.int64)
        kernel = Kernel(_CountsTable(counts), PureDP(1), max_rows=2**52 - 1 if n > 2**32 else 2**32, seed=1)
        a = Analyst(kernel, remote)
        try:
            reply = a.send({"op": "privbayes_select", "source": a.root(), "epsilon": "1/2",
                            "candidates": [["a0", ["a1"]], ["a1", []]]})
            outcomes.append((reply["kind"], a.spent()["epsilon"]))
        finally:
            a.close()
    assert outcomes == [("selected", "1/2")] * 3, outcomes


def test_privbayes_scoring_work_and_memory_do_not_depend_on_the_record_count():
    """Neighbours of 2^31 - 1 and 2^31 records (where integer products leave int64), one 2^16-cell candidate: the
    kernel's peak memory while scoring is the same (an exact path that switched to Python integers here took 6
    times the memory and 75 times the time, found by a red-team pass)."""
    import tracemalloc

    peaks = []
    for n in (2**31 - 1, 2**31):
        counts = np.full((256, 256), n // 65536, dtype=np.int64)
        counts[0, 0] += n - counts.sum()
        a = Analyst(Kernel(_CountsTable(counts), PureDP(1), max_rows=2**32, seed=1), remote=False)
        try:
            request = {"op": "privbayes_select", "source": a.root(), "epsilon": "1/2", "candidates": [["a0", ["a1"]]]}
            tracemalloc.start()
            reply = a.send(request)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            assert reply["kind"] == "selected" and Fraction(a.spent()["epsilon"]) == Fraction(1, 2), reply
        finally:
            a.close()
    assert abs(peaks[1] - peaks[0]) <= 0.05 * peaks[0], f"peak {peaks[0]} bytes at 2^31 - 1 records, {peaks[1]} at 2^31"


def test_privbayes_scoring_work_is_limited_before_any_row_is_read(remote):
    """64 steps a scored cell and 2^16 a candidate: under a work limit of 2^21, 16 candidates of 1024 cells (2^20 +
    2^20 steps) are scored and 17 refused at once, naming the limit, with nothing charged."""
    domain = Domain.from_sizes([32, 32], names=["a", "b"])
    kernel = Kernel(load_table({"a": np.array([1, 2]), "b": np.array([3, 0])}, domain), PureDP(2),
                    limits=Limits(work=2**21))
    a = Analyst(kernel, remote)
    try:
        request = {"op": "privbayes_select", "source": a.root(), "epsilon": "1"}
        refused = a.send({**request, "candidates": [["a", ["b"]]] * 17})
        assert refused["error"] == "invalid_request" and "limit" in refused["message"], refused
        assert Fraction(a.spent()["epsilon"]) == 0
        assert a.send({**request, "candidates": [["a", ["b"]]] * 16})["kind"] == "selected"
    finally:
        a.close()


def _target_analyst(remote, target_present: bool) -> tuple[Analyst, dict]:
    """An analyst and its privbayes_select on the records a quasi-identifier (a = 5) isolates: only the target has
    it, so the filtered table holds 1 record or 0. The candidate's table has 2^20 cells: enough that skipping the
    scoring showed (replies 10 to 16 times sooner without the person, in process and served, with the skip back)."""
    rng = np.random.default_rng(3)
    a_column, b_column = rng.integers(6, 1024, 500), rng.integers(0, 1024, 500)
    if target_present:
        a_column, b_column = np.append(a_column, 5), np.append(b_column, 7)
    domain = Domain.from_sizes([1024, 1024], names=["a", "b"])
    a = Analyst(Kernel(load_table({"a": a_column, "b": b_column}, domain), PureDP(1), seed=1), remote)
    where = a.send({"op": "where", "source": a.root(), "predicate": {"kind": "compare", "attribute": "a", "op": "==",
                                                                      "value": 5}})
    return a, {"op": "privbayes_select", "source": where["source"], "epsilon": "1/100", "candidates": [["a", ["b"]]]}


def test_privbayes_scores_an_empty_filtered_table_with_the_same_work(remote):
    """A where clause isolating one person (a quasi-identifier) leaves 1 record or 0: the kernel skipped the whole
    scoring of an empty table (score 0, no division), so the reply came about 20 times sooner and with a fraction
    of the memory, telling whether the person is in the table at a charge of 1/100 (red-team finding). The least
    of 7 interleaved times of each must agree within 2x (the traced peak memory, in process, within 5%)."""
    import tracemalloc

    pairs = [_target_analyst(remote, present) for present in (True, False)]
    try:
        times = [[], []]
        for _ in range(7):
            for (a, request), spent in zip(pairs, times):
                start = time.perf_counter()
                assert a.send(request)["kind"] == "selected"
                spent.append(time.perf_counter() - start)
        present, absent = min(times[0]), min(times[1])
        assert max(present, absent) < 2 * min(present, absent), f"{present:.3f} s with the target, {absent:.3f} s without"
        if not remote:
            peaks = []
            for a, request in pairs:
                tracemalloc.start()
                assert a.send(request)["kind"] == "selected"
                peaks.append(tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
            assert abs(peaks[0] - peaks[1]) <= 0.05 * peaks[0], peaks
    finally:
        for a, _ in pairs:
            a.close()


@pytest.mark.parametrize("op", ["privbayes_select", "structure_first", "split_points"])
def test_a_request_beyond_the_budget_is_refused_before_any_data_is_read(remote, op):
    """An analyst whose budget was spent still had the kernel compute a request's exact values or scores before
    the charge refused it: PrivBayes's scores of a 2^24-cell table, StructureFirst's dynamic program and PHP's split
    scores on 8,192 cells, about a second each, and every timing side channel of that work (an empty table, the
    sum's work, subnormal arithmetic) free and repeatable. Now every measurement's charges are planned before its
    data is read: refused at once, charging nothing; the same request within the budget takes many times longer
    (the test's power)."""
    domain = Domain.from_sizes([8192, 2048], names=["a", "b"])
    kernel = Kernel(load_table({"a": np.array([1, 2]), "b": np.array([3, 0])}, domain), PureDP(1))
    a = Analyst(kernel, remote)
    try:
        if op == "privbayes_select":
            request = {"op": op, "source": a.root(), "epsilon": "1/2", "candidates": [["a", ["b"]]]}
        else:
            column = a.send({"op": "project", "source": a.root(), "attributes": ["a"]})["source"]
            x = a.send({"op": "vectorize", "source": column})["source"]
            request = {"op": op, "source": x, "epsilon": "1/2", "buckets": 3, "bound": 100.0} if op == "structure_first" \
                else {"op": op, "source": x, "epsilon": "1/2", "intervals": [[0, 8192]]}
        start = time.perf_counter()
        assert a.send(request)["kind"] in ("selected", "splits")
        afforded = time.perf_counter() - start
        assert a.send({"op": "noisy_count", "source": a.root(), "epsilon": "1/2"})["kind"] == "answer"
        took = []
        for _ in range(3):
            start = time.perf_counter()
            refused = a.send(request)
            took.append(time.perf_counter() - start)
            assert refused["error"] == "budget_exceeded", refused
        assert min(took) < min(0.1, afforded / 5), f"refused after {min(took):.3f} s; the work took {afforded:.3f} s"
        assert Fraction(a.spent()["epsilon"]) == 1
    finally:
        a.close()
