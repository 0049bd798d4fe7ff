"""Marking ledger hours for rebuild when the data behind them changes, and counting those still pending."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from finops.db.dialect import insert_ignoring_conflicts
from finops.db.models import DirtyHour, Job, LedgerEntry
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch, utc_now


def hours_between(start: datetime, end: datetime | None) -> range:
    """Epoch starts of the UTC hours that [start, end) touches; an open end runs to now."""
    stop = to_epoch(end) if end is not None else to_epoch(utc_now())
    return range(floor_hour(to_epoch(start)), max(stop, to_epoch(start) + 1), HOUR)


def mark_hours_dirty(session: Session, hours: Iterable[int]) -> None:
    """Queue the given hour starts (epoch seconds) for a ledger rebuild."""
    insert_ignoring_conflicts(session, DirtyHour.__table__, [{"hour": h} for h in sorted(set(hours))])  # type: ignore[arg-type]


def pending_hours(session: Session, start: datetime, end: datetime, now: datetime | None = None) -> int:
    """How many ledger hours touching [start, end) are marked dirty, waiting for a rollup to rebuild them.

    Left out: the current hour (of ``now``, default the clock's), which is always still being built, and the
    ledger's newest hour, which every rollup rebuilds and whose mark the rollup that built it keeps
    (:func:`finops.ledger.rollup.rollup` says why)."""
    stop = min(to_epoch(end), floor_hour(to_epoch(now or utc_now())))
    newest = session.scalar(select(func.max(LedgerEntry.hour)))
    query = select(func.count()).where(
        DirtyHour.hour >= from_epoch(floor_hour(to_epoch(start))), DirtyHour.hour < from_epoch(stop)
    )
    if newest is not None:
        query = query.where(DirtyHour.hour != newest)
    return int(session.scalar(query) or 0)


class HourMarks:
    """Ledger hours to mark dirty, gathered over a batch of changes (an import of thousands of jobs) and marked by
    one insert (:meth:`mark`) instead of one per job."""

    def __init__(self) -> None:
        self._hours: set[int] = set()

    def add(self, hours: Iterable[int]) -> None:
        """Gather hour starts (epoch seconds)."""
        self._hours.update(hours)

    def add_run(self, start: datetime | None, end: datetime | None) -> None:
        """Gather every hour of a job run [start, end) (aware UTC; ``end`` None: still running; none when it has
        not started)."""
        if start is not None:
            self._hours.update(hours_between(start, end))

    def add_job(self, job: Job) -> None:
        """Gather every hour ``job`` ran in (:meth:`add_run`)."""
        self.add_run(job.start, job.end)

    def mark(self, session: Session) -> None:
        """Mark the gathered hours dirty (:func:`mark_hours_dirty`) and forget them."""
        if self._hours:
            mark_hours_dirty(session, self._hours)
            self._hours.clear()
