"""Out-of-process mode: the kernel behind a socket (the client's transport is operators.client.socket_transport).

Frames are a 4-byte big-endian length and UTF-8 JSON parsed by the protocol models (never pickle, which would
let a client run code in the kernel). Addresses are ``HOST:PORT`` (default host 127.0.0.1) or ``unix:PATH``.
"""

from __future__ import annotations

import os
import socket
import socketserver
import struct

from kernel.service import Kernel

MAX_FRAME = 1 << 30
_HEADER = struct.Struct(">I")


def parse_address(address: str) -> tuple[int, object]:
    """(socket family, bind/connect address) from ``HOST:PORT``, ``:PORT`` or ``unix:PATH``."""
    if address.startswith("unix:"):
        return socket.AF_UNIX, address[len("unix:") :]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"listen/connect address must be HOST:PORT or unix:PATH, got {address!r}")
    return socket.AF_INET, (host or "127.0.0.1", int(port))


def _read_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes | None:
    header = _read_exact(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds the limit of {MAX_FRAME}")
    return _read_exact(sock, size)


def write_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def tune_socket(sock: socket.socket) -> None:
    """No Nagle delay on TCP: requests and answers are small, latency matters."""
    if sock.family == socket.AF_INET:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        tune_socket(self.request)
        while True:
            try:
                payload = read_frame(self.request)
            except (ValueError, OSError):
                return
            if payload is None:
                return
            write_frame(self.request, self.server.kernel.handle_json(payload).encode("utf-8"))


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def make_server(kernel: Kernel, address: str) -> socketserver.BaseServer:
    """A server bound to ``address`` (not yet serving); ``server.server_address`` tells the real port."""
    family, where = parse_address(address)
    if family == socket.AF_UNIX:
        if os.path.exists(where):
            os.unlink(where)
        server = _UnixServer(where, _Handler)
    else:
        server = _TCPServer(where, _Handler)
    server.kernel = kernel
    return server
