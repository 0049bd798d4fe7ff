"""Data quality: how fresh each node's readings are, and how much of the GPU time is attributed and metered.

Attribution and metering come from the cost report (:func:`finops.analysis.report.cost_report`); freshness is the newest
reading per node in ``gpu_samples``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, ScalarSelect, func, select, type_coerce
from sqlalchemy.orm import Session

from finops.analysis.report import UNALLOCATED_TEAM, ReportRow
from finops.db.models import Gpu, GpuSample, Node
from finops.timeutil import from_epoch


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
