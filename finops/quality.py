"""Data quality: how fresh each node's readings are, and how much of the GPU time is attributed and metered.

Attribution and metering come from the cost report (:func:`finops.report.cost_report`); freshness is the newest
reading per node in ``gpu_samples``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from finops.models import Gpu, GpuSample, Node
from finops.report import UNALLOCATED_TEAM, ReportRow


@dataclass(frozen=True, slots=True)
class NodeFreshness:
    """One node: its GPUs, the newest reading of any of them (None if never), and seconds since it at ``now``."""

    node: str
    gpus: int
    last_reading: datetime | None
    silent_seconds: float | None


def node_freshness(session: Session, now: datetime) -> list[NodeFreshness]:
    """Every node, the most silent first (nodes that never reported first of all)."""
    newest = (
        select(Gpu.node_id, func.count(func.distinct(Gpu.id)).label("gpus"), func.max(GpuSample.ts).label("last"))
        .select_from(Gpu)
        .outerjoin(GpuSample, GpuSample.gpu_id == Gpu.id)
        .group_by(Gpu.node_id)
        .subquery()
    )
    rows = session.execute(
        select(Node.hostname, newest.c.gpus, newest.c.last).join(newest, newest.c.node_id == Node.id)
    ).all()
    found = []
    for hostname, gpus, last in rows:
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
