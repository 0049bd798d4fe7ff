"""Which webhook URLs alerts may be posted to, how a URL is written in logs, and one JSON POST with its outcome.

A webhook URL is a secret (Slack's ``https://hooks.slack.com/services/T…/B…/…`` carries its token in the path)
and an SSRF vector (a URL pointing at ``169.254.169.254`` or an internal service). :class:`WebhookPolicy` allows
only HTTPS to listed hosts (default ``hooks.slack.com``) and refuses hosts that resolve to loopback, link-local,
private, multicast, reserved or unspecified addresses unless explicitly allowed. :func:`redact` is the only form
in which a URL appears in a log line or an error. :func:`post_json` is the one HTTP send of every HTTP channel
(Slack, Alertmanager) and says what its answer means for the outbox (:class:`Attempt`).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from collector.contract.retry_after import parse_retry_after
from finops.errors import FinopsError

DEFAULT_ALLOWED_HOSTS = frozenset({"hooks.slack.com"})

Resolver = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class Attempt:
    """The outcome of one delivery try: ``delivered``, ``failed`` (worth retrying) or ``refused`` (final).

    ``retry_after`` is the seconds the server asked to wait; ``reason`` is safe to log (no secret in it).
    """

    outcome: str
    reason: str = ""
    retry_after: float | None = None


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


def post_json(client: httpx.Client, url: str, body: Any, headers: Mapping[str, str] | None = None) -> Attempt:
    """POST ``body`` as JSON to ``url`` once (with ``headers``, e.g. ``Authorization``) and classify the answer:
    2xx ``delivered``; 429 and 5xx ``failed`` with the server's ``Retry-After``; a network error ``failed``; any
    other status (4xx, an unfollowed 3xx) ``refused``. The reason names the URL only as :func:`redact` writes it,
    with the start of the response body, never the headers."""
    try:
        response = client.post(url, json=body, headers=headers)
    except httpx.TransportError as exc:
        return Attempt("failed", f"{redact(url)}: network error {exc.__class__.__name__}")
    status = response.status_code
    if 200 <= status < 300:
        return Attempt("delivered")
    reason = f"{redact(url)}: HTTP {status} {response.text[:200]}"
    if status == 429 or status >= 500:
        return Attempt("failed", reason, parse_retry_after(response.headers.get("Retry-After")))
    return Attempt("refused", reason)
