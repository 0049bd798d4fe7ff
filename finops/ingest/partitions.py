"""Raw samples by day: ``gpu_samples`` partitions on PostgreSQL, and the retention that expires them.

On PostgreSQL (from migration 0003) ``gpu_samples`` is ``PARTITION BY RANGE (ts)`` with one partition per UTC
day, ``gpu_samples_pYYYYMMDD`` holding ts in [that midnight, the next) (epoch seconds). There is no DEFAULT
partition: a row for a day without a partition is refused by PostgreSQL, so partitions are made before rows
arrive, two ways:

- on demand, by ingest (:class:`PartitionCache`): the days a batch touches are checked against a per-process
  cache of existing partitions (reloaded from the catalog on a miss); a missing day is created in the ingest
  transaction under a transaction-scoped advisory lock, with ``CREATE TABLE IF NOT EXISTS … PARTITION OF``,
  so two workers or processes needing the same new day wait for each other instead of failing;
- ahead of time, by the daily maintenance job (:func:`finops.service.scheduler.run_sample_maintenance` calling
  :func:`create_upcoming_partitions`): today's and the next two days' partitions, so that ingest at midnight
  finds its partition and takes no DDL lock.

Creating or dropping a partition takes an ACCESS EXCLUSIVE lock on ``gpu_samples`` for the rest of its
transaction (a few milliseconds): ingest waits that long. The maintenance job gives up after
``MAINTENANCE_LOCK_TIMEOUT`` rather than queue ingest behind a long query, and tries again next run.

Retention (:func:`prune_samples`) drops whole days older than the retention on PostgreSQL and deletes the same
rows on SQLite (one plain table there), never touching the ledger, and never a day holding or preceding
(within the ledger's energy lookback) an hour still waiting for a ledger rebuild. The per-job utilisation of
shared GPUs (``gpu_job_utilization``, a small unpartitioned table) and the nodes' hourly fabric and storage rates
(``node_io_hours``) go with the samples of the same instants and hours, by ``DELETE``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.orm import Session

from finops.db.ledger_tables import DirtyHour
from finops.db.models import GpuJobUtilization, GpuSample, IdleRunCarry, NodeIoHour
from finops.ledger.metering import ENERGY_LOOKBACK_SECONDS
from finops.timeutil import from_epoch, to_epoch

log = logging.getLogger(__name__)

DAY = 86_400
PARENT = "gpu_samples"
PARTITION_NAME = re.compile(r"^gpu_samples_p(\d{8})$")
ADVISORY_LOCK_KEY = 0x6770_7566_5F70_6172  # pg_advisory_xact_lock key serialising partition DDL ("gpuf_par")
DAYS_AHEAD = 2
MAINTENANCE_LOCK_TIMEOUT = "10s"


def floor_day(epoch: int) -> int:
    """Start (epoch seconds) of the UTC day holding ``epoch``."""
    return epoch - epoch % DAY


def partition_name(day: int) -> str:
    """``gpu_samples_pYYYYMMDD`` for the UTC day starting at ``day`` (epoch seconds, a midnight)."""
    return datetime.fromtimestamp(day, UTC).strftime("gpu_samples_p%Y%m%d")


def partition_day(name: str) -> int | None:
    """The day start (epoch seconds) a partition name stands for; None for any other table name."""
    found = PARTITION_NAME.match(name)
    if found is None:
        return None
    return to_epoch(datetime.strptime(found.group(1), "%Y%m%d").replace(tzinfo=UTC))


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic ``include_name`` hook: leave the daily partitions out of autogenerate comparisons (they are made
    at run time; the migrations and models describe only the partitioned ``gpu_samples``)."""
    return not (type_ == "table" and name is not None and partition_day(name) is not None)


def is_partitioned(connection: Connection) -> bool:
    """Whether ``gpu_samples`` is a partitioned table here (PostgreSQL at migration 0003 or later)."""
    if connection.dialect.name != "postgresql":
        return False
    kind = connection.execute(
        text("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(:parent)"), {"parent": PARENT}
    ).scalar()
    return kind == "p"


def existing_days(connection: Connection) -> set[int]:
    """Day starts (epoch seconds) of the partitions of ``gpu_samples`` that exist (PostgreSQL only)."""
    names = connection.execute(
        text("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
             "WHERE i.inhparent = to_regclass(:parent)"),
        {"parent": PARENT},
    ).scalars()  # fmt: skip
    return {day for name in names if (day := partition_day(name)) is not None}


def create_partitions(connection: Connection, days: Iterable[int]) -> list[str]:
    """Create the partitions of the given day starts that do not exist, in the caller's transaction; returns the
    names of those created. Serialised by a transaction-scoped advisory lock, so concurrent callers never fail
    on the same day; the lock and the ACCESS EXCLUSIVE lock on ``gpu_samples`` last until the caller commits.
    """
    wanted = sorted({floor_day(day) for day in days})
    if not wanted:
        return []
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
    present = existing_days(connection)
    created = []
    for day in wanted:
        if day in present:
            continue
        name = partition_name(day)
        bounds = f"FOR VALUES FROM ({day}) TO ({day + DAY})"
        connection.execute(text(f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{PARENT}" {bounds}'))
        created.append(name)
    if created:
        log.info("created gpu_samples partitions %s", ", ".join(created))
    return created


@dataclass
class PartitionCache:
    """Per-process knowledge of which day partitions exist, so that steady ingest asks the catalog nothing.

    ``ensure`` is called in the ingest transaction before the rows are written. A cached day can vanish (the
    retention job dropped it, or the transaction that created it rolled back): the insert then fails with
    PostgreSQL's "no partition … found for row" and the caller calls ``forget`` and tries once more.
    """

    _partitioned: bool | None = None
    _days: set[int] = field(default_factory=set)

    def ensure(self, session: Session, days: set[int]) -> None:
        """Make sure a partition exists for each day start in ``days`` (no-op on SQLite or an unpartitioned table)."""
        if self._partitioned is False or (days <= self._days and self._partitioned):
            return
        connection = session.connection()
        if self._partitioned is None:
            self._partitioned = is_partitioned(connection)
            if not self._partitioned:
                return
        self._days = existing_days(connection)
        missing = days - self._days
        if missing:
            create_partitions(connection, missing)
            self._days |= missing

    def lock_statement(self) -> str:
        """``LOCK TABLE gpu_samples IN ROW EXCLUSIVE MODE`` (what an insert takes anyway), or "" on SQLite or an
        unpartitioned table. Partition DDL locks ``gpu_samples`` before anything else (``gpus``, through its
        foreign key, and whatever the creating transaction writes next), so an ingest transaction takes it before
        writing ``gpus`` or ``ledger_dirty_hours``: one lock order, no deadlock."""
        return f'LOCK TABLE "{PARENT}" IN ROW EXCLUSIVE MODE' if self._partitioned else ""

    def lock_parent(self, session: Session) -> None:
        """Run :meth:`lock_statement` now (before the caller writes ``gpus``)."""
        if statement := self.lock_statement():
            session.execute(text(statement))

    def forget(self) -> None:
        """Drop what is cached; the next ``ensure`` asks the catalog again."""
        self._partitioned = None
        self._days = set()


@dataclass(frozen=True, slots=True)
class Pruned:
    """What :func:`prune_samples` removed: samples before ``before`` (a UTC midnight) are gone.

    ``partitions`` are the dropped day partitions (PostgreSQL); ``rows`` the deleted rows (SQLite; None when whole
    partitions were dropped, whose rows are not counted); ``job_utilization_rows`` the deleted
    ``gpu_job_utilization`` rows and ``node_io_rows`` the deleted ``node_io_hours`` rows (both databases).
    """

    before: datetime
    partitions: tuple[str, ...] = ()
    rows: int | None = None
    job_utilization_rows: int = 0
    node_io_rows: int = 0


def retention_floor(epoch: int, retention_days: int) -> int:
    """The UTC midnight ``retention_days`` whole days before the start of the day holding ``epoch`` (seconds): the
    oldest sample time retention keeps."""
    return floor_day(epoch) - retention_days * DAY


def retention_cutoff(session: Session, retention_days: int, now: datetime) -> int:
    """The epoch second (a UTC midnight) before which samples may go: ``retention_days`` whole days before the
    start of today, moved earlier to the day of the oldest dirty ledger hour less the ledger's energy lookback
    (1 h), so that every hour still to be rebuilt keeps its samples. Raises ValueError if ``retention_days`` < 1.
    """
    if retention_days < 1:
        raise ValueError(f"retention of {retention_days} days: keep at least 1 day of samples")
    cutoff = retention_floor(to_epoch(now), retention_days)
    oldest_dirty = session.scalar(select(func.min(DirtyHour.hour)))
    if oldest_dirty is not None:
        cutoff = min(cutoff, floor_day(to_epoch(oldest_dirty) - ENERGY_LOOKBACK_SECONDS))
    return cutoff


def prune_samples(session: Session, retention_days: int, now: datetime) -> Pruned:
    """Remove the samples older than the retention, in the caller's transaction (see :func:`retention_cutoff`).

    PostgreSQL: ``DROP TABLE`` of every day partition that ends at or before the cutoff (waiting at most
    ``MAINTENANCE_LOCK_TIMEOUT`` for its lock; psycopg's LockNotAvailable otherwise). SQLite: ``DELETE`` of the
    rows before the cutoff. Both: ``DELETE`` of the ``gpu_job_utilization`` rows and of the ``node_io_hours`` hours
    before the cutoff (a midnight: whole hours), and of the idle runs carried between re-judgings (``idle_run_carry``:
    they may hold runs of the readings removed; the next re-judging reads its periods whole). The ledger and every
    other table are left alone.
    """
    cutoff = retention_cutoff(session, retention_days, now)
    connection = session.connection()
    if is_partitioned(connection):
        connection.execute(text(f"SET LOCAL lock_timeout = '{MAINTENANCE_LOCK_TIMEOUT}'"))
        dropped = []
        for day in sorted(existing_days(connection)):
            if day + DAY <= cutoff:
                name = partition_name(day)
                connection.execute(text(f'DROP TABLE "{name}"'))
                dropped.append(name)
        if dropped:
            log.info("retention: dropped gpu_samples partitions %s", ", ".join(dropped))
        # after gpu_samples' lock, as ingest takes them: one lock order
        shares, rates = _prune_beside(session, cutoff)
        return Pruned(from_epoch(cutoff), tuple(dropped), job_utilization_rows=shares, node_io_rows=rates)
    result = session.execute(delete(GpuSample).where(GpuSample.ts < from_epoch(cutoff)))
    rows = int(getattr(result, "rowcount", 0) or 0)
    if rows:
        log.info("retention: deleted %d samples before %s", rows, from_epoch(cutoff).isoformat())
    shares, rates = _prune_beside(session, cutoff)
    return Pruned(from_epoch(cutoff), rows=rows, job_utilization_rows=shares, node_io_rows=rates)


def _prune_beside(session: Session, cutoff: int) -> tuple[int, int]:
    """Delete the ``gpu_job_utilization`` rows and ``node_io_hours`` hours before ``cutoff`` (epoch seconds), and the
    idle runs carried (all of them); returns how many of the first two went."""
    session.execute(delete(IdleRunCarry))
    deleted = []
    for what, statement in (
        ("per-job utilisation rows", delete(GpuJobUtilization).where(GpuJobUtilization.ts < from_epoch(cutoff))),
        ("node fabric and storage hours", delete(NodeIoHour).where(NodeIoHour.hour < from_epoch(cutoff))),
    ):
        rows = int(getattr(session.execute(statement), "rowcount", 0) or 0)
        if rows:
            log.info("retention: deleted %d %s before %s", rows, what, from_epoch(cutoff).isoformat())
        deleted.append(rows)
    return deleted[0], deleted[1]


def create_upcoming_partitions(session: Session, now: datetime, days_ahead: int = DAYS_AHEAD) -> list[str]:
    """Create the partitions of today and the next ``days_ahead`` UTC days if missing (PostgreSQL; no-op
    elsewhere), waiting at most ``MAINTENANCE_LOCK_TIMEOUT`` for the lock. Returns the names created."""
    connection = session.connection()
    if not is_partitioned(connection):
        return []
    connection.execute(text(f"SET LOCAL lock_timeout = '{MAINTENANCE_LOCK_TIMEOUT}'"))
    today = floor_day(to_epoch(now))
    return create_partitions(connection, [today + i * DAY for i in range(days_ahead + 1)])
