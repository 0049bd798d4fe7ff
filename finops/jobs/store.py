"""Storing imported jobs, the same for every scheduler (Slurm, Kubernetes): a stored job replaced when its
placement changed, and a job's end moved when it finished, with the ledger hours both touch marked dirty."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from finops.db.hours import HourMarks, hours_between
from finops.db.models import Allocation, Job


def replace_job(session: Session, stored: Job | None, new: Job, marks: HourMarks) -> None:
    """Add ``new`` in place of ``stored`` (the stored job with the same unique key whose placement changed, or
    None), gathering the hours of both in ``marks``. ``stored`` is deleted and flushed first: ``new`` takes its
    (scheduler, cluster, job_id_raw); its allocations go with it."""
    if stored is not None:
        marks.add_job(stored)
        session.delete(stored)
        session.flush()
    session.add(new)
    marks.add_job(new)


def update_end(session: Session, job: Job, end: datetime | None, state: str, marks: HourMarks) -> None:
    """Give an imported job its new ``end`` (None: still running) and ``state``, cutting its allocations at the
    new end and gathering in ``marks`` the ledger hours from the earlier of the two ends onward."""
    if job.end == end and job.state == state:
        return
    ends = [value for value in (job.end, end) if value is not None]
    if ends:
        marks.add(hours_between(min(ends), None))
    job.end, job.state = end, state
    session.execute(update(Allocation).where(Allocation.job_pk == job.id).values(end=end))
