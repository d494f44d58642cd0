"""The data owner's side: a service directory holding the ledger, the TLS pair and the audit log.

``DIR/ledger.sqlite`` (total, shares, spends, credential digests), ``DIR/tls/`` (CA and server certificate,
optional), ``DIR/audit.jsonl``, and ``DIR/credentials/NAME.json`` for the owner to hand to each analyst.
The directory is created mode 0700: it holds secrets only the owner may read.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from .credentials import Credential, check_name, digest, new_token
from ..kernel.ledger import SqliteLedger
from ..kernel.privacy import PureDP, ZCDP


@dataclass(frozen=True)
class ServiceDirectory:
    path: Path

    @property
    def ledger_path(self) -> Path:
        return self.path / "ledger.sqlite"

    @property
    def audit_path(self) -> Path:
        return self.path / "audit.jsonl"

    @property
    def tls(self) -> Path:
        return self.path / "tls"

    def ledger(self) -> SqliteLedger:
        if not self.ledger_path.is_file():
            raise FileNotFoundError(f"{self.path} is not a service directory: make one with `ektelo-ng kernel init`")
        return SqliteLedger(self.ledger_path)

    def server_context(self) -> ssl.SSLContext | None:
        """The server's TLS context, or None if the directory was made without TLS."""
        if not (self.tls / "server.pem").is_file():
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.tls / "server.pem", self.tls / "server.key")
        return context

    def add_analyst(self, analyst: str, share: Fraction, address: str | None = None) -> Path:
        """Give ``analyst`` a share of the total and write its credential file (mode 0600) for the owner to hand over;
        an address the server certificate does not name is refused first (nothing is given)."""
        if address is not None and (self.tls / "server.pem").is_file():
            from .certificates import certificate_hosts, check_address_is_named

            check_address_is_named(address, certificate_hosts((self.tls / "server.pem").read_bytes()))
        token = new_token()
        ca = (self.tls / "ca.pem").read_text() if (self.tls / "ca.pem").is_file() else None
        credential = Credential(analyst=check_name(analyst), token=token, address=address, ca=ca)
        path = self.path / "credentials" / f"{analyst}.json"
        if path.exists():
            raise ValueError(f"{path} exists: analyst {analyst!r} was added before, and names are never reused (the "
                             "audit log keeps them): `ektelo-ng kernel analysts revoke` frees an unused share; add "
                             "the analyst again under a new name")
        credential.write(path)
        ledger = self.ledger()
        try:
            ledger.add(analyst, share, digest(token))
        except BaseException:
            path.unlink()  # nothing half-done: no credential without its share
            raise
        finally:
            ledger.close()
        return path


def init_service(path: str | Path, total: PureDP | ZCDP, *, hosts: list[str] | None = None,
                 tls: bool = True) -> ServiceDirectory:
    """A new service directory for a table with budget ``total``; with ``tls``, a CA and a server certificate for
    ``hosts`` (default: localhost, 127.0.0.1, ::1 and this machine's name)."""
    directory = ServiceDirectory(Path(path))
    if directory.ledger_path.exists():
        raise FileExistsError(f"{directory.path} already holds a service (its ledger keeps spent budget): "
                              "choose a new directory")
    existed = directory.path.exists()
    try:
        directory.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.path.chmod(0o700)
        (directory.path / "credentials").mkdir(mode=0o700)
        if tls:
            from .certificates import write_certificates

            directory.tls.mkdir(mode=0o700)
            write_certificates(directory.tls, hosts or ["localhost", "127.0.0.1", "::1", socket.gethostname()])
        os.close(os.open(directory.ledger_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # SQLite keeps the mode
        SqliteLedger(directory.ledger_path, total).close()
    except BaseException:
        if not existed:  # nothing half-made is left behind
            shutil.rmtree(directory.path, ignore_errors=True)
        raise
    return directory
