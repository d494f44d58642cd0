"""Issue 31, class 3: the service against floods, audit-log growth and tokens sent in clear, over real sockets."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import ektelo_ng as ek
from ektelo_ng.gateway.audit import AuditLog
from ektelo_ng.gateway.credentials import Credential
from ektelo_ng.gateway.gatekeeper import Rate
from ektelo_ng.gateway.server import ServerLimits
from tests.served import Raw
from tests.test_service import folder, measure, running, settled  # noqa: F401  (folder: the fixture)

pytest.importorskip("cryptography")


def test_silent_connections_from_four_addresses_do_not_keep_an_analyst_out(folder):
    """16 connections that never start TLS filled every opening slot (4 per address) until they timed out, and
    their owner could open them again at once: a valid hello must still get in."""
    with running(folder, "tls", ServerLimits(hello_seconds=60)) as service:
        host, port = service.address.rsplit(":", 1)
        silent = [socket.create_connection((host, int(port)), source_address=(f"127.0.0.{2 + i // 4}", 0))
                  for i in range(16)]
        try:
            settled(service, 16)
            alice = Raw.signed_in(service.address, service.credentials["alice"])
            assert alice.send({"op": "budget"})["kind"] == "budget"
        finally:
            for sock in silent:
                sock.close()


def test_refused_requests_leave_small_folded_audit_entries(folder):
    """One analyst with no budget left, sending large refused requests, must not grow the log by kilobytes each."""
    with running(folder, "unix") as service:
        alice = service.analyst("alice")
        assert measure(alice, "1")["kind"] == "answer"  # her whole share
        x = alice.send({"op": "vectorize", "source": alice.send({"op": "root"})["source"]})["source"]
        before = service.directory.audit_path.stat().st_size
        big = {"kind": "stack", "blocks": [{"factors": [{"kind": "dense", "data": {
            "dtype": "float64", "shape": [64, 24], "base64": "A" * (4 * ((64 * 24 * 8 + 2) // 3))}}]}]}
        for _ in range(300):
            reply = alice.send({"op": "laplace", "source": x, "matrix": big, "epsilon": "1"})
            assert reply["kind"] == "error"
        grown = service.directory.audit_path.stat().st_size - before
        assert grown <= 4096, f"300 refusals grew the audit log by {grown} bytes"


def test_an_analyst_who_fills_their_share_of_the_audit_log_is_refused_and_nobody_else(folder):
    """Accepted requests are written in full: past its share an analyst is refused (those refusals folded), and
    the others go on."""
    with running(folder, "unix", rate=Rate(per_second=10**6, burst=10**6), audit_quota=32 << 10) as service:
        alice, bob = service.analyst("alice"), service.analyst("bob")
        x = alice.send({"op": "vectorize", "source": alice.send({"op": "root"})["source"]})["source"]
        for _ in range(10_000):
            reply = alice.send({"op": "noisy_count", "source": x, "epsilon": "1e-12"})
            if reply["kind"] == "error":
                break
        assert reply["error"] == "busy" and "audit" in reply["message"], reply
        assert bob.send({"op": "budget"})["kind"] == "budget"
        assert alice.send({"op": "budget"})["kind"] == "error"
        assert service.directory.audit_path.stat().st_size < 2 * (32 << 10)


def test_the_owner_is_warned_well_before_the_audit_disk_is_full(tmp_path, monkeypatch):
    warnings: list[str] = []
    log = AuditLog(tmp_path / "audit.jsonl", warn=warnings.append, warn_free_bytes=1 << 30)
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("Usage", (), {"free": 1 << 29, "total": 1 << 40})())
    for i in range(2000):
        log.record("alice", {"op": "budget", "outcome": "ok", "seq": i})
    log.close()
    assert warnings and "free" in warnings[0], warnings
    assert len(warnings) <= 2  # warned, not flooded


def test_the_client_never_sends_a_token_in_clear_over_tcp():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)
    received: list[bytes] = []

    def accept():
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        connection.settimeout(2)
        try:
            while chunk := connection.recv(1 << 16):
                received.append(chunk)
        except OSError:
            pass
        connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    token = "secret-" + "x" * 40
    credential = Credential(analyst="alice", token=token, address=f"127.0.0.1:{listener.getsockname()[1]}")
    with pytest.raises(ValueError, match="TLS"):
        ek.connect(credential=credential, timeout=3)
    listener.close()
    thread.join(5)
    assert token.encode() not in b"".join(received)


def test_no_kernel_listens_on_tcp_without_tls(folder):
    with pytest.raises(ValueError, match="TLS"):
        with running(folder, "loopback"):
            pass
