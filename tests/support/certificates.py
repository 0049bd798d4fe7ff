"""A throwaway certificate authority (trustme) and a server certificate it signed, for tests over real TLS."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

SERVER_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True, slots=True)
class PemFiles:
    """The CA and the server's certificate chain and private key, as PEM files."""

    ca: Path
    cert: Path
    key: Path


class Certificates:
    """A throwaway CA and a certificate for 127.0.0.1 and localhost: the server's context, a client context trusting
    the CA, the CA as PEM (for ``FINOPS_ALERT_SMTP_CA_FILE``), and :meth:`write` for servers that take files."""

    def __init__(self) -> None:
        ca = trustme.CA()
        self._issued = ca.issue_cert(*SERVER_NAMES)
        self.server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._issued.configure_cert(self.server)
        self.client = ssl.create_default_context()
        ca.configure_trust(self.client)
        self.ca_pem = ca.cert_pem.bytes()

    def write(self, directory: Path) -> PemFiles:
        """Write ``ca.pem``, ``cert.pem`` (the server's chain) and ``key.pem`` into ``directory``; returns the paths."""
        files = PemFiles(directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
        files.ca.write_bytes(self.ca_pem)
        files.cert.write_bytes(b"".join(pem.bytes() for pem in self._issued.cert_chain_pems))
        self._issued.private_key_pem.write_to_path(str(files.key))
        return files
