"""The sockets of a served kernel: a unix socket only its owner (or a named group) may open, or TCP with TLS.

Every connection starts with a ``Hello`` checked by the gatekeeper; then each frame is one request, answered
within a time limit. Sessions (in all and per analyst), connections before their hello, frame sizes and idle
time are bounded (``ServerLimits``).
"""

from __future__ import annotations

import contextlib
import grp
import os
import socket
import socketserver
import ssl
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import ValidationError

from .wire import MAX_FRAME, FrameTooLarge, Hello, Welcome, parse_address, read_frame, tune_socket, write_frame
from ..kernel import protocol as p


class Gate(Protocol):
    """What the server asks of a gatekeeper (``gateway.gatekeeper.Gatekeeper``)."""

    def authenticate(self, analyst: str, token: str, peer: str) -> p.ErrorInfo | None:
        """None to let ``analyst`` in, or the refusal."""

    def handle(self, analyst: str, text: bytes, deadline: float) -> str:
        """The reply to one request, answered by ``deadline`` (``time.monotonic()``) or refused as timed out."""


@dataclass(frozen=True)
class ServerLimits:
    connections: int = 64
    """Analysts' sessions open at once; one more is told the server is busy and closed."""
    per_analyst: int = 8
    """Sessions one analyst may hold open."""
    opening: int = 16
    """Connections still in TLS or before their hello (an unauthenticated flood waits here, not in the sessions);
    when all are taken, a new one pre-empts the one that has waited longest."""
    opening_per_peer: int = 4
    """Of those, from one network address (a unix socket's peers are the owner or its group)."""
    frame: int = MAX_FRAME
    """Largest request frame in bytes."""
    request_seconds: float = 60.0
    """Wall-clock time for one answer: the kernel stops a request at this deadline, before its charge, and answers
    that it timed out; a reply still missing half as long again later gets a timeout frame and the connection is
    closed."""
    hello_seconds: float = 10.0
    """Time a new connection has to finish TLS and send its hello, in all."""
    write_seconds: float = 60.0
    """Time a client has to read a reply."""
    idle_seconds: float = 3600.0
    """A session silent this long is closed."""


def _error(error: str, message: str) -> bytes:
    return p.ErrorInfo(error=error, message=message).model_dump_json().encode("utf-8")


class SessionEnded(Exception):
    """Raised by a gate to answer with ``reply`` and close the session (an analyst revoked mid-session)."""

    def __init__(self, reply: p.ErrorInfo):
        super().__init__(reply.message)
        self.reply = reply


@dataclass(eq=False)
class _Session:
    """A connection; closed under its lock, so the watchdog never touches a closed (reused) socket."""

    sock: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.sock.close()


class _Watchdog:
    """One thread for the whole server, holding every connection to its current deadline: TLS and the hello,
    a request's answer, the write of a reply. Past it the connection is shut down, after a timeout frame if one
    is given. Requests run in their connection's own thread (no hand-off to a pool: it cost a third of the
    throughput), and exactly one of a reply and its timeout is ever written."""

    def __init__(self, tick: float):
        self._deadlines: dict[_Session, tuple[float, bytes | None]] = {}
        self._lock, self._stopped = threading.Lock(), threading.Event()
        threading.Thread(target=self._watch, args=(tick,), name="kernel-watchdog", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def begin(self, session: _Session, seconds: float, timeout: bytes | None = None) -> None:
        with self._lock:
            self._deadlines[session] = (time.monotonic() + seconds, timeout)

    def end(self, session: _Session) -> bool:
        """Whether the session met its deadline (if not, the watchdog has shut it down)."""
        with self._lock:
            return self._deadlines.pop(session, None) is not None

    def _watch(self, tick: float) -> None:
        while not self._stopped.wait(tick):
            now = time.monotonic()
            with self._lock:
                late = [(session, timeout) for session, (deadline, timeout) in self._deadlines.items() if deadline < now]
                for session, _ in late:
                    del self._deadlines[session]
            for session, timeout in late:
                with session.lock, contextlib.suppress(OSError):
                    if not session.closed:
                        if timeout is not None:
                            session.sock.settimeout(1.0)  # a client that does not read cannot hold the watchdog
                            write_frame(session.sock, timeout)
                        session.sock.shutdown(socket.SHUT_RDWR)


class _Openings:
    """Connections before their hello: at most ``limit`` in all and ``per_peer`` from one address. When every slot is
    taken, a new connection from an address with room pre-empts the connection that has waited longest (it is shut
    down): a valid hello takes milliseconds, so connections that never start TLS or never say hello cannot keep an
    analyst out, however long they are allowed to wait."""

    def __init__(self, limit: int, per_peer: int):
        self._limit, self._per_peer = limit, per_peer
        self._waiting: dict[socket.socket, str | None] = {}  # oldest first
        self._lock = threading.Lock()

    def admit(self, sock: socket.socket, peer: str | None) -> bool:
        with self._lock:
            if peer is not None and sum(p == peer for p in self._waiting.values()) >= self._per_peer:
                return False
            oldest = next(iter(self._waiting)) if len(self._waiting) >= self._limit else None
            if oldest is not None:
                del self._waiting[oldest]
            self._waiting[sock] = peer
        if oldest is not None:
            with contextlib.suppress(OSError):
                oldest.shutdown(socket.SHUT_RDWR)  # its handler's TLS or hello fails, and it ends
        return True

    def done(self, sock: socket.socket) -> None:
        with self._lock:
            self._waiting.pop(sock, None)

    def __len__(self) -> int:
        return len(self._waiting)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        server, limits = self.server, self.server.limits
        session, analyst = _Session(self.request), None
        try:
            server.watchdog.begin(session, limits.hello_seconds)  # TLS and the hello, all within this
            with contextlib.suppress(OSError):
                if server.tls is not None:
                    with session.lock:
                        session.sock = server.tls.wrap_socket(session.sock, server_side=True,
                                                              do_handshake_on_connect=False)
                    session.sock.do_handshake()
                analyst = self._hello(session.sock)
            server.watchdog.end(session)
        finally:
            server.openings.done(self.request)
        if analyst is None:
            session.close()
            return
        try:
            with contextlib.suppress(OSError):
                write_frame(session.sock, Welcome(analyst=analyst).model_dump_json().encode("utf-8"))
                session.sock.settimeout(limits.idle_seconds)
                while self._answer(session, analyst):
                    pass
        finally:
            server.leave(analyst)
            session.close()

    def _hello(self, sock: socket.socket) -> str | None:
        """The analyst, authenticated and counted in the sessions, or None having sent the refusal."""
        try:
            hello = Hello.model_validate_json(read_frame(sock, 4096) or b"")
        except (ValidationError, FrameTooLarge):
            write_frame(sock, _error("unauthenticated", "the first frame must be a hello with an analyst's name "
                                                        "and token (connect with the credential file you were given)"))
            return None
        peer = self.client_address[0] if isinstance(self.client_address, tuple) else "unix socket"
        refusal = self.server.gate.authenticate(hello.analyst, hello.token, peer) or self.server.enter(hello.analyst)
        if refusal is not None:
            write_frame(sock, refusal.model_dump_json().encode("utf-8"))
            return None
        return hello.analyst

    def _answer(self, session: _Session, analyst: str) -> bool:
        """Answer one frame; False ends the session."""
        limits, watchdog = self.server.limits, self.server.watchdog
        try:
            payload = read_frame(session.sock, limits.frame)
        except FrameTooLarge as error:
            write_frame(session.sock, _error("invalid_request", str(error)))
            return False
        if payload is None:
            return False
        deadline = time.monotonic() + limits.request_seconds
        watchdog.begin(session, 1.5 * limits.request_seconds + 1.0, self.server.timeout_frame)
        try:
            reply, more = self.server.gate.handle(analyst, payload, deadline).encode("utf-8"), True
        except SessionEnded as ended:
            reply, more = ended.reply.model_dump_json().encode("utf-8"), False
        if not watchdog.end(session):
            return False
        watchdog.begin(session, limits.write_seconds)  # a client that does not read its reply is cut off
        write_frame(session.sock, reply)
        return watchdog.end(session) and more


class _Server(socketserver.ThreadingMixIn):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a unix socket refuses connects beyond it (socketserver's is 5)

    def configure(self, gate: Gate, tls: ssl.SSLContext | None, limits: ServerLimits) -> None:
        self.gate, self.tls, self.limits = gate, tls, limits
        self.openings = _Openings(limits.opening, limits.opening_per_peer)
        self.watchdog = _Watchdog(min(0.1, limits.hello_seconds / 10, limits.request_seconds / 10))
        self.timeout_frame = _error("timeout", f"no answer within {1.5 * limits.request_seconds + 1:g} s; the "
                                               "connection is closed, and any charge the request made stands")
        self._sessions: Counter[str] = Counter()
        self._sessions_lock = threading.Lock()

    def process_request(self, request, client_address) -> None:
        peer = client_address[0] if isinstance(client_address, tuple) else None
        if not self.openings.admit(request, peer):
            if self.tls is None:  # over TLS a plain-text frame would only confuse the client
                with contextlib.suppress(OSError):
                    write_frame(request, _error("busy", "too many connections are being opened from your address; "
                                                        "try again in a few seconds"))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def opening_connections(self) -> int:
        """Connections that have not yet said their hello."""
        return len(self.openings)

    def enter(self, analyst: str) -> p.ErrorInfo | None:
        """Count a new session of ``analyst``, or the refusal if the server or the analyst has too many."""
        with self._sessions_lock:
            if sum(self._sessions.values()) >= self.limits.connections:
                return p.ErrorInfo(error="busy", message=f"the kernel serves {self.limits.connections} sessions "
                                   "already; try again later")
            if self._sessions[analyst] >= self.limits.per_analyst:
                return p.ErrorInfo(error="busy", message=f"analyst {analyst!r} has {self.limits.per_analyst} "
                                   "sessions open already: close one first")
            self._sessions[analyst] += 1
        return None

    def leave(self, analyst: str) -> None:
        with self._sessions_lock:
            self._sessions[analyst] -= 1

    def server_close(self) -> None:
        super().server_close()
        self.watchdog.stop()


class _TCPServer(_Server, socketserver.TCPServer):
    allow_reuse_address = True

    def get_request(self):
        sock, address = super().get_request()
        tune_socket(sock)
        return sock, address


class _UnixServer(_Server, socketserver.UnixStreamServer):
    def server_bind(self) -> None:
        """Bind with no permissions for others from the start, whatever the process's umask."""
        previous = os.umask(0o177)
        try:
            super().server_bind()
        finally:
            os.umask(previous)
        os.chmod(self.server_address, 0o600)

    def server_close(self) -> None:
        """Close, and remove the socket file this server made (a stopped server leaves nothing in its folder)."""
        super().server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.server_address)


def make_server(gate: Gate, address: str, *, tls: ssl.SSLContext | None = None,
                limits: ServerLimits = ServerLimits(), group: str | None = None) -> socketserver.BaseServer:
    """A server bound to ``address`` (not yet serving); ``server.server_address`` tells the real port.

    TCP needs ``tls`` (loopback included: tokens never cross TCP in clear); a unix socket gets mode 0600, or 0660
    with ``group``.
    """
    family, where = parse_address(address)
    if family == socket.AF_UNIX:
        if os.path.lexists(where):
            if not stat.S_ISSOCK(os.lstat(where).st_mode):
                raise ValueError(f"{where} exists and is not a socket: choose another path")
            with socket.socket(socket.AF_UNIX) as probe:
                if probe.connect_ex(where) == 0:
                    raise ValueError(f"a server is listening on {where} already: stop it or choose another path")
            os.unlink(where)  # a stale socket left by a server that died
        server = _UnixServer(where, _Handler)
        if group is not None:
            os.chown(where, -1, grp.getgrnam(group).gr_gid)
            os.chmod(where, 0o660)
    else:
        if tls is None:
            raise ValueError(
                f"refusing to listen on {where[0]} without TLS: tokens and answers would cross TCP in clear. Give the "
                "service's certificate (made by `ektelo-ng kernel init`), or listen on a unix socket"
            )
        server = _TCPServer(where, _Handler)
    server.configure(gate, tls, limits)
    return server
