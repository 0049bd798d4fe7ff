"""The GPUs samples put jobs on: per ``gpu_samples.job_id`` value and GPU, the first and last sample instant
(epoch seconds) in given windows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from finops.db.models import GpuSample
from finops.jobs.nodes import IN_CHUNK
from finops.timeutil import from_epoch, to_epoch


@dataclass(slots=True)
class Observations:
    """``gpu_samples.job_id`` value -> GPU id -> (first, last) sample instant (epoch seconds)."""

    spans: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)

    def gpus(self, keys: Iterable[str], start: int, end: int) -> set[int]:
        """GPUs with a sample in [start, end) carrying one of ``keys`` (by first and last instant)."""
        found: set[int] = set()
        for key in keys:
            for gpu_id, (first, last) in self.spans.get(key, {}).items():
                if first < end and last >= start:
                    found.add(gpu_id)
        return found


def in_windows(windows: Sequence[tuple[int, int | None]]) -> ColumnElement[bool]:
    """SQL condition: the sample's instant lies in one of the [start, end) windows (end None: open)."""
    bounds = [
        GpuSample.ts >= from_epoch(a)
        if b is None
        else and_(GpuSample.ts >= from_epoch(a), GpuSample.ts < from_epoch(b))
        for a, b in windows
    ]
    return or_(*bounds)


def observe(session: Session, gpu_ids: Iterable[int], since: int, until: int | None) -> Observations:
    """One query: per GPU (of ``gpu_ids``) and job id, the first and last sample in [since, until) carrying it."""
    ids = sorted(set(gpu_ids))
    observations = Observations()
    if not ids:
        return observations
    gpu_filter = GpuSample.gpu_id.in_(ids) if len(ids) <= IN_CHUNK else GpuSample.gpu_id.is_not(None)
    rows = session.execute(
        select(GpuSample.gpu_id, GpuSample.job_id, func.min(GpuSample.ts), func.max(GpuSample.ts))
        .where(gpu_filter, in_windows([(since, until)]), GpuSample.job_id.is_not(None))
        .group_by(GpuSample.gpu_id, GpuSample.job_id)
    ).all()
    wanted = set(ids)
    for gpu_id, job_id, first, last in rows:
        if gpu_id in wanted and job_id is not None:
            observations.spans.setdefault(job_id, {})[gpu_id] = (to_epoch(first), to_epoch(last))
    return observations
