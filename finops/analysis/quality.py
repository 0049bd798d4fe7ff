"""Data quality: how fresh each node's readings are, which nodes' readings ingest refused for their time (a clock
off), and how much of the GPU time is attributed and metered.

Attribution and metering come from the cost report (:func:`finops.analysis.report.cost_report`); freshness is the newest
reading per node in ``gpu_samples``; why the rest of the GPU time is not attributed (:func:`unattributed_causes`) from
the ledger's ``__unallocated__`` rows and the readings of their GPU-hours; which nodes' GPU time has no reading at all
(:func:`without_readings`) from the ledger's unmetered rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, ScalarSelect, and_, case, func, or_, select, type_coerce
from sqlalchemy.orm import Session

from finops.analysis.report import UNALLOCATED_TEAM, ReportRow
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, GpuSample, Node, Team, UntimelyReadings
from finops.timeutil import HOUR, from_epoch, to_epoch


@dataclass(frozen=True, slots=True)
class NodeFreshness:
    """One node: its GPUs, the newest reading of any of them (None if never), and seconds since it at ``now``."""

    node: str
    gpus: int
    last_reading: datetime | None
    silent_seconds: float | None


def newest_reading(since: int | None = None) -> ScalarSelect[int]:
    """``(SELECT max(ts) FROM gpu_samples WHERE gpu_id = gpus.id [AND ts >= since])``, epoch seconds, correlated
    to a query over :class:`Gpu`: a backward seek on the (gpu_id, ts) primary key per GPU, and on PostgreSQL
    in the newest day partition that has one, not a scan of the readings."""
    ts = type_coerce(GpuSample.ts, BigInteger)
    query = select(func.max(ts)).where(GpuSample.gpu_id == Gpu.id)
    return (query if since is None else query.where(ts >= since)).scalar_subquery()


def node_freshness(session: Session, now: datetime) -> list[NodeFreshness]:
    """Every node, the most silent first (nodes that never reported first of all)."""
    per_gpu = select(Gpu.node_id, Gpu.id, newest_reading().label("last")).subquery()
    rows = session.execute(
        select(Node.hostname, func.count(per_gpu.c.id), func.max(per_gpu.c.last))
        .join(per_gpu, per_gpu.c.node_id == Node.id)
        .group_by(Node.id, Node.hostname)
    ).all()
    found = []
    for hostname, gpus, last_epoch in rows:
        last = None if last_epoch is None else from_epoch(int(last_epoch))
        silent = (now - last).total_seconds() if last is not None else None
        found.append(NodeFreshness(hostname, int(gpus), last, silent))
    return sorted(found, key=lambda f: (f.silent_seconds is not None, -(f.silent_seconds or 0), f.node))


@dataclass(frozen=True, slots=True)
class UntimelyNode:
    """A node whose readings ingest refused for their time (:mod:`finops.ingest.untimely`): ``reason`` ``future``
    (its clock fast) or ``too_old``; ``readings`` refused from ``first_at`` to ``last_at``; ``last_error`` says how
    far off the newest was."""

    node: str
    reason: str
    readings: int
    first_at: datetime
    last_at: datetime
    last_error: str


def untimely_by_node(session: Session, since: datetime) -> list[UntimelyNode]:
    """The nodes with readings refused for their time last at or after ``since``, the most recent first."""
    rows = session.scalars(
        select(UntimelyReadings)
        .where(UntimelyReadings.last_at >= since)
        .order_by(UntimelyReadings.last_at.desc(), UntimelyReadings.node, UntimelyReadings.reason)
    )
    return [UntimelyNode(r.node, r.reason, r.readings, r.first_at, r.last_at, r.last_error) for r in rows]


@dataclass(frozen=True, slots=True)
class Coverage:
    """Shares of a period's GPU time: held by a job (attributed) and, of that, with readings (metered)."""

    capacity_gpu_seconds: int
    attributed_share: float
    metered_share: float
    unmetered_gpu_seconds: int


def coverage(rows: Sequence[ReportRow]) -> Coverage:
    """:class:`Coverage` of the team rows of a cost report (``__unallocated__`` is capacity no job held)."""
    capacity = sum(row.allocated_gpu_seconds for row in rows)
    held = [row for row in rows if row.key != UNALLOCATED_TEAM]
    attributed = sum(row.allocated_gpu_seconds for row in held)
    unmetered = sum(row.unmetered_gpu_seconds for row in held)
    return Coverage(
        capacity_gpu_seconds=capacity,
        attributed_share=attributed / capacity if capacity else 0.0,
        metered_share=(attributed - unmetered) / attributed if attributed else 0.0,
        unmetered_gpu_seconds=unmetered,
    )


@dataclass(frozen=True, slots=True)
class UnattributedCauses:
    """The GPU time of a period that no job held (the ledger's ``__unallocated__`` rows), in GPU-seconds, by cause.

    ``unknown_job_gpu_seconds``: a job was on the GPU that no imported job accounts for. Counted in the GPU-hours
    no job held at all (the GPU-hour's only ledger row is ``__unallocated__``): each such hour's seconds × the share
    of its readings that carry a job id or show the GPU busy (utilisation above the idle threshold). The job import
    (sacct, Kubernetes) is failing, or the collectors' job ids are not those of the imported jobs.

    ``no_job_gpu_seconds``: the rest, no job on the GPU: readings with no job id and the GPU idle, no readings at
    all, and the unheld part of GPU-hours a job held for the other part (the gap at a job's start or end). Idle
    capacity between jobs: normal.
    """

    no_job_gpu_seconds: float
    unknown_job_gpu_seconds: float


def unattributed_causes(session: Session, start: datetime, end: datetime, idle_threshold: float) -> UnattributedCauses:
    """:class:`UnattributedCauses` of the ledger hours starting in [start, end) (those of
    :func:`finops.analysis.report.cost_report`); ``idle_threshold``: the utilisation ratio at or below which a GPU is
    idle (``FINOPS_IDLE_THRESHOLD_RATIO``).

    One query: the period's ledger rows summed per GPU-hour, and for the GPU-hours no job held at all, their readings
    counted by a range seek on the readings' (gpu_id, ts) key each.
    """
    unallocated = select(Team.id).where(Team.name == UNALLOCATED_TEAM).scalar_subquery()
    is_unheld = LedgerEntry.team_id == unallocated
    hour = type_coerce(LedgerEntry.hour, BigInteger)
    per_gpu_hour = (
        select(
            LedgerEntry.gpu_id.label("gpu_id"),
            hour.label("hour"),
            func.sum(case((is_unheld, LedgerEntry.seconds), else_=0)).label("unheld"),
            func.sum(case((is_unheld, 0), else_=1)).label("held_rows"),
        )
        .where(LedgerEntry.hour >= start, LedgerEntry.hour < end)
        .group_by(LedgerEntry.gpu_id, hour)
        .subquery()
    )
    ts = type_coerce(GpuSample.ts, BigInteger)
    in_hour = and_(
        per_gpu_hour.c.held_rows == 0,
        GpuSample.gpu_id == per_gpu_hour.c.gpu_id,
        ts >= per_gpu_hour.c.hour,
        ts < per_gpu_hour.c.hour + HOUR,
        ts >= to_epoch(start),  # constant bounds: PostgreSQL reads only the period's day partitions
        ts < to_epoch(end) + HOUR,
    )
    shows_job = or_(GpuSample.job_id.is_not(None), GpuSample.utilization_ratio > idle_threshold)
    rows = session.execute(
        select(per_gpu_hour.c.unheld, func.count(GpuSample.ts), func.count(case((shows_job, 1))))
        .select_from(per_gpu_hour)
        .outerjoin(GpuSample, in_hour)
        .where(per_gpu_hour.c.unheld > 0)
        .group_by(per_gpu_hour.c.gpu_id, per_gpu_hour.c.hour, per_gpu_hour.c.unheld)
    ).all()
    unheld = sum(int(seconds) for seconds, _, _ in rows)
    unknown = sum(int(seconds) * showing / readings for seconds, readings, showing in rows if readings)
    return UnattributedCauses(no_job_gpu_seconds=unheld - unknown, unknown_job_gpu_seconds=unknown)


@dataclass(frozen=True, slots=True)
class NodeWithoutReadings:
    """A node's GPU time with no reading at all over a period, in GPU-seconds: its ledger rows with
    ``sample_count`` 0, whoever held them; ``held_gpu_seconds`` the part jobs held (their use and idle cost unknown)."""

    node: str
    gpu_seconds: int
    held_gpu_seconds: int


def without_readings(session: Session, start: datetime, end: datetime) -> list[NodeWithoutReadings]:
    """Per node, the GPU time of the ledger hours starting in [start, end) that no reading covered
    (:class:`NodeWithoutReadings`), most first; nodes whose GPU time all had readings are left out. Its collector
    was silent, or the node has none."""
    unread = LedgerEntry.sample_count == 0
    rows = session.execute(
        select(
            Node.hostname,
            func.sum(LedgerEntry.seconds),
            func.sum(case((LedgerEntry.job_pk.is_not(None), LedgerEntry.seconds), else_=0)),
        )
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .where(unread, LedgerEntry.hour >= start, LedgerEntry.hour < end)
        .group_by(Node.hostname)
    ).all()
    found = [NodeWithoutReadings(node, int(seconds), int(held)) for node, seconds, held in rows if seconds]
    return sorted(found, key=lambda n: (-n.gpu_seconds, n.node))
