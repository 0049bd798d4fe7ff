"""Queries behind the dashboard pages that the cost report does not answer: filter choices, spend by day,
month-to-date spend and forecast, a job's per-GPU telemetry, per-node telemetry by hour, and fabric and storage
throughput from Prometheus.

Every function takes a :class:`~sqlalchemy.orm.Session` (or a :class:`~finops.ingest.prometheus.PrometheusClient`)
and returns plain frozen dataclasses. Money is exact (``Decimal``, 6 decimals), instants are aware UTC, periods
are [start, end), readings are in base units (ratios, watts, degrees Celsius, bytes per second). Filters are
those of :mod:`finops.analysis.filters` (None selects everything).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import BigInteger, and_, case, distinct, func, literal, or_, select, type_coerce, union
from sqlalchemy.orm import Session

from collector.contract import metric_names as m
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from finops.analysis.budgets import (
    BudgetStatus,
    budget_status,
    month_spend,
    month_start,
    next_month_start,
    run_rate_forecast,
    run_rate_seconds,
)
from finops.analysis.filters import Scope, ledger_conditions, nodes_in
from finops.analysis.report import ReportRow
from finops.db.models import UNALLOCATED_TEAM, Allocation, Gpu, GpuSample, Job, LedgerEntry, Node, Team
from finops.db.sqltypes import EpochSeconds
from finops.ingest.prometheus import LabelNames, PrometheusClient
from finops.ledger.team_hours import ledger_team_sums
from finops.timeutil import from_epoch

DAY_SECONDS = 86_400
BUCKET_SECONDS = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
"""Bucket widths, seconds, that time series are averaged into (see :func:`bucket_seconds`)."""


def bucket_seconds(start: datetime, end: datetime, max_buckets: int, minimum: int = 10) -> int:
    """The smallest width of :data:`BUCKET_SECONDS` (at least ``minimum``) that cuts [start, end) into at most
    ``max_buckets`` buckets; the largest width if none does."""
    span = max((end - start).total_seconds(), 1.0)
    for width in BUCKET_SECONDS:
        if width >= minimum and math.ceil(span / width) <= max_buckets:
            return width
    return BUCKET_SECONDS[-1]


@dataclass(frozen=True, slots=True)
class FilterChoices:
    """The values each filter can take, sorted: job clusters, team names, partitions (of jobs and nodes)."""

    clusters: list[str]
    teams: list[str]
    partitions: list[str]


def filter_choices(session: Session) -> FilterChoices:
    """Every cluster and partition a job names (and partitions of nodes), and every team."""
    clusters = session.scalars(select(Job.cluster).distinct().where(Job.cluster != "")).all()
    teams = session.scalars(select(Team.name)).all()
    partitions = session.scalars(
        union(
            select(Job.partition).where(Job.partition != ""),
            select(Node.partition).where(Node.partition.is_not(None), Node.partition != ""),
        )
    ).all()
    return FilterChoices(sorted(clusters), sorted(teams), sorted({p for p in partitions if p}))


@dataclass(frozen=True, slots=True)
class DailyCost:
    """One team's ledger totals over one UTC day [day, day + 24 h) (the part inside the period asked for).
    Money exact (6 decimals) in ``currency``; ``team`` ``__unallocated__`` is capacity no job held."""

    day: datetime
    team: str
    allocated_cost: Decimal
    used_cost: Decimal
    idle_cost: Decimal
    currency: str


@dataclass(frozen=True, slots=True)
class CubeCell:
    """Ledger totals of one UTC day, team and holder (``job_pk`` None: capacity no job held), with the job's
    id and user. Seconds are GPU-seconds; money is exact; the columns are those of :class:`ReportRow`."""

    day: datetime
    team: str
    job_pk: int | None
    job_id: str | None
    user: str | None
    seconds: int
    used_gpu_seconds: float
    metered_gpu_seconds: int
    unmetered_gpu_seconds: int
    allocated_cost: Decimal
    used_cost: Decimal
    idle_cost: Decimal
    energy_joules: float
    energy_cost: Decimal
    currency: str


CubeBy = Literal["team", "job", "user"]


_GroupKey = tuple[str, str | None, str | None, int | None]
"""(report key, team, user, job primary key) of a group of :meth:`LedgerCube.report`."""


def _group_key(cell: CubeCell, by: CubeBy) -> _GroupKey:
    if by == "team":
        return (cell.team, cell.team, None, None)
    if by == "job":
        return (cell.job_id if cell.job_id is not None else UNALLOCATED_TEAM, cell.team, cell.user, cell.job_pk)
    user = cell.user if cell.user is not None else UNALLOCATED_TEAM
    return (user, None, user, None)


def _check_by(by: str) -> None:
    if by not in ("team", "job", "user"):
        raise ValueError(f"group by must be one of team, job, user, not {by!r}")


@dataclass(frozen=True, slots=True)
class LedgerCube:
    """A period's ledger summed per UTC day, team and job (:func:`ledger_cube`): one read of the ledger from which
    the dashboard takes the cost report by team, job and user and the spend by day."""

    start: datetime
    end: datetime
    cells: list[CubeCell]

    def report(self, by: CubeBy = "team") -> list[ReportRow]:
        """The rows :func:`finops.analysis.report.cost_report` gives for the same period and filters, grouped ``by``
        team, job or user, in its order: money equal to the micro-unit, GPU-seconds equal (the float sums of used
        seconds and joules may differ in their last bits: they are added in another order). ValueError for
        another ``by``."""
        _check_by(by)
        return self._report(by, None)

    def top_idle(self, by: CubeBy = "job", count: int = 5) -> list[ReportRow]:
        """:func:`top_idle` of :meth:`report`, building the report rows of those ``count`` groups only (a month's
        report by job has thousands). ValueError for a ``by`` other than team, job or user."""
        _check_by(by)
        idle: dict[_GroupKey, Decimal] = {}
        for c in self.cells:
            key = _group_key(c, by)
            idle[key] = idle.get(key, Decimal(0)) + c.idle_cost
        candidates = [key for key, amount in idle.items() if amount > 0 and key[0] != UNALLOCATED_TEAM]
        chosen = set(heapq.nsmallest(count, candidates, key=lambda key: (-idle[key], key[0])))
        return top_idle(self._report(by, chosen), count)

    def _report(self, by: CubeBy, only: set[_GroupKey] | None) -> list[ReportRow]:
        totals: dict[_GroupKey, list[Any]] = {}
        for c in self.cells:
            key = _group_key(c, by)
            if only is not None and key not in only:
                continue
            found = totals.get(key)
            if found is None:
                totals[key] = [
                    c.seconds, c.used_gpu_seconds, c.metered_gpu_seconds, c.unmetered_gpu_seconds, c.allocated_cost,
                    c.used_cost, c.idle_cost, c.energy_joules, c.energy_cost, c.currency,
                ]  # fmt: skip
                continue
            found[0] += c.seconds
            found[1] += c.used_gpu_seconds
            found[2] += c.metered_gpu_seconds
            found[3] += c.unmetered_gpu_seconds
            found[4] += c.allocated_cost
            found[5] += c.used_cost
            found[6] += c.idle_cost
            found[7] += c.energy_joules
            found[8] += c.energy_cost
            found[9] = min(found[9], c.currency)
        rows = [
            ReportRow(
                key=name, team=team, user=user, allocated_gpu_seconds=t[0], used_gpu_seconds=t[1],
                idle_gpu_seconds=max(t[2] - t[1], 0.0), unmetered_gpu_seconds=t[3], allocated_cost=t[4],
                used_cost=t[5], idle_cost=t[6], energy_joules=t[7], energy_cost=t[8], currency=t[9],
            )
            for (name, team, user, _), t in totals.items()
        ]  # fmt: skip
        return sorted(rows, key=lambda row: (row.key == UNALLOCATED_TEAM, -row.allocated_cost, row.key))

    def daily(self) -> list[DailyCost]:
        """Spend per UTC day and team, by day then team name; a team's days add up to its :meth:`report` row."""
        totals: dict[tuple[datetime, str], list[Any]] = {}
        for c in self.cells:
            found = totals.get((c.day, c.team))
            if found is None:
                totals[(c.day, c.team)] = [c.allocated_cost, c.used_cost, c.idle_cost, c.currency]
            else:
                found[0] += c.allocated_cost
                found[1] += c.used_cost
                found[2] += c.idle_cost
                found[3] = min(found[3], c.currency)
        return [DailyCost(day, team, *t) for (day, team), t in sorted(totals.items())]


def ledger_cube(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> LedgerCube:
    """Ledger hours starting in [start, end) of the filters' rows (:mod:`finops.analysis.filters`) summed per UTC day,
    team and job in one query: the ledger is aggregated on its own columns first, and team names and job ids
    joined to the (few) groups after."""
    hour = type_coerce(LedgerEntry.hour, BigInteger)
    day = (hour - hour % DAY_SECONDS).label("day")
    sums = (
        select(
            day,
            LedgerEntry.team_id,
            LedgerEntry.job_pk,
            *(column.label(name) for name, column in ledger_team_sums().items()),
        )
        .where(
            LedgerEntry.hour >= start,
            LedgerEntry.hour < end,
            *ledger_conditions(Scope(cluster=cluster, team=team, partition=partition)),
        )
        .group_by(day, LedgerEntry.team_id, LedgerEntry.job_pk)
        .subquery()
    )
    c = sums.c
    query = (
        select(
            c.day, Team.name, c.job_pk, Job.job_id, Job.user, c.seconds, c.used_gpu_seconds, c.metered_gpu_seconds,
            c.unmetered_gpu_seconds, c.allocated_cost, c.used_cost, c.idle_cost, c.energy_joules, c.energy_cost,
            c.currency,
        )
        .join(Team, Team.id == c.team_id)
        .outerjoin(Job, Job.id == c.job_pk)
    )  # fmt: skip
    # Core rows in CubeCell's field order (~10,000 for a month of 1,000 GPUs: the ORM's row handling would cost
    # more than the conversion below).
    days: dict[int, datetime] = {}
    cells = [
        CubeCell(
            days.get(day) or days.setdefault(day, from_epoch(day)), team, job_pk, job_id, user, int(seconds),
            float(used), int(metered), int(unmetered), allocated, used_cost, idle, float(joules), energy, currency,
        )
        for (
            day, team, job_pk, job_id, user, seconds, used, metered, unmetered, allocated, used_cost, idle, joules,
            energy, currency,
        ) in session.connection().execute(query)
    ]  # fmt: skip
    return LedgerCube(start, end, cells)


@dataclass(frozen=True, slots=True)
class MonthOverview:
    """The calendar month (UTC) holding ``at``: spend of the ledger hours before ``at`` (of the filters' rows),
    the month-end forecast by the budgets' run-rate rule (:func:`finops.analysis.budgets.run_rate_forecast`), and the
    status of the budgets (of the team filter's team, or all; budgets are per team, so the cluster and
    partition filters do not narrow them). Money exact; currency '' when there is no ledger row."""

    month: datetime
    at: datetime
    spent: Decimal
    forecast: Decimal
    currency: str
    budgets: list[BudgetStatus]


def month_overview(
    session: Session,
    at: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> MonthOverview:
    """:class:`MonthOverview` at ``at``. Without cluster and partition filters the team-hours are read once for
    the month's spend and the budgets (:func:`finops.analysis.budgets.month_spend` per team), otherwise the ledger's
    rows for the spend and the team-hours for the budgets."""
    spend = month_spend(session, at, scope=Scope(cluster=cluster, team=team, partition=partition))
    shared = cluster is None and partition is None
    statuses = budget_status(session, at, team=team, spend=spend if shared else None)
    spent = sum((s.spent for s in spend.values()), Decimal(0))
    recent = sum((s.recent for s in spend.values()), Decimal(0))
    left = (next_month_start(at) - at).total_seconds()
    forecast = run_rate_forecast(spent, recent, run_rate_seconds(session, at), left)
    currency = session.scalar(select(LedgerEntry.currency).limit(1)) or ""
    return MonthOverview(month_start(at), at, spent, forecast, currency, statuses)


def top_idle(rows: Sequence[ReportRow], count: int = 5) -> list[ReportRow]:
    """The ``count`` rows of a cost report (by job or by team) with the highest idle cost, highest first; capacity
    no job held (``__unallocated__``) and rows without idle cost are left out."""
    wasters = [row for row in rows if row.key != UNALLOCATED_TEAM and row.idle_cost > 0]
    return sorted(wasters, key=lambda row: (-row.idle_cost, row.key))[:count]


def node_names(session: Session, cluster: str | None = None, partition: str | None = None) -> list[str]:
    """Hostnames of the nodes in ``cluster`` and ``partition`` (:func:`finops.analysis.filters.nodes_in`), sorted."""
    query = select(Node.hostname).where(Node.id.in_(nodes_in(cluster, partition))).order_by(Node.hostname)
    return list(session.scalars(query))


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """The mean of one GPU's readings over [ts, ts + bucket): utilisation ratio and board power, watts (None when
    no reading had the field)."""

    ts: datetime
    node: str
    gpu_index: int
    utilization: float | None
    power_watts: float | None


@dataclass(frozen=True, slots=True)
class JobTelemetry:
    """A job's GPUs over its allocations: one :class:`GpuPoint` per GPU and bucket of ``bucket_seconds``.

    ``jobs`` is how many jobs carry the id (one per cluster); ``gpus`` the distinct GPUs they held;
    ``start``/``end`` the span of the allocations read (an open allocation read up to the ``until`` asked for)."""

    job_id: str
    jobs: int
    gpus: int
    start: datetime | None
    end: datetime | None
    bucket_seconds: int
    points: list[GpuPoint] = field(default_factory=list)


def job_telemetry(
    session: Session, job_id: str, until: datetime, *, cluster: str | None = None, max_buckets: int = 300
) -> JobTelemetry:
    """Readings of the GPUs job ``job_id`` (of ``cluster``, when given) held, each inside its allocation [start,
    end) (an open one up to ``until``), averaged per GPU into at most ``max_buckets`` buckets (:func:`bucket_seconds`)
    aligned to the epoch. A MIG share's GPU reports the whole GPU's utilisation and power. No job: no points."""
    jobs = select(Job.id).where(Job.job_id == job_id)
    if cluster is not None:
        jobs = jobs.where(Job.cluster == cluster)
    job_pks = list(session.scalars(jobs))
    if not job_pks:
        return JobTelemetry(job_id, 0, 0, None, None, 0)
    allocation_end = func.coalesce(Allocation.end, literal(until, EpochSeconds()))
    span = session.execute(
        select(
            func.min(Allocation.start).label("start"),
            func.max(allocation_end).label("end"),
            func.count(distinct(Allocation.gpu_id)).label("gpus"),
        ).where(Allocation.job_pk.in_(job_pks), Allocation.start < until)
    ).one()
    if span.start is None:
        return JobTelemetry(job_id, len(job_pks), 0, None, None, 0)
    first = span.start if isinstance(span.start, datetime) else from_epoch(int(span.start))
    last = span.end if isinstance(span.end, datetime) else from_epoch(int(span.end))
    width = bucket_seconds(first, last, max_buckets)
    ts = type_coerce(GpuSample.ts, BigInteger)
    bucket = (ts - ts % width).label("bucket")
    query = (
        select(
            Node.hostname,
            Gpu.gpu_index,
            bucket,
            func.avg(GpuSample.utilization_ratio).label("utilization"),
            func.avg(GpuSample.power_watts).label("power"),
        )
        .select_from(Allocation)
        .join(
            GpuSample,
            and_(
                GpuSample.gpu_id == Allocation.gpu_id,
                GpuSample.ts >= Allocation.start,
                or_(Allocation.end.is_(None), GpuSample.ts < Allocation.end),
                GpuSample.ts < until,
            ),
        )
        .join(Gpu, Gpu.id == Allocation.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .where(Allocation.job_pk.in_(job_pks))
        .group_by(Node.hostname, Gpu.gpu_index, bucket)
        .order_by(Node.hostname, Gpu.gpu_index, bucket)
    )
    points = [
        GpuPoint(from_epoch(int(r.bucket)), r.hostname, r.gpu_index, _float(r.utilization), _float(r.power))
        for r in session.execute(query)
    ]
    return JobTelemetry(job_id, len(job_pks), int(span.gpus), first, last, width, points)


@dataclass(frozen=True, slots=True)
class NodeBucket:
    """One node over [ts, ts + bucket): mean utilisation ratio of its GPUs (mean of each GPU's mean), board
    power in watts (sum of its GPUs' mean power), hottest reading in degrees Celsius, readings, and per
    clocks-event (throttle) reason (:data:`collector.contract.clocks_events.CLOCKS_EVENT_REASONS` names) the readings
    with that reason active."""

    ts: datetime
    node: str
    gpus: int
    utilization: float | None
    power_watts: float | None
    max_temperature_celsius: float | None
    readings: int
    reason_readings: dict[str, int]


def node_buckets(
    session: Session,
    start: datetime,
    end: datetime,
    width_seconds: int = 3600,
    *,
    cluster: str | None = None,
    partition: str | None = None,
) -> list[NodeBucket]:
    """Readings with ts in [start, end) of the GPUs on the nodes of ``cluster`` and ``partition``, summed per node
    and bucket of ``width_seconds`` (aligned to the epoch: hours for 3600), by node then time.

    Clocks-event reasons are decoded bit by bit with the collector's table (NVML ``nvmlClocksEventReason*``, the
    same bits as DCGM's ``CLOCKS_EVENT_REASONS``); a reading without the bitmask counts for no reason."""
    ts = type_coerce(GpuSample.ts, BigInteger)
    bucket = (ts - ts % width_seconds).label("bucket")
    reasons = type_coerce(GpuSample.clocks_event_reasons, BigInteger)
    reason_columns = [
        func.sum(case((reasons.op("&")(bit) != 0, 1), else_=0)).label(f"r_{name}")
        for name, bit in CLOCKS_EVENT_REASONS.items()
    ]
    per_gpu = (
        select(
            GpuSample.gpu_id,
            bucket,
            func.avg(GpuSample.utilization_ratio).label("utilization"),
            func.avg(GpuSample.power_watts).label("power"),
            func.max(GpuSample.temperature_celsius).label("temperature"),
            func.count().label("readings"),
            *reason_columns,
        )
        .where(GpuSample.ts >= start, GpuSample.ts < end)
        .group_by(GpuSample.gpu_id, bucket)
    )
    if cluster is not None or partition is not None:
        per_gpu = per_gpu.where(
            GpuSample.gpu_id.in_(select(Gpu.id).where(Gpu.node_id.in_(nodes_in(cluster, partition))))
        )
    g = per_gpu.subquery()
    query = (
        select(
            Node.hostname,
            g.c.bucket,
            func.count().label("gpus"),
            func.avg(g.c.utilization).label("utilization"),
            func.sum(g.c.power).label("power"),
            func.max(g.c.temperature).label("temperature"),
            func.sum(g.c.readings).label("readings"),
            *(func.sum(g.c[f"r_{name}"]).label(f"r_{name}") for name in CLOCKS_EVENT_REASONS),
        )
        .join(Gpu, Gpu.id == g.c.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .group_by(Node.hostname, g.c.bucket)
        .order_by(Node.hostname, g.c.bucket)
    )
    return [
        NodeBucket(
            ts=from_epoch(int(r.bucket)),
            node=r.hostname,
            gpus=int(r.gpus),
            utilization=_float(r.utilization),
            power_watts=_float(r.power),
            max_temperature_celsius=_float(r.temperature),
            readings=int(r.readings),
            reason_readings={name: int(getattr(r, f"r_{name}")) for name in CLOCKS_EVENT_REASONS},
        )
        for r in session.execute(query)
    ]


FABRIC_SERIES: dict[tuple[str, str], str] = {
    ("InfiniBand", "received"): m.INFINIBAND_RECEIVED_BYTES,
    ("InfiniBand", "transmitted"): m.INFINIBAND_TRANSMITTED_BYTES,
    ("local disks", "read"): m.DISK_READ_BYTES,
    ("local disks", "written"): m.DISK_WRITTEN_BYTES,
    ("NFS", "read"): m.NFS_READ_BYTES,
    ("NFS", "written"): m.NFS_WRITTEN_BYTES,
    ("Lustre", "read"): m.LUSTRE_CLIENT_READ_BYTES,
    ("Lustre", "written"): m.LUSTRE_CLIENT_WRITTEN_BYTES,
}
"""(kind, direction) → the collector's byte counter on its ``/metrics`` (:mod:`collector.contract.metric_names`)."""


@dataclass(frozen=True, slots=True)
class Throughput:
    """A node's throughput of one kind and direction over the ``window_seconds`` before ``ts``, bytes per
    second (all devices, ports or mounts of the node added up)."""

    ts: datetime
    node: str
    kind: str
    direction: str
    bytes_per_second: float


def fabric_throughput(
    client: PrometheusClient,
    start: datetime,
    end: datetime,
    step_seconds: int,
    *,
    nodes: Sequence[str] | None = None,
    labels: LabelNames | None = None,
) -> list[Throughput]:
    """InfiniBand, local disk, NFS and Lustre throughput per node from the collectors' counters in Prometheus:
    ``sum by (instance) (rate(COUNTER[w]))`` (w = max(step, 5 min), so that every step's window holds scrapes)
    evaluated every ``step_seconds`` back from ``end`` (the newest point is at ``end``) to ``start``.

    Node = ``Hostname`` label, else ``instance`` without its port (:meth:`LabelNames.node`; ``labels`` the site's
    label names, default dcgm-exporter's); only ``nodes`` when given. A counter nobody exposes gives no series.

    Raises :class:`finops.ingest.prometheus.PrometheusError` when Prometheus fails to answer.
    """
    labels = labels or LabelNames()
    window = max(step_seconds, 300)
    first = end - timedelta(seconds=(end - start).total_seconds() // step_seconds * step_seconds)
    wanted = None if nodes is None else set(nodes)
    found: list[Throughput] = []
    for (kind, direction), counter in FABRIC_SERIES.items():
        query = f"sum by ({labels.instance}, {labels.hostname}) (rate({counter}[{window}s]))"
        for series in client.query_range(query, first, end, step_seconds):
            node = labels.node(series.labels)
            if wanted is not None and node not in wanted:
                continue
            found.extend(Throughput(from_epoch(int(t)), node, kind, direction, value) for t, value in series.points)
    return found


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
