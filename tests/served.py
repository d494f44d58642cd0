"""Helpers for the served-kernel tests: a small table on disk, a service directory, and a raw protocol client."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

from ektelo_ng.gateway.credentials import Credential
from ektelo_ng.gateway.wire import parse_address, read_frame, write_frame


def write_table(folder: Path) -> tuple[Path, Path]:
    """300 rows over age (6) x zone (4), as data.csv and domain.json in ``folder``."""
    rng = np.random.default_rng(0)
    rows = ["age,zone"] + [f"{a},{z}" for a, z in zip(rng.integers(0, 6, 300), rng.integers(0, 4, 300))]
    (folder / "data.csv").write_text("\n".join(rows) + "\n")
    (folder / "domain.json").write_text(json.dumps({"age": 6, "zone": 4}))
    return folder / "data.csv", folder / "domain.json"


def cli(*arguments: str, check: bool = True) -> subprocess.CompletedProcess:
    """``ektelo-ng ARGUMENTS`` in a fresh process, as the owner would type it."""
    done = subprocess.run([sys.executable, "-m", "ektelo_ng.cli", *arguments], capture_output=True, text=True,
                          timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"ektelo-ng {' '.join(arguments)} failed: {done.stderr}")
    return done


def start_server(folder: Path, service: Path, *extra: str,
                 launcher: tuple[str, ...] = ("-m", "ektelo_ng.cli")) -> tuple[subprocess.Popen, str]:
    """``ektelo-ng kernel serve`` on the table in ``folder`` (started by ``python LAUNCHER``); returns the process
    and its address."""
    command = [sys.executable, *launcher, "kernel", "serve", "--dir", str(service), "--table",
               str(folder / "data.csv"), "--domain", str(folder / "domain.json"), *extra]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise AssertionError(f"kernel did not start: {line!r} {process.stderr.read()}")
    return process, line.split("listening on ", 1)[1].split(" ", 1)[0]


class Raw:
    """Speaks the wire protocol by hand, as a hostile analyst's own client would (TLS over TCP if ``ca``)."""

    def __init__(self, address: str, ca: str | None = None, timeout: float = 30.0):
        family, where = parse_address(address)
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(where)
        if ca is not None:
            sock = ssl.create_default_context(cadata=ca).wrap_socket(sock, server_hostname=where[0])
        self.sock = sock

    @classmethod
    def signed_in(cls, address: str, credential: Credential | Path) -> Raw:
        credential = Credential.read(credential) if isinstance(credential, Path) else credential
        raw = cls(address, credential.ca if not address.startswith("unix:") else None)
        reply = raw.send({"op": "hello", "analyst": credential.analyst, "token": credential.token})
        assert reply["kind"] == "welcome", reply
        return raw

    def send(self, request: dict) -> dict | None:
        """The reply, or None if the server closed the connection."""
        try:
            write_frame(self.sock, json.dumps(request).encode())
        except OSError:
            return None
        return self.receive()

    def receive(self) -> dict | None:
        try:
            reply = read_frame(self.sock, 1 << 30)
        except OSError:
            return None
        return None if reply is None else json.loads(reply)

    def announce(self, size: int) -> dict | None:
        """Send only a frame header announcing ``size`` bytes."""
        try:
            self.sock.sendall(struct.pack(">I", size))
        except OSError:
            return None
        return self.receive()

    def close(self) -> None:
        self.sock.close()
