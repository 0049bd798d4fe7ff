"""The TLS of ``gpu-finops serve``: its certificate chain and private key, checked before the server starts, and
whether the address it listens on keeps plain HTTP on this machine.

uvicorn loads the same two PEM files itself; checking them first turns a missing file, a file that is not PEM or a
key of another certificate into one line naming the file, instead of OpenSSL's ``[SSL] PEM lib`` in a traceback.
"""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

from finops.errors import FinopsError


def check_server_tls(cert_file: Path, key_file: Path) -> None:
    """Check that ``cert_file`` holds a PEM certificate chain and ``key_file`` the unencrypted PEM private key of its
    first certificate. Returns nothing; raises FinopsError naming the file at fault: it cannot be read, it is not PEM
    text, it holds no certificate, or the key is not that certificate's (or is encrypted: uvicorn would ask for its
    pass phrase on the terminal)."""
    chain = _pem_text(cert_file, "certificate")
    _pem_text(key_file, "private key")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=chain)
    except ssl.SSLError as exc:
        raise FinopsError(f"TLS certificate {cert_file}: no PEM certificate in it") from exc
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_file, key_file, password="")
    except ssl.SSLError as exc:
        raise FinopsError(
            f"TLS private key {key_file}: not the unencrypted PEM private key of the certificate in {cert_file} "
            f"({exc.reason or exc})"
        ) from exc


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` (an address or a name, as ``serve --host`` takes it) admits this machine only:
    ``localhost`` or a loopback address (127.0.0.0/8, ::1). Any other name, and the wildcard addresses, are not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _pem_text(path: Path, what: str) -> str:
    """The text of ``path``; FinopsError naming it (``TLS <what> <path>: <reason>``) when it cannot be read as text."""
    try:
        return path.read_text()
    except OSError as exc:
        raise FinopsError(f"TLS {what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise FinopsError(f"TLS {what} {path}: not PEM text") from exc
