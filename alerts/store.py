"""Reading and managing what the alerts package keeps: alerts, silences, deliveries (for the CLI and the API).

Every function works in the caller's session and transaction; times are aware UTC. Changes (silences made and
expired, deliveries retried) are written to the audit log (:mod:`finops.access.audit`) in that transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from alerts.engine import active_silences, is_muted
from alerts.matchers import parse_matcher
from alerts.models import AlertDelivery, AlertInstance, AlertSilence
from finops.access import audit

RETRIABLE = ("failed", "refused")
FINISHED = ("delivered", *RETRIABLE)
"""Outbox statuses no delivery attempt will change unless retried by hand (``alerts retry``): what
:func:`prune_deliveries` may remove."""


@dataclass(frozen=True, slots=True)
class AlertView:
    """An alert as listed: identity, state, [starts_at, ends_at), its title and summary, whether muted now."""

    fingerprint: str
    rule: str
    severity: str
    state: str
    labels: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None
    title: str
    summary: str
    muted: bool


def list_alerts(
    session: Session, now: datetime, state: Literal["firing", "resolved", "all"] = "firing"
) -> list[AlertView]:
    """Alerts in ``state``, newest first; ``muted`` tells whether a silence or an inhibition holds one back."""
    return select_alerts(session, now, state)


def select_alerts(
    session: Session,
    now: datetime,
    state: Literal["firing", "resolved", "all"] = "firing",
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    team: str | None = None,
) -> list[AlertView]:
    """:func:`list_alerts` narrowed to a period and a team, newest first (the dashboard's Alerts page), filtered
    in the query.

    ``start`` / ``end``: only alerts that held at some instant of [start, end): ``starts_at < end`` and ``ends_at``
    None (still firing) or after ``start``; either bound None leaves that side open. ``team``: only alerts whose
    ``team`` label is ``team``; alerts without a team label (collector-silent, gpu-lost, data-quality) are left
    out. Resolved alerts are deleted :data:`alerts.engine.RESOLVED_RETENTION` after they end, so older history
    is empty."""
    query = select(AlertInstance).order_by(AlertInstance.starts_at.desc(), AlertInstance.fingerprint)
    if state != "all":
        query = query.where(AlertInstance.state == state)
    if end is not None:
        query = query.where(AlertInstance.starts_at < end)
    if start is not None:
        query = query.where(AlertInstance.ends_at.is_(None) | (AlertInstance.ends_at > start))
    if team is not None:
        query = query.where(AlertInstance.labels["team"].as_string() == team)
    instances = session.scalars(query).all()
    silences = active_silences(session, now)
    firing = [dict(i.labels) for i in session.scalars(select(AlertInstance).where(AlertInstance.state == "firing"))]
    return [
        AlertView(
            fingerprint=i.fingerprint,
            rule=i.rule,
            severity=i.severity,
            state=i.state,
            labels=dict(i.labels),
            starts_at=i.starts_at,
            ends_at=i.ends_at,
            title=str(i.annotations.get("title", i.rule)),
            summary=str(i.annotations.get("summary", "")),
            muted=i.state == "firing" and is_muted(i, silences, firing, now),
        )
        for i in instances
    ]


@dataclass(frozen=True, slots=True)
class SilenceView:
    """A silence: matchers (Alertmanager syntax), [starts_at, ends_at), who made it and why."""

    id: int
    matchers: list[str]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    active: bool


MAX_SILENCE = timedelta(days=366)
"""Longest silence: from its start (or now, if it starts later) to its end, at most a year, leap years too. A
longer one is a rule switched off, which the alert configuration says openly (``rules.<rule>.enabled``)."""


def create_silence(
    session: Session,
    matchers: Sequence[str],
    ends_at: datetime,
    now: datetime,
    *,
    starts_at: datetime | None = None,
    created_by: str = "",
    comment: str = "",
    actor: str,
) -> int:
    """Store a silence from ``starts_at`` (default ``now``) until ``ends_at``; returns its id. Audited as
    ``silence.create`` by ``actor`` (after: the silence; ``created_by`` is the name the silence shows, ``actor``
    who made it).

    ValueError naming the problem: no matcher, a matcher that does not parse, an end not after the start or
    already past, a silence longer than :data:`MAX_SILENCE` or ending more than that after ``now``; nothing is
    written then."""
    if not matchers:
        raise ValueError('a silence needs at least one matcher, e.g. team="vision"')
    for text in matchers:
        parse_matcher(text)
    start = starts_at or now
    if ends_at <= start:
        raise ValueError(f"the end {ends_at.isoformat()} is not after the start {start.isoformat()}")
    if ends_at <= now:
        raise ValueError(f"the end {ends_at.isoformat()} is already past")
    if ends_at - min(start, now) > MAX_SILENCE:
        raise ValueError(
            f"the end {ends_at.isoformat()} is more than {MAX_SILENCE.days} days after the start or now: a silence "
            "lasts at most a year (create a new one when it ends)"
        )
    row = AlertSilence(
        matchers=[m.strip() for m in matchers],
        starts_at=start,
        ends_at=ends_at,
        created_by=created_by[:128],
        comment=comment,
        created_at=now,
    )
    session.add(row)
    session.flush()
    audit.record(session, actor, "silence.create", f"silence {row.id}", None, _silence_state(row), now)
    return row.id


def _silence_state(silence: AlertSilence) -> dict[str, Any]:
    """``silence`` as the audit log keeps it: id, matchers, starts_at and ends_at (ISO 8601), created_by, comment."""
    return {
        "id": silence.id,
        "matchers": list(silence.matchers),
        "starts_at": audit.iso(silence.starts_at),
        "ends_at": audit.iso(silence.ends_at),
        "created_by": silence.created_by,
        "comment": silence.comment,
    }


def list_silences(session: Session, now: datetime, *, include_expired: bool = False) -> list[SilenceView]:
    """Silences not yet ended at ``now`` (all of them with ``include_expired``), ending soonest first."""
    query = select(AlertSilence).order_by(AlertSilence.ends_at, AlertSilence.id)
    if not include_expired:
        query = query.where(AlertSilence.ends_at > now)
    return [
        SilenceView(
            s.id, list(s.matchers), s.starts_at, s.ends_at, s.created_by, s.comment, s.starts_at <= now < s.ends_at
        )
        for s in session.scalars(query)
    ]


def expire_silence(session: Session, silence_id: int, now: datetime, *, actor: str) -> bool:
    """End silence ``silence_id`` at ``now``; False if there is none or it has already ended (no audit entry then).
    Audited as ``silence.expire`` by ``actor``: the silence before and after."""
    silence = session.get(AlertSilence, silence_id)
    if silence is None or silence.ends_at <= now:
        return False
    before = _silence_state(silence)
    silence.ends_at = max(now, silence.starts_at)
    session.flush()
    audit.record(session, actor, "silence.expire", f"silence {silence_id}", before, _silence_state(silence), now)
    return True


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """An outbox row as listed (no secret: the target is a webhook name or the recipients)."""

    id: int
    channel: str
    target: str
    title: str
    status: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    deadline: datetime
    last_attempt_at: datetime | None
    delivered_at: datetime | None
    last_error: str | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        return out


def list_deliveries(session: Session, statuses: Sequence[str] = RETRIABLE, *, limit: int = 200) -> list[DeliveryView]:
    """Outbox rows in ``statuses``, newest first (at most ``limit``)."""
    query = (
        select(AlertDelivery)
        .where(AlertDelivery.status.in_(list(statuses)))
        .order_by(AlertDelivery.id.desc())
        .limit(limit)
    )
    return [
        DeliveryView(
            d.id,
            d.channel,
            d.target,
            d.title,
            d.status,
            d.attempts,
            d.created_at,
            d.next_attempt_at,
            d.deadline,
            d.last_attempt_at,
            d.delivered_at,
            d.last_error,
        )
        for d in session.scalars(query)
    ]


def retry_deliveries(
    session: Session, now: datetime, deadline: timedelta, ids: Sequence[int] | None = None, *, actor: str
) -> list[int]:
    """Put failed or refused deliveries back in the queue (due now, a fresh ``deadline``): those in ``ids``, or
    every one when ``ids`` is None. Returns the ids queued again; other ids (delivered, pending, unknown) are
    left as they are.

    Audited as one ``delivery.retry`` by ``actor`` when any is queued again: before, the ids by status (``failed``,
    ``refused``); after, the ids ``pending`` with their ``next_attempt_at`` and ``deadline``."""
    query = select(AlertDelivery.id, AlertDelivery.status).where(AlertDelivery.status.in_(RETRIABLE))
    if ids is not None:
        query = query.where(AlertDelivery.id.in_(list(ids)))
    statuses = {delivery_id: status for delivery_id, status in session.execute(query)}
    chosen = sorted(statuses)
    if chosen:
        session.execute(
            update(AlertDelivery)
            .where(AlertDelivery.id.in_(chosen), AlertDelivery.status.in_(RETRIABLE))
            .values(status="pending", next_attempt_at=now, deadline=now + deadline)
        )
        before = {status: [i for i in chosen if statuses[i] == status] for status in RETRIABLE}
        after = {"pending": chosen, "next_attempt_at": audit.iso(now), "deadline": audit.iso(now + deadline)}
        subject = f"deliveries {', '.join(map(str, chosen))}"
        audit.record(session, actor, "delivery.retry", subject, before, after, now)
    return chosen


def prune_deliveries(session: Session, before: datetime) -> int:
    """Remove the outbox rows queued before ``before`` whose delivery is over (:data:`FINISHED`), in the caller's
    transaction; returns how many. Pending rows stay whatever their age. What makes a message once-only lives
    elsewhere (alert groups, ``nudge_log``, ``showback_statements``), so a removed row is never sent again."""
    statement = delete(AlertDelivery).where(AlertDelivery.status.in_(FINISHED), AlertDelivery.created_at < before)
    return int(getattr(session.execute(statement), "rowcount", 0) or 0)
