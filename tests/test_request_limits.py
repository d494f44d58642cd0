"""Issue 46's served-kernel attacks, through the JSON protocol (in process and over the served socket).

1. A request of millions of small JSON values (57 MiB in process, 16 MiB served) cost 3.5 s and +1.6 GB of parsing
   before its list was refused: its values are bounded before it is parsed, and the in-process text limit is the
   served frame's.
2. ``budget``, ``lineage`` and ``transcript`` over 65,535 free sources cost 0.9 s each and replied with up to 13 MiB,
   counted as no work: they are paged, and a page's work is counted from the public number of sources.
3. Every analyst's kernel held up to its own memory limit, with no cap on them all: one server-wide memory budget
   that every analyst's sources and requests draw on, refusing before any work, from public sizes only.
"""

from __future__ import annotations

import json
import tracemalloc
from fractions import Fraction
from unittest import mock

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ektelo_ng as ek
from ektelo_ng.gateway.gatekeeper import Gatekeeper
from ektelo_ng.gateway.owner import init_service
from ektelo_ng.gateway.server import ServerLimits
from ektelo_ng.kernel import protocol as p
from ektelo_ng.kernel import service
from ektelo_ng.kernel.domain import Domain
from ektelo_ng.kernel.limits import BYTE_STEPS, SKIP_STEPS, SOURCE_BYTES, SOURCE_STEPS, Limits, Memory
from ektelo_ng.kernel.privacy import PureDP
from ektelo_ng.kernel.table import load_table

from .test_adversarial import array, identity, remote  # noqa: F401  (remote: the fixture)
from .test_hostile_analyst import journaled, spent_analyst
from .test_service import measure, running


@pytest.fixture
def folder(tmp_path):
    """pytest's own folder (short enough for a unix socket), left for pytest to clean: an analyst's ledger connection
    may still be closing when the test ends."""
    return tmp_path


class _CountingParser:
    """The kernel's request parser, counting the texts it is given."""

    def __init__(self, adapter):
        self.adapter, self.calls = adapter, 0

    def validate_json(self, text):
        self.calls += 1
        return self.adapter.validate_json(text)


@pytest.fixture
def parser(monkeypatch) -> _CountingParser:
    counting = _CountingParser(p.RequestAdapter)
    monkeypatch.setattr(p, "RequestAdapter", counting)
    return counting


def zeros(source: str, count: int) -> str:
    """A ``choose_partition`` of ``count`` cuts: about two bytes of text for each JSON value it holds."""
    return '{"op": "choose_partition", "source": "%s", "penalty": 0, "epsilon": "1", "cuts": [%s]}' % (
        source, ",".join(["0"] * count))


def send_text(a, text: str) -> dict:
    """Send raw JSON text, in process or as one frame, with the peak of Python's traced memory while it is answered."""
    tracemalloc.start()
    try:
        if a._server is None:
            reply = a.kernel.handle_json(text)
        else:
            from ektelo_ng.gateway.wire import read_frame, write_frame

            write_frame(a._sock, text.encode())
            reply = read_frame(a._sock, 1 << 30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {**json.loads(reply), "peak": peak}


# ---- 1. a bound on the JSON values, checked before parsing --------------------------------------------------------


def test_millions_of_small_values_are_refused_before_they_are_parsed(remote, parser):
    """8 million one-byte values in a 15 MiB request (within the served frame, and one object): before, pydantic
    built every one of them (about 50 bytes each) before the list's length was checked."""
    a = spent_analyst(remote)
    try:
        text = zeros(a.root(), 8_000_000)
        assert len(text) < ServerLimits().frame
        before = parser.calls
        reply = send_text(a, text)
        assert reply["kind"] == "error" and reply["error"] == "invalid_request", reply
        assert "values" in reply["message"] and "request_values" in reply["message"], reply["message"]
        assert parser.calls == before, "the request was parsed before its values were counted"
        assert reply["peak"] <= 5 * len(text), f"{reply['peak']} bytes held for a {len(text)}-byte request"
        assert a.journal[-1]["outcome"] == "invalid_request" and a.journal[-1]["work"] == 0
    finally:
        a.close()


def test_the_in_process_text_limit_is_the_served_frames(parser):
    """57 MiB in process (the served kernel reads 16 MiB frames at most) cost 3.5 s and +1.6 GB before."""
    assert Limits().request_bytes <= ServerLimits().frame
    a = spent_analyst(False)
    text = zeros(a.root(), 30_000_000)
    before = parser.calls
    reply = send_text(a, text)
    assert reply["kind"] == "error" and "request_bytes" in reply["message"], reply
    assert parser.calls == before and reply["peak"] <= 2 * len(text)


@pytest.mark.parametrize("structure", ["[0]", '{"a": 0}', "[[]]", '"a"'])
def test_every_value_is_counted_whatever_holds_it(structure, parser):
    """Lists, objects, nested empty lists and strings: each value needs a '[', '{', ',' or ':' before it."""
    a = journaled([1], limits=Limits(request_values=1000))
    text = '{"op": "budget", "x": [%s]}' % ",".join([structure] * 1000)
    reply = json.loads(a.kernel.handle_json(text))
    assert reply["kind"] == "error" and "values" in reply["message"], reply
    assert parser.calls == 0
    few = json.loads(a.kernel.handle_json('{"op": "budget", "x": [%s]}' % ",".join([structure] * 100)))
    assert few["kind"] == "error" and "malformed" in few["message"] and parser.calls == 1  # parsed, then refused


def test_values_in_strings_are_counted_too(parser):
    """Structural characters in strings are counted as well: an over-count, so the bound holds without parsing."""
    a = journaled([1], limits=Limits(request_values=64))
    reply = json.loads(a.kernel.handle_json(json.dumps({"op": "budget", "x": ",:[{" * 20})))
    assert reply["kind"] == "error" and "values" in reply["message"] and parser.calls == 0


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=3), inner, max_size=6),
                    max_leaves=60)


def built(value) -> int:
    """The Python objects a parse of ``value``'s JSON builds: every value, and every key."""
    if isinstance(value, dict):
        return 1 + sum(1 + built(v) for v in value.values())
    return 1 + sum(built(v) for v in value) if isinstance(value, list) else 1


@settings(max_examples=300, deadline=None)
@given(document=JSON, as_bytes=st.booleans())
def test_the_count_bounds_the_values_any_json_text_builds(document, as_bytes):
    """Every value but the first follows a '[', ',' or ':' (a key: its object's '{' or a ','): a text is refused
    whenever it builds more than one value over the limit, counted as text or as bytes."""
    text = json.dumps(document, ensure_ascii=False)
    text = text.encode() if as_bytes else text
    values = built(document)
    with pytest.raises(ValueError, match="request_values"):
        Limits(request_values=values - 2, request_objects=1 << 20).text(text)


# ---- 2. public state, paged and costed from the number of sources ------------------------------------------------


def many_sources(parts: int, remote: bool, limits: Limits = Limits()):
    """An analyst with no budget who holds ``parts`` + 4 sources, made for free (all but two in one split)."""
    a = spent_analyst(remote, counts=[1] * parts, limits=limits)
    labels = array(np.arange(parts), "int64")
    reply = a.send({"op": "split_by_partition", "source": a.vector(), "partition": {"labels": labels,
                                                                                   "groups": parts}})
    assert reply["kind"] == "parts", reply
    return a


def pages(a, op: str) -> list[dict]:
    """Every page of ``op``, with each reply's length in bytes and the work its journal entry counted."""
    out, cursor = [], 0
    while cursor is not None:
        text = json.dumps(a.send({"op": op, "cursor": cursor}))
        reply = json.loads(text)
        assert reply["kind"] == op, reply
        out.append({**reply, "bytes": len(text), "work": a.journal[-1]["work"]})
        cursor = reply["next"]
        assert len(out) < 1000
    return out


def test_public_state_over_sixty_thousand_free_sources_comes_in_bounded_counted_pages(monkeypatch):
    """61,440 parts of a split (free: no budget is needed) made ``budget`` and ``lineage`` cost 0.9 s and 4 to 13 MiB
    a reply, counted as no work, 200 times a second. Now each reply lists PAGE sources at most, its work is counted
    from the public number of sources before it is done, and the pages together are the whole state (served)."""
    from ektelo_ng.kernel import accountant

    spends = []
    original = accountant.Accountant.spent
    monkeypatch.setattr(accountant.Accountant, "spent", lambda self, node=None: spends.append(1) or original(self, node))
    a = many_sources(61_440, remote=True)
    try:
        graph, sources = a.kernel._sources.graph, len(a.kernel._sources.graph)
        assert sources == 61_444
        replies = {}
        for op in ("budget", "lineage"):
            spends.clear()
            read = replies[op] = pages(a, op)
            assert len(read) == -(-sources // service.PAGE)
            for i, page in enumerate(read):  # the sources listed and those skipped, counted
                assert page["bytes"] <= 320 * service.PAGE, page["bytes"]  # a few hundred bytes a source
                listed = min(service.PAGE, sources - i * service.PAGE)
                assert page["work"] >= SOURCE_STEPS * listed + SKIP_STEPS * i * service.PAGE, page["work"]
            assert len(spends) <= len(read) * (service.PAGE + 2), "every page read every source's spend"
        budget, lineage = replies["budget"], replies["lineage"]
        listed = {name for page in budget for name in page["per_source"]}
        assert listed == {n for n, d in graph.nodes(data=True) if d["kind"] != "partition"}
        assert {page["spent"]["epsilon"] for page in budget} == {"1"}
        read = nx.DiGraph()
        for page in lineage:
            read.update(nx.node_link_graph(page["graph"], edges="links"))
        assert {(u, v): d for u, v, d in read.edges(data=True)} == {(u, v): d for u, v, d in graph.edges(data=True)}
        assert {n: {k: v for k, v in d.items() if k != "spent"} for n, d in read.nodes(data=True)} == \
            dict(graph.nodes(data=True))
        assert read.nodes[a.root()]["spent"] == "1"
    finally:
        a.close()


def test_a_page_of_public_state_is_charged_against_the_work_limit(remote):
    """The same ``lineage`` page is refused over a small work limit when the analyst holds many sources, and
    answered when it holds few: its cost is the public number of sources, checked before it is read."""
    small = Limits(work=SOURCE_STEPS * 64)
    a = many_sources(4096, remote, limits=small)
    try:
        reply = a.send({"op": "lineage"})
        assert reply["kind"] == "error" and "work" in reply["message"] and a.journal[-1]["work"] == 0, reply
    finally:
        a.close()
    a = spent_analyst(remote, limits=small)
    try:
        assert a.send({"op": "lineage"})["kind"] == "lineage"
    finally:
        a.close()


def test_the_transcript_comes_in_pages_of_bounded_bytes(remote, monkeypatch):
    monkeypatch.setattr(service, "TRANSCRIPT_PAGE", 1 << 12)
    a = journaled([5, 3], remote=remote)
    try:
        root = a.root()
        for _ in range(200):
            a.send({"op": "describe", "source": root})
        read = pages(a, "transcript")
        assert len(read) > 4
        for page in read:  # each entry's length counted, as it is written in the reply
            assert len(json.dumps(page["entries"])) <= (1 << 12) + 512
            assert page["work"] >= BYTE_STEPS * len(json.dumps(page["entries"])), page["work"]
        seqs = [entry["seq"] for page in read for entry in page["entries"]]
        assert seqs == list(range(seqs[0], seqs[-1] + 1)) and seqs[0] == 0  # every entry once, in order
    finally:
        a.close()


def test_the_client_reads_every_page_transparently(monkeypatch):
    monkeypatch.setattr(service, "TRANSCRIPT_PAGE", 1 << 12)
    session = ek.protect({"a": np.arange(3000) % 3000}, {"a": 3000}, ek.PureDP(1))
    x = session.source.vectorize()
    parts = x.split_by_partition(np.arange(3000))
    parts[0].laplace(ek.workload.Identity(1), Fraction(1, 2))
    lineage = session.lineage()
    assert lineage.number_of_nodes() == 3003 and lineage.number_of_edges() == 3002
    assert all("kind" in data for _, data in lineage.nodes(data=True))
    budget = session.budget
    assert len(budget.per_source) == 3002 and budget.per_source[parts[0].id] == ek.PureDP(Fraction(1, 2))
    for _ in range(100):
        session.request(p.Describe(source=parts[1].id))
    transcript = session.transcript()
    assert [e["seq"] for e in transcript] == list(range(len(transcript)))  # every entry once, in order
    assert len(transcript) > 100 and len(json.dumps(transcript)) > 4 * (1 << 12)


# ---- 3. one memory budget for the whole server -----------------------------------------------------------------


def spread(k: int) -> dict:
    """A 24 k-row integer transform of a 24-cell vector: ``k`` stacked copies, 192 k bytes held, stability k."""
    return {"kind": "stack", "blocks": [{"factors": [{"kind": "ones", "rows": k, "cols": 1}, identity(24)]}]}


def held(gate: Gatekeeper) -> int:
    """The bytes of every vector every analyst's kernel holds (numpy's own count)."""
    return sum(v.values.nbytes for k in gate._kernels.values() for v in k._sources._data.values()
               if hasattr(v, "values"))


def test_analysts_together_hold_no_more_than_the_servers_memory(folder):
    """Each analyst's kernel could hold its own memory limit, and the server had no cap over them all: a zero-budget
    analyst held 192 MiB per 213-byte transform, and 64 analysts 64 times the limit. Now the server's memory is one
    budget every analyst draws on, and a refusal comes before any work."""
    limit = 4 << 20
    with running(folder, "unix", server_memory=limit) as served:
        alice, bob = served.analyst("alice"), served.analyst("bob")
        assert measure(alice, "1")["kind"] == "answer"  # alice has no budget left
        x = alice.send({"op": "vectorize", "source": alice.send({"op": "root"})["source"]})["source"]
        made = []
        for _ in range(100):
            reply = alice.send({"op": "transform", "source": x, "matrix": spread(1024)})
            if reply["kind"] == "error":
                break
            made.append(reply["source"])
        assert reply["error"] == "invalid_request" and "server" in reply["message"], reply
        assert 3 <= len(made) <= limit // (8 * 24 * 1024 + SOURCE_BYTES), len(made)
        assert held(served.gate) <= limit and served.gate.memory.held <= limit
        y = bob.send({"op": "vectorize", "source": bob.send({"op": "root"})["source"]})
        bobs = bob.send({"op": "transform", "source": y["source"], "matrix": spread(1024)})
        assert bobs["kind"] == "error" and "server" in bobs["message"], bobs  # within bob's own limit
        entry = [e for e in served.audit() if e["analyst"] == "bob"][-1]
        assert entry["outcome"] == "invalid_request" and entry["work"] == 0
        assert held(served.gate) <= limit and served.gate.memory.held <= limit
        assert alice.send({"op": "release", "source": made[0]})["kind"] == "sources"
        assert bob.send({"op": "transform", "source": y["source"], "matrix": spread(1024)})["kind"] == "source"
        assert held(served.gate) <= limit and served.gate.memory.held <= limit


def test_a_new_analyst_is_told_the_server_is_full_not_cut_off(folder):
    with running(folder, "unix", server_memory=6 * SOURCE_BYTES) as served:
        alice, bob = served.analyst("alice"), served.analyst("bob")
        root = alice.send({"op": "root"})["source"]
        where = {"op": "where", "source": root, "predicate": {"kind": "compare", "attribute": "age", "op": ">=",
                                                              "value": 0}}
        assert [alice.send(where)["kind"] for _ in range(6)] == ["source"] * 5 + ["error"]  # all the server has
        reply = bob.send({"op": "root"})
        assert reply["kind"] == "error" and reply["error"] == "busy" and "memory" in reply["message"], reply
        assert bob.send({"op": "budget"})["kind"] == "error"  # still open, still refused
        last = alice.send({"op": "lineage"})["graph"]["nodes"][-1]["id"]  # alice can read her state, and release
        assert alice.send({"op": "release", "source": last})["kind"] == "sources"
        assert bob.send({"op": "root"})["kind"] == "source"


REQUESTS = st.lists(st.tuples(st.sampled_from(["alice", "bob", "carol"]),
                              st.sampled_from(["where", "vectorize", "transform", "release", "laplace", "split"]),
                              st.integers(1, 2000)), min_size=1, max_size=40)


def gatekeeper(tmp_path, counts, total: int) -> Gatekeeper:
    directory = init_service(tmp_path, PureDP(3), tls=False)
    for name in ("alice", "bob", "carol"):
        directory.add_analyst(name, Fraction(1))
    table = load_table({"a": np.repeat(np.arange(len(counts)), counts)}, Domain.from_sizes([len(counts)], ["a"]))
    return Gatekeeper(table, directory.ledger(), server_memory=total, seed=0)


def play(gate: Gatekeeper, requests) -> list[str]:
    """Each request's outcome (its kind, or its error and the limit named), checking the server's memory after each:
    what the analysts' kernels count equals what their sources hold, within the server's budget."""
    outcomes, made = [], {name: [] for name in ("alice", "bob", "carol")}

    def send(analyst: str, request: dict) -> dict:
        return json.loads(gate.handle(analyst, json.dumps(request)))

    for analyst, op, size in requests:
        root = send(analyst, {"op": "root"})
        if root["kind"] == "error":
            outcomes.append(root["error"])
            continue
        vectors = [s for s in made[analyst] if s[1] == "vector"]
        if not vectors and op in ("transform", "laplace", "split"):
            op = "vectorize"  # the analyst has no vector yet
        source = vectors[0][0] if vectors else None  # its first: a histogram, unless released
        request = {
            "where": {"op": "where", "source": root["source"], "predicate": {"kind": "compare", "attribute": "a",
                                                                          "op": ">=", "value": 0}},
            "vectorize": {"op": "vectorize", "source": root["source"]},
            "transform": {"op": "transform", "source": source, "matrix": {"kind": "stack", "blocks": [
                {"factors": [{"kind": "ones", "rows": size, "cols": 1}, identity(4)]}]}},
            "release": {"op": "release", "source": made[analyst][-1][0] if made[analyst] else root["source"]},
            "laplace": {"op": "laplace", "source": source, "epsilon": "1/64", "matrix": {"kind": "stack", "blocks": [
                {"factors": [{"kind": "ones", "rows": size, "cols": 4}]}]}},
            "split": {"op": "split_by_partition", "source": source, "partition": {
                "labels": array(np.arange(4) % 2, "int64"), "groups": 2}},
        }[op]
        reply = send(analyst, request)
        if reply["kind"] == "source":
            made[analyst].append((reply["source"], reply["source_kind"]))
        elif reply["kind"] == "sources":
            gone = {s["source"] for s in reply["sources"]}
            made[analyst] = [s for s in made[analyst] if s[0] not in gone]
        elif reply["kind"] == "parts":
            made[analyst] += [(s["source"], "vector") for s in reply["parts"]]
        outcomes.append(reply["kind"] if reply["kind"] != "error" else
                        f"{reply['error']}: {'server' in reply['message']} {'memory' in reply['message']}")
        kernels = gate._kernels.values()
        assert gate.memory.held == sum(k._sources.held for k in kernels) <= gate.memory.total
        assert all(k._sources.memory.held == k._sources.held for k in kernels)
        assert held(gate) <= gate.memory.held
    return outcomes


@settings(max_examples=25, deadline=None)
@given(requests=REQUESTS, total=st.integers(8 * SOURCE_BYTES, 40 * SOURCE_BYTES))
def test_the_servers_memory_is_what_the_analysts_sources_hold_and_refusals_never_depend_on_the_data(
        tmp_path_factory, requests, total):
    """Any requests of three analysts: after each, the server's memory counts exactly what the sources of every
    analyst hold, within its budget, and no request gives back more than it took (every source's memory was taken
    before it was made); the same requests on a neighbouring table meet the same refusals."""
    given_back = []
    give = Memory.give
    with mock.patch.object(Memory, "give", lambda self, less: given_back.append(less) or give(self, less)):
        first = play(gatekeeper(tmp_path_factory.mktemp("a"), [3, 0, 5, 1], total), requests)
        second = play(gatekeeper(tmp_path_factory.mktemp("b"), [3, 1, 5, 1], total), requests)
    assert first == second
    assert min(given_back, default=0) >= 0, "a source was added without its memory taken first"
