"""How many readings the service stored, and how many of them are distinct, for tests that check that what a
collector sent arrived exactly once."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import GpuSample


def stored_readings(sessions: sessionmaker[Session]) -> tuple[int, int]:
    """(rows in ``gpu_samples``, distinct (gpu, ts) pairs among them): equal when no reading is stored twice."""
    with sessions() as session:
        rows = session.scalar(select(func.count()).select_from(GpuSample))
        distinct = session.scalar(
            select(func.count()).select_from(select(GpuSample.gpu_id, GpuSample.ts).distinct().subquery())
        )
    return int(rows or 0), int(distinct or 0)
