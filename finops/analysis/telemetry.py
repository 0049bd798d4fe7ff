"""GPU and node telemetry behind the dashboard's GPU, job and node pages: a job's per-GPU readings, per-node
readings by time bucket with clocks-event (throttle) reasons, and fabric and storage throughput from Prometheus.

Every function takes a :class:`~sqlalchemy.orm.Session` (or a :class:`~finops.ingest.prometheus.PrometheusClient`)
and returns plain frozen dataclasses. Instants are aware UTC, periods are [start, end), readings are in base units
(ratios, watts, degrees Celsius, bytes per second).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import BigInteger, and_, case, distinct, func, literal, or_, select, type_coerce
from sqlalchemy.orm import Session

from collector.contract import metric_names as m
from collector.contract.clocks_events import CLOCKS_EVENT_REASONS
from finops.analysis.filters import nodes_in
from finops.db.models import Allocation, Gpu, GpuSample, Job, Node, Team
from finops.db.sqltypes import EpochSeconds
from finops.ingest.prometheus import LabelNames, PrometheusClient
from finops.timeutil import from_epoch

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
    session: Session,
    job_id: str,
    until: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    max_buckets: int = 300,
) -> JobTelemetry:
    """Readings of the GPUs job ``job_id`` (of ``cluster`` and ``team``, when given) held, each inside its
    allocation [start, end) (an open one up to ``until``), averaged per GPU into at most ``max_buckets`` buckets
    (:func:`bucket_seconds`) aligned to the epoch. A MIG share's GPU reports the whole GPU's utilisation and power.
    No job: no points."""
    jobs = select(Job.id).where(Job.job_id == job_id)
    if cluster is not None:
        jobs = jobs.where(Job.cluster == cluster)
    if team is not None:
        jobs = jobs.where(Job.team_id.in_(select(Team.id).where(Team.name == team)))
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
