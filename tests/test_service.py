"""The served kernel under attack by its own analysts, speaking the wire protocol by hand over real sockets (a
unix socket and TCP with TLS): credentials, isolation between analysts, shares, transport and limits (issue 16).

Every refusal must change nothing: the ledger, the other analysts' state and the answering analyst's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import stat
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pytest

from ektelo_ng.grammar import parse_domain
from ektelo_ng.session import open_table
from ektelo_ng.gateway.audit import QUOTA, AuditLog, read_audit
from ektelo_ng.gateway.credentials import Credential
from ektelo_ng.gateway.gatekeeper import Gatekeeper, Rate
from ektelo_ng.gateway.owner import ServiceDirectory, init_service
from ektelo_ng.gateway.server import ServerLimits, make_server
from ektelo_ng.kernel.privacy import PureDP
from ektelo_ng.gateway.wire import read_frame, write_frame
from tests.served import Raw, write_table

pytest.importorskip("cryptography")

IDENTITY = {"kind": "stack", "blocks": [{"factors": [{"kind": "identity", "n": 24}]}]}


@dataclass
class Service:
    directory: ServiceDirectory
    address: str
    credentials: dict[str, Credential]
    gate: Gatekeeper
    server: object

    def analyst(self, name: str) -> Raw:
        return Raw.signed_in(self.address, self.credentials[name])

    def raw(self) -> Raw:
        return Raw(self.address, None if self.address.startswith("unix:") else self.credentials["alice"].ca)

    def spent(self) -> dict[str, Fraction]:
        return {s.analyst: s.spent for s in self.directory.ledger().shares()}

    def audit(self) -> list[dict]:
        self.gate.audit.flush()
        return list(read_audit(self.directory.audit_path))


def serving(gate, address: str, tls=None, limits: ServerLimits = ServerLimits()):
    server = make_server(gate, address, tls=tls, limits=limits)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    where = server.server_address
    return server, f"unix:{where}" if isinstance(where, str) else f"{where[0]}:{where[1]}"


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory(prefix="ek-", dir="/tmp") as name:  # short: unix socket paths are limited
        yield Path(name)


_count = iter(range(10**6))


@contextlib.contextmanager
def running(folder: Path, transport: str, limits: ServerLimits = ServerLimits(), rate: Rate | None = None,
            audit: Path | None = None, audit_quota: int = QUOTA, **options):
    """A served table with analysts alice (share 1), bob (1/2) and carol (1/4) of a total of 2, shut down on exit;
    ``options`` go to the gatekeeper."""
    where = folder / f"s{next(_count)}"
    where.mkdir()
    table, domain = write_table(where)
    directory = init_service(where / "service", PureDP(2), hosts=["127.0.0.1"])
    credentials = {name: Credential.read(directory.add_analyst(name, Fraction(share)))
                   for name, share in [("alice", 1), ("bob", "1/2"), ("carol", "1/4")]}
    gate = Gatekeeper(open_table(table, parse_domain(domain)), directory.ledger(),
                      audit=AuditLog(audit or directory.audit_path, quota=audit_quota), rate=rate, **options)
    if transport == "unix":
        server, address = serving(gate, f"unix:{where / 'k.sock'}", limits=limits)
    elif transport == "loopback":  # TCP without TLS: refused
        server, address = serving(gate, "127.0.0.1:0", limits=limits)
    else:
        server, address = serving(gate, "127.0.0.1:0", tls=directory.server_context(), limits=limits)
    try:
        yield Service(directory, address, credentials, gate, server)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["unix", "tls"])
def service(request, folder):
    with running(folder, request.param) as service:
        yield service


def measure(raw: Raw, epsilon: str = "1/8") -> dict:
    vector = raw.send({"op": "vectorize", "source": raw.send({"op": "root"})["source"]})["source"]
    return raw.send({"op": "laplace", "source": vector, "matrix": IDENTITY, "epsilon": epsilon})


# ---- credentials -----------------------------------------------------------------------------------------------
def test_a_request_without_a_hello_is_refused_and_changes_nothing(service):
    raw = service.raw()
    reply = raw.send({"op": "noisy_count", "source": "0" * 32, "epsilon": "1"})
    assert reply["kind"] == "error" and reply["error"] == "unauthenticated" and "credential" in reply["message"]
    assert raw.send({"op": "budget"}) is None  # and the connection is closed
    assert set(service.spent().values()) == {0}


@pytest.mark.parametrize("hello", [
    {"op": "hello", "analyst": "alice", "token": "guess"},
    {"op": "hello", "analyst": "mallory", "token": "guess"},
    {"op": "hello", "analyst": "alice"},
    {"op": "hello", "analyst": "alice", "token": "x" * 10_000},
])
def test_a_wrong_or_unknown_credential_is_refused_and_audited(service, hello):
    raw = service.raw()
    reply = raw.send(hello)
    assert reply["error"] == "unauthenticated"
    assert raw.send({"op": "budget"}) is None
    assert set(service.spent().values()) == {0}


def test_a_name_that_could_forge_lines_in_the_owners_terminal_is_not_a_hello(service):
    for name in ["\x1b[2Jalice", "alice\nbob ok", "ａlice", "a" * 65, "../alice"]:
        reply = service.raw().send({"op": "hello", "analyst": name, "token": service.credentials["alice"].token})
        assert reply["error"] == "unauthenticated" and "first frame must be a hello" in reply["message"]
    assert service.audit() == []


def test_another_analysts_token_does_not_open_a_session(service):
    raw = service.raw()
    reply = raw.send({"op": "hello", "analyst": "alice", "token": service.credentials["bob"].token})
    assert reply["error"] == "unauthenticated"
    assert [e["outcome"] for e in service.audit() if e["analyst"] == "alice"] == ["unauthenticated"]


def test_revocation_stops_an_open_session_at_its_next_request(service):
    alice = service.analyst("alice")
    assert measure(alice)["kind"] == "answer"
    vector = alice.send({"op": "vectorize", "source": alice.send({"op": "root"})["source"]})["source"]
    service.directory.ledger().revoke("alice")  # the owner, from another connection to the ledger
    reply = alice.send({"op": "laplace", "source": vector, "matrix": IDENTITY, "epsilon": "1/8"})
    assert reply["error"] == "unauthenticated" and "revoked" in reply["message"]
    assert alice.send({"op": "budget"}) is None  # and the session is closed
    assert service.spent()["alice"] == Fraction(1, 8)
    assert service.raw().send({"op": "hello", "analyst": "alice", "token": service.credentials["alice"].token})[
        "error"] == "unauthenticated"
    assert service.directory.ledger().shares("alice")[0].revoked


def test_a_charge_racing_a_revocation_is_refused_by_the_ledger(service):
    """The gate's check and the charge are not atomic; the ledger's transaction is the last word."""
    ledger = service.directory.ledger()
    account = ledger.account("bob")
    ledger.revoke("bob")
    with pytest.raises(Exception, match="not active"):
        account.commit(Fraction(1, 100), "laplace")
    assert service.spent()["bob"] == 0


# ---- isolation -------------------------------------------------------------------------------------------------
def test_an_analyst_cannot_see_or_measure_another_analysts_sources(service):
    alice, bob = service.analyst("alice"), service.analyst("bob")
    root = alice.send({"op": "root"})["source"]
    vector = alice.send({"op": "vectorize", "source": root})["source"]
    for request in ({"op": "describe", "source": vector}, {"op": "noisy_count", "source": vector, "epsilon": "1/4"},
                    {"op": "laplace", "source": vector, "matrix": IDENTITY, "epsilon": "1/4"},
                    {"op": "vectorize", "source": root}, {"op": "release", "source": vector}):
        assert bob.send(request)["error"] == "unknown_source"
    assert alice.send({"op": "describe", "source": vector})["kind"] == "source"  # alice's own is untouched
    bob_root = bob.send({"op": "root"})["source"]
    assert bob_root != root
    nodes = {node["id"] for node in bob.send({"op": "lineage"})["graph"]["nodes"]}
    assert nodes == {bob_root}
    assert {e["op"] for e in bob.send({"op": "transcript"})["entries"]} <= {"describe", "noisy_count", "laplace",
                                                                             "vectorize", "release", "root", "lineage"}
    assert len(bob.send({"op": "transcript"})["entries"]) == 8  # bob's own requests only (alice made 3)
    assert service.spent() == {"alice": 0, "bob": 0, "carol": 0}


def test_each_analyst_sees_only_its_own_share_and_spend(service):
    alice, bob = service.analyst("alice"), service.analyst("bob")
    measure(alice, "1/4")
    budget = bob.send({"op": "budget"})
    assert (budget["total"]["epsilon"], budget["spent"]["epsilon"], budget["remaining"]["epsilon"]) == ("1/2", "0", "1/2")
    assert alice.send({"op": "budget"})["spent"]["epsilon"] == "1/4"


def test_an_analyst_cannot_spend_beyond_its_share_even_with_several_connections(service):
    sessions = [service.analyst("carol") for _ in range(3)]
    replies = [measure(raw, "1/8")["kind"] for raw in sessions]
    assert replies == ["answer", "answer", "error"]  # 1/4 = two charges of 1/8
    assert service.spent()["carol"] == Fraction(1, 4)


def test_the_audit_log_names_who_asked_what_and_what_was_charged(service):
    measure(service.analyst("alice"), "1/8")
    service.raw().send({"op": "hello", "analyst": "bob", "token": "wrong"})
    entries = service.audit()
    assert [(e["analyst"], e["op"], e["outcome"], e["charge"]) for e in entries] == [
        ("alice", "root", "ok", None), ("alice", "vectorize", "ok", None), ("alice", "laplace", "ok", "1/8"),
        ("bob", "hello", "unauthenticated", None)]
    assert stat.S_IMODE(os.stat(service.directory.audit_path).st_mode) == 0o600
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in service.directory.path.glob("ledger.sqlite*")} == {0o600}
    assert "base64" not in service.directory.audit_path.read_text()


# ---- transport -------------------------------------------------------------------------------------------------
def test_the_unix_socket_is_private_whatever_the_umask(folder):
    previous = os.umask(0)
    try:
        with running(folder, "unix") as service:
            assert stat.S_IMODE(os.stat(service.address[len("unix:"):]).st_mode) == 0o600
    finally:
        os.umask(previous)


def test_a_regular_file_is_never_replaced_by_the_socket(folder):
    victim = folder / "precious.txt"
    victim.write_text("keep me")
    with pytest.raises(ValueError, match="not a socket"):
        make_server(None, f"unix:{victim}")
    assert victim.read_text() == "keep me"


def test_listening_beyond_loopback_without_tls_is_refused_with_the_reason():
    for host in ("0.0.0.0", "192.0.2.1"):
        with pytest.raises(ValueError, match="without TLS"):
            make_server(None, f"{host}:0")


def test_tls_refuses_plain_text_and_an_unknown_ca(folder):
    with running(folder, "tls") as service:
        plain = Raw(service.address)
        assert plain.send({"op": "hello", "analyst": "alice", "token": service.credentials["alice"].token}) is None
        other = init_service(folder / "other-ca", PureDP(1), hosts=["127.0.0.1"])
        with pytest.raises(ssl.SSLCertVerificationError):
            Raw(service.address, (other.tls / "ca.pem").read_text())
        assert set(service.spent().values()) == {0}


# ---- limits ----------------------------------------------------------------------------------------------------
def test_an_oversized_frame_is_refused_before_it_is_read(folder):
    with running(folder, "unix", ServerLimits(frame=4096)) as service:
        alice = service.analyst("alice")
        reply = alice.announce(1 << 30)
        assert reply["error"] == "invalid_request" and "limit of 4096" in reply["message"]
        assert alice.receive() is None
        huge = service.raw().announce(1 << 20)  # before the hello too
        assert huge["error"] == "unauthenticated"


def hello(raw: Raw, credential: Credential) -> dict | None:
    return raw.send({"op": "hello", "analyst": credential.analyst, "token": credential.token})


def test_sessions_beyond_the_limits_are_told_the_server_is_busy(folder):
    with running(folder, "unix", ServerLimits(connections=3, per_analyst=2)) as service:
        alice = [service.analyst("alice"), service.analyst("alice")]
        third = hello(service.raw(), service.credentials["alice"])
        assert third["error"] == "busy" and "'alice' has 2 sessions" in third["message"]
        bob = service.analyst("bob")
        full = hello(service.raw(), service.credentials["carol"])
        assert full["error"] == "busy" and "3 sessions" in full["message"]
        alice[0].close()
        for _ in range(100):  # the session is freed once the server sees the close
            time.sleep(0.02)
            reply = hello(service.raw(), service.credentials["carol"])
            if reply["kind"] == "welcome":
                break
        assert reply["kind"] == "welcome"
        assert bob.send({"op": "budget"})["kind"] == "budget" and alice[1].send({"op": "budget"})["kind"] == "budget"


def test_connections_without_hello_are_pre_empted_oldest_first_and_drop_after_the_hello_time(folder):
    with running(folder, "unix", ServerLimits(opening=2, hello_seconds=0.6)) as service:
        silent = [service.raw(), service.raw()]
        settled(service, 2)
        newest = service.raw()  # every slot is taken: the longest-waiting connection is shut down for it
        assert silent[0].receive() is None
        assert service.analyst("alice").send({"op": "budget"})["kind"] == "budget"  # and so on for an analyst
        time.sleep(1.0)  # the silent ones left are dropped after the hello time
        assert silent[1].receive() is None and newest.receive() is None


def settled(service: Service, opening: int) -> None:
    """Wait until the server has counted ``opening`` connections before their hello."""
    deadline = time.monotonic() + 10
    while service.server.opening_connections() < opening and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.server.opening_connections() == opening


def test_many_analysts_connecting_at_once_all_get_in(folder):
    """The listen backlog: a unix socket refuses connects beyond it instead of queueing them."""
    with running(folder, "unix") as service:
        barrier, errors = threading.Barrier(40), []

        def connect():
            barrier.wait()
            try:
                Raw(service.address).close()
            except OSError as error:
                errors.append(error)

        threads = [threading.Thread(target=connect) for _ in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []


def test_a_silent_connection_is_dropped_after_the_hello_time(folder):
    with running(folder, "unix", ServerLimits(hello_seconds=0.2)) as service:
        raw = service.raw()
        time.sleep(0.5)
        assert raw.send({"op": "hello", "analyst": "alice", "token": service.credentials["alice"].token}) is None


def test_an_analyst_over_its_rate_is_refused_and_nothing_changes(folder):
    with running(folder, "unix", rate=Rate(per_second=0.001, burst=3)) as service:
        alice, bob = service.analyst("alice"), service.analyst("bob")
        root = alice.send({"op": "root"})["source"]
        vector = alice.send({"op": "vectorize", "source": root})["source"]
        assert alice.send({"op": "noisy_count", "source": vector, "epsilon": "1/8"})["kind"] == "answer"
        reply = alice.send({"op": "noisy_count", "source": vector, "epsilon": "1/8"})
        assert reply["error"] == "rate_limited" and "retry" in reply["message"]
        assert service.spent()["alice"] == Fraction(1, 8)
        assert bob.send({"op": "budget"})["kind"] == "budget"  # a bucket per analyst


class _Slow:
    def authenticate(self, analyst, token, peer):
        return None

    def handle(self, analyst, text, deadline):
        time.sleep(3.0)
        return '{"kind": "error", "error": "invalid_request", "message": "late"}'


def test_a_request_past_the_time_limit_gets_a_timeout_and_the_connection_closes(folder):
    server, address = serving(_Slow(), f"unix:{folder / 'slow.sock'}", limits=ServerLimits(request_seconds=0.1))
    try:
        raw = Raw(address)
        assert raw.send({"op": "hello", "analyst": "a", "token": "t"})["kind"] == "welcome"
        start = time.perf_counter()
        reply = raw.send({"op": "budget"})
        assert reply["error"] == "timeout" and time.perf_counter() - start < 2.5  # 1.5 x 0.1 s + 1 s
        assert raw.receive() is None
    finally:
        server.shutdown()
        server.server_close()


def test_failed_hellos_fill_the_audit_log_only_at_the_rate_and_lock_nobody_out(folder):
    with running(folder, "unix", rate=Rate(per_second=0.001, burst=3)) as service:
        replies = [service.raw().send({"op": "hello", "analyst": "alice", "token": f"guess{i}"}) for i in range(6)]
        assert [r["error"] for r in replies] == ["unauthenticated"] * 6
        first, counts = service.audit()  # 3 guesses are audited at the rate: the first, then a count of the others
        assert first["outcome"] == "unauthenticated" and counts["counts"] == {"hello: unauthenticated": 2}
        assert service.analyst("alice").send({"op": "budget"})["kind"] == "budget"  # the right token still works


def test_a_flood_of_refused_requests_leaves_one_audit_entry(folder):
    with running(folder, "unix", rate=Rate(per_second=0.001, burst=2)) as service:
        alice = service.analyst("alice")
        replies = [alice.send({"op": "budget"}) for _ in range(20)]
        assert [r["kind"] for r in replies[:2]] == ["budget"] * 2
        assert {r["error"] for r in replies[2:]} == {"rate_limited"}
        assert [e["outcome"] for e in service.audit()] == ["ok", "ok", "rate_limited"]


def test_an_idle_session_is_closed(folder):
    with running(folder, "unix", ServerLimits(idle_seconds=0.2)) as service:
        alice = service.analyst("alice")
        time.sleep(0.5)
        assert alice.send({"op": "budget"}) is None


def test_when_the_audit_log_cannot_be_written_the_answer_goes_out_and_then_everything_is_refused(folder):
    with running(folder, "unix", audit=Path("/dev/full")) as service:  # every write fails: a full disk
        alice = service.analyst("alice")
        assert alice.send({"op": "root"})["kind"] == "source"
        reply = alice.send({"op": "root"})
        assert reply["error"] == "busy" and "audit log" in reply["message"]


def test_a_named_group_may_open_the_unix_socket_too(folder):
    import grp

    path = folder / "group.sock"
    server = make_server(None, f"unix:{path}", group=grp.getgrgid(os.getgid()).gr_name)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660 and os.stat(path).st_gid == os.getgid()
    finally:
        server.server_close()


def test_init_without_the_cryptography_package_leaves_nothing_behind(folder, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cryptography", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[service\]'"):
        init_service(folder / "no-crypto", PureDP(1))
    assert not (folder / "no-crypto").exists()
    assert init_service(folder / "no-crypto", PureDP(1), tls=False).ledger().total == PureDP(1)


def test_a_hello_dribbled_byte_by_byte_is_cut_off_at_the_hello_time_in_all(folder):
    with running(folder, "unix", ServerLimits(hello_seconds=0.5)) as service:
        raw = service.raw()
        frame = json.dumps({"op": "hello", "analyst": "alice", "token": service.credentials["alice"].token}).encode()
        start, sent = time.perf_counter(), 0
        with contextlib.suppress(OSError):
            for byte in struct.pack(">I", len(frame)) + frame:  # one byte every 0.1 s: each recv is quick
                raw.sock.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.1)
        assert raw.receive() is None and time.perf_counter() - start < 3.0 and sent < 30


def test_sessions_that_close_right_after_their_hello_free_their_slots(folder):
    with running(folder, "unix", ServerLimits(per_analyst=2)) as service:
        for _ in range(12):
            raw = service.raw()
            write_frame(raw.sock, json.dumps({"op": "hello", "analyst": "alice",
                                              "token": service.credentials["alice"].token}).encode())
            raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raw.close()
        for _ in range(100):
            time.sleep(0.02)
            reply = hello(service.raw(), service.credentials["alice"])
            if reply["kind"] == "welcome":
                break
        assert reply["kind"] == "welcome"


class _Big:
    def authenticate(self, analyst, token, peer):
        return None

    def handle(self, analyst, text, deadline):
        return '{"kind": "error", "error": "invalid_request", "message": "' + "x" * (64 << 20) + '"}'


def test_a_client_that_never_reads_its_reply_is_cut_off(folder):
    limits = ServerLimits(per_analyst=1, write_seconds=0.3)
    server, address = serving(_Big(), f"unix:{folder / 'big.sock'}", limits=limits)
    try:
        hog = Raw(address)
        assert hog.send({"op": "hello", "analyst": "a", "token": "t"})["kind"] == "welcome"
        write_frame(hog.sock, b'{"op": "budget"}')  # and never read the 64 MB reply
        for _ in range(100):  # the hog's one session is freed once its write deadline passes
            time.sleep(0.05)
            if Raw(address).send({"op": "hello", "analyst": "a", "token": "t"})["kind"] == "welcome":
                break
        else:
            raise AssertionError("the session of a client that never reads was never freed")
    finally:
        server.shutdown()
        server.server_close()


def test_a_live_socket_is_never_taken_over_but_a_stale_one_is_replaced(folder):
    with running(folder, "unix") as service:
        path = service.address[len("unix:"):]
        with pytest.raises(ValueError, match="listening on"):
            make_server(None, f"unix:{path}")
        assert service.analyst("alice").send({"op": "budget"})["kind"] == "budget"
    assert not os.path.exists(path)  # a server that stops removes its socket file
    with socket.socket(socket.AF_UNIX) as died:  # one that died leaves it: stale, nobody listening
        died.bind(path)
    replaced = make_server(None, f"unix:{path}")
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    replaced.server_close()
    assert not os.path.exists(path)


def test_a_client_waits_out_its_rate_instead_of_failing(folder):
    import ektelo_ng as ek

    with running(folder, "unix", rate=Rate(per_second=20, burst=2)) as service:
        session = ek.connect(service.address, credential=service.credentials["alice"], timeout=30)
        start = time.perf_counter()
        for _ in range(8):
            assert session.budget.total == PureDP(1)
        assert time.perf_counter() - start > 0.2  # 6 of them had to wait for the bucket (20 a second)
        assert [e["outcome"] for e in service.audit()].count("ok") == 8


def test_one_address_cannot_hold_every_connection_before_the_hello(folder):
    with running(folder, "tls", ServerLimits(opening=8, opening_per_peer=2)) as service:
        host, port = service.address.rsplit(":", 1)
        silent = [socket.create_connection((host, int(port))) for _ in range(2)]
        third = socket.create_connection((host, int(port)))
        assert third.recv(1) == b""  # refused: closed at once (a plain-text frame would only confuse TLS)
        plain = socket.create_connection((host, int(port)), source_address=("127.0.0.2", 0))  # another peer
        other = ssl.create_default_context(cadata=service.credentials["alice"].ca).wrap_socket(plain, server_hostname=host)
        write_frame(other, json.dumps({"op": "hello", "analyst": "alice",
                                       "token": service.credentials["alice"].token}).encode())
        assert json.loads(read_frame(other))["kind"] == "welcome"
        for sock in silent + [third, other]:
            sock.close()


def test_analysts_connecting_at_once_from_one_address_wait_their_turn(folder):
    import ektelo_ng as ek

    with running(folder, "tls", ServerLimits(opening=4, opening_per_peer=2)) as service:
        barrier, sessions, errors = threading.Barrier(12), [], []

        def connect(name):
            barrier.wait()
            try:
                sessions.append(ek.connect(service.address, credential=service.credentials[name], timeout=30))
            except Exception as error:
                errors.append(error)

        threads = [threading.Thread(target=connect, args=(["alice", "bob", "carol"][i % 3],)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and all(s.budget.remaining for s in sessions) and len(sessions) == 12
