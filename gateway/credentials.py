"""Analysts' credentials: a random token the owner hands over in a file; the ledger keeps only its digest."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""Analyst names: ASCII letters, digits, '_', '.', '-' (they name files, and appear in audit entries and terminals)."""


class Credential(BaseModel):
    """What an analyst needs to connect: its name, its token, and optionally where and whom to trust (the CA)."""

    model_config = ConfigDict(extra="forbid")
    analyst: str
    token: str
    address: str | None = None
    ca: str | None = Field(default=None, description="PEM certificate of the service's CA (TLS over TCP)")

    @classmethod
    def read(cls, path: str | Path) -> Credential:
        return cls.model_validate_json(Path(path).read_text())

    def write(self, path: str | Path) -> Path:
        """Write the credential readable by its owner only (mode 0600), refusing to overwrite one."""
        path = Path(path)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(self.model_dump_json(indent=2, exclude_none=True))
        return path


def check_name(analyst: str) -> str:
    if not re.fullmatch(NAME_PATTERN, analyst, re.ASCII):
        raise ValueError(f"analyst name {analyst!r} must be 1-64 letters, digits, '_', '.' or '-', starting with a "
                         "letter or digit")
    return analyst


def new_token() -> str:
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """What the ledger stores: SHA-256 of a 256-bit random token (a stolen ledger gives no credential)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def matches(token: str, stored: str | None) -> bool:
    """Constant-time comparison of a presented token with a stored digest (None: unknown or revoked)."""
    return stored is not None and hmac.compare_digest(digest(token), stored)
