"""What crosses a connection: length-prefixed JSON frames, addresses, and the hello that opens a session.

Frames are a 4-byte big-endian length and UTF-8 JSON parsed by pydantic models (never pickle, which would let
a peer run code). Addresses are ``HOST:PORT`` (default host 127.0.0.1) or ``unix:PATH``. Shared by the
server (``gateway.server``) and the client (``operators.client``).
"""

from __future__ import annotations

import socket
import struct
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .credentials import NAME_PATTERN
from ..kernel.limits import Limits

MAX_FRAME = Limits.request_bytes
"""Default largest frame a server reads: the longest request a kernel parses (16 MiB: a dense 1,000 x 1,000 matrix
in base64 is 11 MB)."""

_HEADER = struct.Struct(">I")


class FrameTooLarge(ValueError):
    """The peer announced a frame over the limit; its body was not read."""


class Hello(BaseModel):
    """The first frame of every session: who the analyst is and the secret that proves it."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["hello"] = "hello"
    analyst: str = Field(pattern=NAME_PATTERN)
    token: str = Field(min_length=1, max_length=256)


class Welcome(BaseModel):
    """The server's answer to a valid hello."""

    kind: Literal["welcome"] = "welcome"
    analyst: str


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


def read_frame(sock: socket.socket, limit: int = MAX_FRAME) -> bytes | None:
    """The next frame, None at the end of the stream, or FrameTooLarge before reading an oversized body."""
    header = _read_exact(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise FrameTooLarge(f"a frame of {size} bytes exceeds the server's limit of {limit}: send smaller requests "
                            "(structured matrices, or several batches)")
    return _read_exact(sock, size)


def write_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def tune_socket(sock: socket.socket) -> None:
    """No Nagle delay on TCP: requests and answers are small, latency matters."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
