"""Which webhook URLs alerts may be posted to, and how a URL is written in logs.

A webhook URL is a secret (Slack's ``https://hooks.slack.com/services/T…/B…/…`` carries its token in the path)
and an SSRF vector (a URL pointing at ``169.254.169.254`` or an internal service). :class:`WebhookPolicy` allows
only HTTPS to listed hosts (default ``hooks.slack.com``) and refuses hosts that resolve to loopback, link-local,
private, multicast, reserved or unspecified addresses unless explicitly allowed. :func:`redact` is the only form
in which a URL appears in a log line or an error.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from finops.errors import FinopsError

DEFAULT_ALLOWED_HOSTS = frozenset({"hooks.slack.com"})

Resolver = Callable[[str], list[str]]


class WebhookRefused(FinopsError, ValueError):
    """The URL is not allowed by the policy; the message names the redacted URL and the reason."""


def redact(url: str) -> str:
    """``scheme://host[:port]/…``: the URL without its path, query or credentials."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…"


def resolve(host: str) -> list[str]:
    """Every address ``host`` resolves to (``socket.getaddrinfo``)."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    """Allowed webhook destinations.

    Attributes:
        allowed_hosts: host names (exact, case-insensitive) a webhook may point to.
        allow_private_addresses: permit hosts resolving to loopback/link-local/private addresses (tests use
            127.0.0.1); also permits plain ``http`` to such hosts.
        resolver: name → addresses; injectable for tests.
    """

    allowed_hosts: frozenset[str] = DEFAULT_ALLOWED_HOSTS
    allow_private_addresses: bool = False
    resolver: Resolver = field(default=resolve)

    def check(self, url: str) -> None:
        """Raise :class:`WebhookRefused` unless ``url`` may be posted to."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if host not in {h.lower() for h in self.allowed_hosts}:
            raise WebhookRefused(f"{redact(url)}: host {host!r} is not in the webhook allow-list")
        if parts.username or parts.password:
            raise WebhookRefused(f"{redact(url)}: credentials in a webhook URL are refused")
        try:
            addresses = [ipaddress.ip_address(a) for a in self.resolver(host)]
        except (OSError, ValueError) as exc:
            raise WebhookRefused(f"{redact(url)}: cannot resolve {host!r}: {exc}") from exc
        internal = [a for a in addresses if not a.is_global]
        if internal and not self.allow_private_addresses:
            raise WebhookRefused(f"{redact(url)}: {host!r} resolves to non-public address {internal[0]}")
        if parts.scheme != "https" and not (parts.scheme == "http" and self.allow_private_addresses and internal):
            raise WebhookRefused(f"{redact(url)}: webhooks must use https")
