"""Events: facts the alerts package must hear of exactly once (budget thresholds crossed, spend anomalies).

An event is recorded under a ``dedupe_key`` that names what happened (``budget:alpha::2026-11:80``): recording
the same fact again, on every scheduler run, stores nothing new. A consumer takes the unconsumed events in
id order and marks them consumed in the same transaction (:func:`take_events`), so each is delivered once
even across restarts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from finops.db.dialect import insert_ignoring_conflicts
from finops.db.models import Event, Team
from finops.timeutil import to_epoch

BUDGET_THRESHOLD = "budget_threshold"
BUDGET_FORECAST = "budget_forecast"
SPEND_ANOMALY = "spend_anomaly"
EVENT_KINDS = (BUDGET_THRESHOLD, BUDGET_FORECAST, SPEND_ANOMALY)


@dataclass(frozen=True, slots=True)
class EventView:
    """An event as consumers read it: ``payload`` holds its figures, money as decimal strings."""

    id: int
    kind: str
    dedupe_key: str
    team: str | None
    occurred_at: datetime
    payload: dict[str, Any]
    consumed_at: datetime | None


def record_event(
    session: Session, kind: str, dedupe_key: str, team_id: int | None, at: datetime, payload: dict[str, Any]
) -> None:
    """Store an event unless one with ``dedupe_key`` exists (then nothing changes). ValueError for an unknown
    kind. ``payload`` must be JSON-serialisable (money as strings)."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"event kind must be one of {', '.join(EVENT_KINDS)}, not {kind!r}")
    insert_ignoring_conflicts(
        session,
        Event.__table__,  # type: ignore[arg-type]
        [{"kind": kind, "dedupe_key": dedupe_key, "team_id": team_id, "occurred_at": to_epoch(at), "payload": payload}],
    )


def list_events(
    session: Session,
    *,
    since: datetime | None = None,
    kind: str | None = None,
    unconsumed: bool = False,
    team: str | None = None,
) -> list[EventView]:
    """Events in id order, optionally only those at or after ``since``, of one ``kind``, not yet consumed, or of
    ``team`` (events of no team, if any, are then left out)."""
    query = select(Event, Team.name).outerjoin(Team, Team.id == Event.team_id).order_by(Event.id)
    if since is not None:
        query = query.where(Event.occurred_at >= since)
    if kind is not None:
        query = query.where(Event.kind == kind)
    if unconsumed:
        query = query.where(Event.consumed_at.is_(None))
    if team is not None:
        query = query.where(Team.name == team)
    return [
        EventView(e.id, e.kind, e.dedupe_key, team, e.occurred_at, dict(e.payload), e.consumed_at)
        for e, team in session.execute(query)
    ]


def take_events(session: Session, at: datetime) -> list[EventView]:
    """The unconsumed events, marked consumed at ``at`` in the caller's transaction: committed together with
    what the consumer does with them, each event is taken once."""
    events = list_events(session, unconsumed=True)
    if events:
        session.execute(update(Event).where(Event.id.in_([e.id for e in events])).values(consumed_at=at))
    return events
