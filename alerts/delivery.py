"""The delivery worker: sends due outbox rows (:class:`alerts.models.AlertDelivery`) to Slack, SMTP and
Alertmanager.

One pass (:meth:`DeliveryWorker.run_once`):

1. Claim due rows in one statement (``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING …`` on
   PostgreSQL, so two workers never take the same row; SQLite runs the statement under its database write
   lock): the attempt count goes up and the row is leased (not due again) for :data:`LEASE`.
2. Send each claimed message outside any transaction (:func:`alerts.slack.post_to_slack`,
   :func:`alerts.mail.send_email`, :func:`alerts.alertmanager.post_alerts`).
3. Record each outcome in its own short transaction: ``delivered``; ``refused`` (an answer that will not change:
   HTTP 4xx other than 429, an SMTP 5xx, a refused destination; not retried); or a failure worth retrying
   (network error, HTTP 5xx or 429, SMTP 4xx): due again after the server's ``Retry-After`` if it gave one,
   else after a capped exponential backoff with full jitter (a uniform delay in [0, min(cap, base × 2^(n−1)))
   after attempt n: "Exponential Backoff And Jitter", AWS Architecture Blog, 2015), unless that is past the
   row's deadline: then ``failed``.

A worker that dies between sending and recording leaves the row leased; it is sent again when the lease ends
(at least once: the only window in which a message can be doubled, one HTTP round trip wide). Every attempt at a
row carries the same idempotency key (:func:`idempotency_key`, Slack's ``Idempotency-Key`` header), so a
receiver that keeps the keys it has seen gets each message once. With several schedulers the delivery job runs
on the holder of its lease only (:mod:`finops.service.leases`), and the claim above would keep two workers
apart anyway. Nothing here logs a webhook URL or the
SMTP password: errors are redacted (:func:`alerts.webhooks.redact`) and then scrubbed of every configured
secret, and httpx's request log lines are scrubbed the same way.
"""

from __future__ import annotations

import logging
import random
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from alerts.alertmanager import post_alerts, transports
from alerts.mail import SmtpSettings, send_email
from alerts.models import AlertDelivery
from alerts.render import payload_to_message
from alerts.slack import post_to_slack
from alerts.webhooks import Attempt, WebhookPolicy
from finops.settings.alerts import AlertmanagerTarget
from finops.timeutil import utc_now

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=2)
"""How long a claimed row is not handed to another worker: longer than any one send (HTTP 10 s, SMTP 30 s)."""
BATCH = 20
"""Rows claimed per pass."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with full jitter: after attempt n, wait uniform(0, min(cap, base × 2^(n−1)))."""

    base_seconds: float = 1.0
    cap_seconds: float = 300.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after attempt number ``attempt`` (1 for the first)."""
        ceiling = min(self.cap_seconds, self.base_seconds * 2 ** max(attempt - 1, 0))
        return rng.uniform(0, ceiling)


@dataclass(frozen=True)
class Channels:
    """Where messages can go: Slack webhooks by name (secrets), the webhook policy, the SMTP server (None: no
    e-mail), the HTTP timeout, Alertmanagers by name."""

    slack_webhooks: Mapping[str, SecretStr] = field(default_factory=dict)
    policy: WebhookPolicy = field(default_factory=WebhookPolicy)
    smtp: SmtpSettings | None = None
    http_timeout_seconds: float = 10.0
    alertmanagers: Mapping[str, AlertmanagerTarget] = field(default_factory=dict)

    def secrets(self) -> list[str]:
        """Every secret value that must never appear in a log line or a stored error."""
        found = []
        for url in self.slack_webhooks.values():
            value = url.get_secret_value()
            found.append(value)
            path = value.split("://", 1)[-1].partition("/")[2]
            if len(path) >= 8:
                found.append("/" + path)
        if self.smtp is not None and self.smtp.password:
            found.append(self.smtp.password)
        return [s for s in found if s]


def scrub(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``…`` (longest first)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "…")
    return text


class _ScrubSecrets(logging.Filter):
    """Rewrites a log record whose text holds a registered secret (httpx logs every request's full URL)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            text = record.getMessage()
            clean = scrub(text, sorted(self.secrets))
            if clean != text:
                record.msg, record.args = clean, None
        return True


_SCRUBBER = _ScrubSecrets()
logging.getLogger("httpx").addFilter(_SCRUBBER)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One delivery attempt's result: the row, its channel and target, ``delivered`` / ``refused`` / ``failed``
    (final) / ``retry`` (due again at ``next_attempt_at``), and the redacted reason."""

    id: int
    channel: str
    target: str
    status: str
    reason: str = ""
    next_attempt_at: datetime | None = None


def idempotency_key(row_id: int, created_at: datetime) -> str:
    """The key every attempt at outbox row ``row_id`` (queued at ``created_at``) is sent with:
    ``gpu-finops-alert-<id>-<created_at epoch seconds>`` (the instant tells apart rows of a database made anew)."""
    return f"gpu-finops-alert-{row_id}-{int(created_at.timestamp())}"


def send(
    channels: Channels,
    client: httpx.Client,
    channel: str,
    target: str,
    payload: Mapping[str, Any],
    key: str | None = None,
) -> Attempt:
    """Send one stored message (or Alertmanager update) once, a Slack message with ``key`` as its idempotency key;
    never raises (an unexpected error is a ``failed`` attempt named by its exception class only, since its text
    could carry a URL)."""
    try:
        if channel == "slack":
            url = channels.slack_webhooks.get(target)
            if url is None:
                return Attempt("refused", f"no Slack webhook named {target!r} is configured")
            return post_to_slack(client, url.get_secret_value(), payload_to_message(payload), channels.policy, key)
        if channel == "email":
            if channels.smtp is None:
                return Attempt("refused", "no SMTP server is configured (FINOPS_ALERT_SMTP_HOST)")
            recipients = [r.strip() for r in target.split(",") if r.strip()]
            return send_email(channels.smtp, payload_to_message(payload), recipients)
        if channel == "alertmanager":
            alertmanager = channels.alertmanagers.get(target)
            if alertmanager is None:
                return Attempt(
                    "refused", f"no Alertmanager named {target!r} is configured (FINOPS_ALERT_ALERTMANAGERS)"
                )
            return post_alerts(client, alertmanager, payload["alerts"])
        return Attempt("refused", f"unknown channel {channel!r}")
    except Exception as exc:  # a bug or an unforeseen library error must not stop the worker
        return Attempt("failed", f"{channel} {target}: unexpected {exc.__class__.__name__}")


class DeliveryWorker:
    """Sends due outbox rows (module docstring). ``clock`` and ``rng`` are injectable for tests."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        channels: Channels,
        *,
        backoff: Backoff = Backoff(),
        clock: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.sessions = sessions
        self.channels = channels
        self.backoff = backoff
        self.clock = clock
        self.rng = rng or random.Random()
        self.client = client or httpx.Client(
            timeout=channels.http_timeout_seconds,
            follow_redirects=False,
            mounts=transports(channels.alertmanagers.values()),
        )
        self._secrets = channels.secrets()
        _SCRUBBER.secrets.update(self._secrets)

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()

    def claim(self, ids: Sequence[int] | None = None, limit: int = BATCH) -> list[dict[str, Any]]:
        """Lease up to ``limit`` due pending rows (only those in ``ids`` when given) and return them."""
        now = self.clock()
        conditions = [AlertDelivery.status == "pending", AlertDelivery.next_attempt_at <= now]
        if ids is not None:
            conditions.append(AlertDelivery.id.in_(list(ids)))
        due = (
            select(AlertDelivery.id)
            .where(*conditions)
            .order_by(AlertDelivery.next_attempt_at, AlertDelivery.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        statement = (
            update(AlertDelivery)
            .where(AlertDelivery.id.in_(due.scalar_subquery()), AlertDelivery.status == "pending")
            .values(attempts=AlertDelivery.attempts + 1, next_attempt_at=now + LEASE)
            .returning(
                AlertDelivery.id,
                AlertDelivery.channel,
                AlertDelivery.target,
                AlertDelivery.payload,
                AlertDelivery.attempts,
                AlertDelivery.deadline,
                AlertDelivery.created_at,
            )
            .execution_options(synchronize_session=False)
        )
        with self.sessions.begin() as session:
            # Look before writing: an idle pass takes no write lock (SQLite has one for the whole database).
            if session.execute(select(AlertDelivery.id).where(*conditions).limit(1)).first() is None:
                return []
            return [dict(row._mapping) for row in session.execute(statement)]

    def run_once(self, ids: Sequence[int] | None = None, limit: int = BATCH) -> list[Outcome]:
        """Claim, send and record one batch of due rows; returns their outcomes."""
        outcomes = []
        for row in self.claim(ids, limit):
            key = idempotency_key(row["id"], row["created_at"])
            attempt = send(self.channels, self.client, row["channel"], row["target"], row["payload"], key)
            outcomes.append(self._record(row, attempt))
        return outcomes

    def _record(self, row: dict[str, Any], attempt: Attempt) -> Outcome:
        finished = self.clock()
        reason = scrub(attempt.reason, self._secrets)
        values: dict[str, Any] = {"last_attempt_at": finished, "last_error": reason or None}
        next_at = None
        if attempt.outcome == "delivered":
            status = "delivered"
            values |= {"status": "delivered", "delivered_at": finished, "last_error": None}
        elif attempt.outcome == "refused":
            status = "refused"
            values |= {"status": "refused"}
        else:
            wait = attempt.retry_after if attempt.retry_after is not None else None
            if wait is None:
                wait = self.backoff.delay(row["attempts"], self.rng)
            next_at = finished + timedelta(seconds=wait)
            if next_at > row["deadline"]:
                status, next_at = "failed", None
                values |= {"status": "failed", "next_attempt_at": finished}
            else:
                status = "retry"
                values |= {"next_attempt_at": next_at}
        with self.sessions.begin() as session:
            session.execute(
                update(AlertDelivery)
                .where(AlertDelivery.id == row["id"], AlertDelivery.attempts == row["attempts"])
                .values(**values)
            )
        level = logging.INFO if status in ("delivered", "retry") else logging.WARNING
        log.log(
            level,
            "alert delivery %d (%s → %s) attempt %d: %s%s",
            row["id"],
            row["channel"],
            row["target"],
            row["attempts"],
            status,
            f": {reason}" if reason else "",
        )
        return Outcome(row["id"], row["channel"], row["target"], status, reason, next_at)


def smtp_context(ca_file: Path | None) -> ssl.SSLContext | None:
    """A TLS context trusting the PEM bundle ``ca_file`` (None: the system store, left to :mod:`alerts.mail`)."""
    return ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else None
