"""A quick-start TLS pair: a private CA and a server certificate it signs (needs the ``cryptography`` package).

Analysts trust the CA (its certificate travels in their credential files); the server proves itself with its
key. For a real deployment, a certificate from the organisation's own CA works the same way.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

VALID_DAYS = 825


def certificate_hosts(pem: bytes) -> list[str]:
    """The names and addresses a server certificate is valid for (its subject alternative names)."""
    from cryptography import x509

    names = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [*names.get_values_for_type(x509.DNSName), *map(str, names.get_values_for_type(x509.IPAddress))]


def check_address_is_named(address: str, hosts: list[str]) -> None:
    """Refuse a TCP ``address`` whose host the certificate does not name: its credential could never connect."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if not address.startswith("unix:") and host not in hosts:
        raise ValueError(
            f"--address {address}: the service's TLS certificate names {', '.join(hosts)}, not {host}, so a credential "
            f"for it would fail to connect; give one of those names, or make the service again with "
            f"`ektelo-ng kernel init DIR --host {host}` (repeat --host for each name analysts use)"
        )


def write_certificates(directory: Path, hosts: list[str]) -> None:
    """Write ``ca.pem``, ``ca.key``, ``server.pem`` and ``server.key`` (keys mode 0600) for the names ``hosts``."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ImportError("making TLS certificates needs the cryptography package: pip install -e '.[service]' in "
                          "ektelo-ng (or give your own with --no-tls and serve on a unix socket)") from None

    def name(common: str):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def certificate(subject, key, issuer, issuer_key, *extensions):
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(issuer_key, hashes.SHA256())

    def save_key(path: Path, key) -> None:
        data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(data)

    def alternative(host: str):
        try:
            return x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            return x509.DNSName(host)

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = name("ektelo-ng kernel CA")
    ca = certificate(ca_name, ca_key, ca_name, ca_key, (x509.BasicConstraints(ca=True, path_length=0), True),
                     (x509.KeyUsage(False, False, False, False, False, True, True, False, False), True))
    server = certificate(name(hosts[0]), server_key, ca_name, ca_key,
                         (x509.SubjectAlternativeName([alternative(h) for h in hosts]), False),
                         (x509.BasicConstraints(ca=False, path_length=None), True),
                         (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False))
    save_key(directory / "ca.key", ca_key)
    save_key(directory / "server.key", server_key)
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
