"""Marking ledger hours for rebuild when the data behind them changes."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy.orm import Session

from finops.dialect import insert_ignoring_conflicts
from finops.models import DirtyHour, Job
from finops.timeutil import HOUR, floor_hour, to_epoch, utc_now


def hours_between(start: datetime, end: datetime | None) -> range:
    """Epoch starts of the UTC hours that [start, end) touches; an open end runs to now."""
    stop = to_epoch(end) if end is not None else to_epoch(utc_now())
    return range(floor_hour(to_epoch(start)), max(stop, to_epoch(start) + 1), HOUR)


def mark_hours_dirty(session: Session, hours: Iterable[int]) -> None:
    """Queue the given hour starts (epoch seconds) for a ledger rebuild."""
    insert_ignoring_conflicts(session, DirtyHour.__table__, [{"hour": h} for h in sorted(set(hours))])  # type: ignore[arg-type]


def mark_job_hours_dirty(session: Session, job: Job) -> None:
    """Queue every hour ``job`` ran in for a ledger rebuild."""
    if job.start is not None:
        mark_hours_dirty(session, hours_between(job.start, job.end))
