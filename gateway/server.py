"""The sockets of a served kernel: a unix socket only its owner (or a named group) may open, or TCP with TLS.

Every connection starts with a ``Hello`` checked by the gatekeeper; then each frame is one request, answered
within a time limit. Connections, frame sizes and the wait for the hello are bounded (``ServerLimits``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import grp
import os
import socket
import socketserver
import ssl
import stat
import threading
from dataclasses import dataclass
from typing import Protocol

from pydantic import ValidationError

from gateway.wire import MAX_FRAME, FrameTooLarge, Hello, Welcome, is_loopback, parse_address, read_frame, \
    tune_socket, write_frame
from kernel import protocol as p


class Gate(Protocol):
    """What the server asks of a gatekeeper (``gateway.gatekeeper.Gatekeeper``)."""

    def authenticate(self, analyst: str, token: str) -> bool: ...

    def handle(self, analyst: str, text: bytes) -> str: ...


@dataclass(frozen=True)
class ServerLimits:
    connections: int = 64
    """Open connections at once; one more is told the server is busy and closed."""
    frame: int = MAX_FRAME
    """Largest request frame in bytes."""
    request_seconds: float = 60.0
    """Wall-clock wait for one answer; past it the connection gets a timeout and is closed (the request still
    finishes in the kernel, and a charge it made stands: charges are never refunded)."""
    hello_seconds: float = 10.0
    """Time a new connection has to finish TLS and send its hello."""


def _error(error: str, message: str) -> bytes:
    return p.ErrorInfo(error=error, message=message).model_dump_json().encode("utf-8")


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock, limits = self.request, self.server.limits
        with contextlib.suppress(OSError, ssl.SSLError):
            sock.settimeout(limits.hello_seconds)
            if self.server.tls is not None:
                sock = self.server.tls.wrap_socket(sock, server_side=True)
            analyst = self._hello(sock)
            sock.settimeout(None)
            while analyst is not None:
                analyst = self._answer(sock, analyst)

    def _hello(self, sock: socket.socket) -> str | None:
        try:
            hello = Hello.model_validate_json(read_frame(sock, 4096) or b"")
        except (ValidationError, FrameTooLarge):
            write_frame(sock, _error("unauthenticated", "the first frame must be a hello with an analyst's name "
                                                        "and token (connect with the credential file you were given)"))
            return None
        if not self.server.gate.authenticate(hello.analyst, hello.token):
            write_frame(sock, _error("unauthenticated", "unknown analyst, wrong token, or revoked: nothing was done"))
            return None
        write_frame(sock, Welcome(analyst=hello.analyst).model_dump_json().encode("utf-8"))
        return hello.analyst

    def _answer(self, sock: socket.socket, analyst: str) -> str | None:
        """Answer one frame; None ends the connection."""
        limits = self.server.limits
        try:
            payload = read_frame(sock, limits.frame)
        except FrameTooLarge as error:
            write_frame(sock, _error("invalid_request", str(error)))
            return None
        if payload is None:
            return None
        future = self.server.workers.submit(self.server.gate.handle, analyst, payload)
        try:
            reply = future.result(timeout=limits.request_seconds)
        except concurrent.futures.TimeoutError:
            write_frame(sock, _error("timeout", f"no answer within {limits.request_seconds:g} s; the connection is "
                                                "closed, and any charge the request makes stands"))
            return None
        write_frame(sock, reply.encode("utf-8"))
        return analyst


class _Server(socketserver.ThreadingMixIn):
    daemon_threads = True

    def configure(self, gate: Gate, tls: ssl.SSLContext | None, limits: ServerLimits) -> None:
        self.gate, self.tls, self.limits = gate, tls, limits
        self.slots = threading.BoundedSemaphore(limits.connections)
        self.workers = concurrent.futures.ThreadPoolExecutor(limits.connections, thread_name_prefix="kernel")

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                write_frame(request, _error("busy", f"the kernel serves {self.limits.connections} connections "
                                                    "already; try again later"))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def server_close(self) -> None:
        super().server_close()
        self.workers.shutdown(wait=False, cancel_futures=True)


class _TCPServer(_Server, socketserver.TCPServer):
    allow_reuse_address = True

    def get_request(self):
        sock, address = super().get_request()
        tune_socket(sock)
        return sock, address


class _UnixServer(_Server, socketserver.UnixStreamServer):
    def server_bind(self) -> None:
        """Bind with no permissions for others from the start (umask), then open to the owner's group if named."""
        previous = os.umask(0o177)
        try:
            super().server_bind()
        finally:
            os.umask(previous)
        os.chmod(self.server_address, 0o600)


def make_server(gate: Gate, address: str, *, tls: ssl.SSLContext | None = None,
                limits: ServerLimits = ServerLimits(), group: str | None = None) -> socketserver.BaseServer:
    """A server bound to ``address`` (not yet serving); ``server.server_address`` tells the real port.

    TCP needs ``tls`` unless the address is loopback; a unix socket gets mode 0600, or 0660 with ``group``.
    """
    family, where = parse_address(address)
    if family == socket.AF_UNIX:
        if os.path.lexists(where):
            if not stat.S_ISSOCK(os.lstat(where).st_mode):
                raise ValueError(f"{where} exists and is not a socket: choose another path")
            os.unlink(where)
        server = _UnixServer(where, _Handler)
        if group is not None:
            os.chown(where, -1, grp.getgrnam(group).gr_gid)
            os.chmod(where, 0o660)
    else:
        if tls is None and not is_loopback(where[0]):
            raise ValueError(
                f"refusing to listen on {where[0]} without TLS: tokens and answers would cross the network in clear. "
                "Give the service's certificate (made by `ektelo-ng kernel init`), or listen on 127.0.0.1 or a "
                "unix socket"
            )
        server = _TCPServer(where, _Handler)
    server.configure(gate, tls, limits)
    return server
