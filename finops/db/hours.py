"""Marking ledger hours for rebuild when the data behind them changes, counting those still pending, and telling
when the ledger was last built before the newest job import (its numbers leave that import's jobs out)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from finops.db.dialect import insert_ignoring_conflicts, insert_new_keys
from finops.db.ledger_tables import DirtyHour, LedgerEntry, RepricedHour
from finops.db.models import Job, Watermark
from finops.timeutil import HOUR, floor_hour, from_epoch, to_epoch, utc_now

LEDGER_WATERMARK = "ledger"
"""The :class:`Watermark` row of the ledger: the instant the last rollup built it up to (its ``until``)."""
IMPORT_WATERMARK_PREFIX = "sacct:"
"""The watermarks of the scheduled job imports (``sacct:<cluster>``): each the instant its last run read up to."""
ROLLUP_COMMAND = "gpu-finops rollup"


def hours_between(start: datetime, end: datetime | None) -> range:
    """Epoch starts of the UTC hours that [start, end) touches; an open end runs to now."""
    stop = to_epoch(end) if end is not None else to_epoch(utc_now())
    return range(floor_hour(to_epoch(start)), max(stop, to_epoch(start) + 1), HOUR)


def mark_hours_dirty(session: Session, hours: Iterable[int]) -> None:
    """Queue the given hour starts (epoch seconds) for a ledger rebuild."""
    insert_ignoring_conflicts(session, DirtyHour.__table__, [{"hour": h} for h in sorted(set(hours))])  # type: ignore[arg-type]


def mark_hours_repriced(session: Session, hours: Iterable[int]) -> None:
    """Queue the given hour starts (epoch seconds) for a ledger rebuild because prices changed (a catalog import, a
    pricing rule), as :func:`mark_hours_dirty` does, and keep those not already dirty for new data in
    :class:`RepricedHour`: the rollup that rebuilds them re-prices their idle episodes instead of judging them again
    (:func:`finops.analysis.idle_prices.claim_repriced_hours`). On PostgreSQL the dirty marks are locked against
    other writers until this transaction ends (``SHARE ROW EXCLUSIVE``), so that a mark of new data committed
    meanwhile is made after this one, and takes its hour out of :class:`RepricedHour` (migration 0028's trigger)."""
    wanted = sorted(set(hours))
    if not wanted:
        return
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"LOCK TABLE {DirtyHour.__tablename__} IN SHARE ROW EXCLUSIVE MODE"))
    chosen = set(wanted)
    kept = {
        to_epoch(h)
        for h in session.scalars(
            select(RepricedHour.hour).where(
                RepricedHour.hour >= from_epoch(wanted[0]), RepricedHour.hour <= from_epoch(wanted[-1])
            )
        )
    } & chosen  # the trigger takes them out when they are marked dirty again below
    table: Any = DirtyHour.__table__
    fresh = {to_epoch(hour) for (hour,) in insert_new_keys(session, table, [{"hour": h} for h in wanted])}
    repriced: Any = RepricedHour.__table__
    insert_ignoring_conflicts(session, repriced, [{"hour": h} for h in sorted(fresh | kept)])


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


def ledger_built_until(session: Session) -> datetime | None:
    """The instant the last rollup built the ledger up to (the :data:`LEDGER_WATERMARK`); None before the first. Read
    through the session's identity map: the value this session saw first (ingest, whose session outlives a rollup's
    commit, reads it afresh by query)."""
    mark = session.get(Watermark, LEDGER_WATERMARK)
    return None if mark is None else mark.value


def mark_ledger_built(session: Session, until: datetime) -> None:
    """Record that a rollup built the ledger up to ``until`` (the :data:`LEDGER_WATERMARK`), in its transaction."""
    mark = session.get(Watermark, LEDGER_WATERMARK)
    if mark is None:
        session.add(Watermark(name=LEDGER_WATERMARK, value=until))
    else:
        mark.value = until


@dataclass(frozen=True, slots=True)
class StaleLedger:
    """A job import newer than the ledger: ``source`` (its watermark, ``sacct:<cluster>``) read jobs up to
    ``imported_at``, after the last rollup built the ledger up to ``built_to`` (None: no rollup since this was
    recorded, or ever)."""

    source: str
    imported_at: datetime
    built_to: datetime | None

    @property
    def hint(self) -> str:
        """One line: what is out of date, and the command that brings it up to date."""
        built = (
            "has not been built since"
            if self.built_to is None
            else f"was built up to {self.built_to:%Y-%m-%d %H:%M:%S} UTC, before"
        )
        return (
            f"note: the ledger {built} the last job import ({self.source} at {self.imported_at:%Y-%m-%d %H:%M:%S} "
            f"UTC): the current hour's numbers leave that import's jobs out; run {ROLLUP_COMMAND} to bring it up to "
            "date"
        )

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: ``{import, imported_at, ledger_built_to, fix}``, instants ISO 8601 UTC."""
        return {
            "import": self.source,
            "imported_at": self.imported_at.isoformat(),
            "ledger_built_to": None if self.built_to is None else self.built_to.isoformat(),
            "fix": ROLLUP_COMMAND,
        }


def stale_ledger(session: Session, end: datetime) -> StaleLedger | None:
    """The newest job import (:data:`IMPORT_WATERMARK_PREFIX` watermarks) that read jobs after the last rollup built
    the ledger up to its :data:`LEDGER_WATERMARK`, when a period ending at ``end`` reaches the hour that rollup
    built last (its jobs may be missing from it); None when no import is newer, or the period ends before.

    Hours before that one that the import changed are marked dirty, and :func:`pending_hours` counts them; the hour
    the ledger was last built into is always marked (the rollup keeps its mark), so only this tells that its
    numbers predate an import."""
    built_to = ledger_built_until(session)
    if built_to is not None and to_epoch(end) <= floor_hour(to_epoch(built_to)):
        return None
    newest = session.execute(
        select(Watermark.name, Watermark.value)
        .where(Watermark.name.startswith(IMPORT_WATERMARK_PREFIX, autoescape=True))
        .order_by(Watermark.value.desc(), Watermark.name)
        .limit(1)
    ).first()
    if newest is None or (built_to is not None and newest.value <= built_to):
        return None
    return StaleLedger(newest.name, newest.value, built_to)


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
