"""Marking ledger hours for rebuild when the data behind them changes."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy.orm import Session

from finops.db.dialect import insert_ignoring_conflicts
from finops.db.models import DirtyHour, Job
from finops.timeutil import HOUR, floor_hour, to_epoch, utc_now


def hours_between(start: datetime, end: datetime | None) -> range:
    """Epoch starts of the UTC hours that [start, end) touches; an open end runs to now."""
    stop = to_epoch(end) if end is not None else to_epoch(utc_now())
    return range(floor_hour(to_epoch(start)), max(stop, to_epoch(start) + 1), HOUR)


def mark_hours_dirty(session: Session, hours: Iterable[int]) -> None:
    """Queue the given hour starts (epoch seconds) for a ledger rebuild."""
    insert_ignoring_conflicts(session, DirtyHour.__table__, [{"hour": h} for h in sorted(set(hours))])  # type: ignore[arg-type]


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
