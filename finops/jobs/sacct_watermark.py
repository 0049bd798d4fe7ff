"""One sacct watermark per cluster: where a scheduled sacct run resumes (:func:`finops.jobs.slurm_import.run_sacct`).

A run for a named cluster X (``FINOPS_SACCT_CLUSTER`` or ``--cluster``) resumes from ``sacct:X``. A run left
``default`` asks sacct without ``--clusters``, which reads the local cluster, and the Cluster field of its output
names that cluster: once a run's lines name exactly one cluster X, its watermark is stored as ``sacct:X`` and a
``sacct:default`` is merged into it (the later instant wins: each run series is gap-free on its own), so that the
cluster keeps one watermark whichever way it is run. Before any line has named it, the watermark is
``sacct:default``; a ``default`` run resumes from ``sacct:default`` when there is one, else from the earliest
sacct watermark (one of them is the local cluster's: reading more is harmless, as the import is idempotent, and
no window is skipped).
"""

from __future__ import annotations

from collections.abc import Set
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from finops.db.models import Watermark

DEFAULT_CLUSTER = "default"
PREFIX = "sacct:"


def watermark_name(cluster: str) -> str:
    """The Watermark row of a cluster's sacct runs: ``sacct:<cluster>``."""
    return f"{PREFIX}{cluster}"


def resume_from(session: Session, cluster: str) -> datetime | None:
    """Where a run for ``cluster`` resumes (module docstring); None: the first run."""
    mark = session.get(Watermark, watermark_name(cluster))
    if mark is not None or cluster != DEFAULT_CLUSTER:
        return None if mark is None else mark.value
    return min(session.scalars(select(Watermark.value).where(Watermark.name.like(f"{PREFIX}%"))), default=None)


def advance(session: Session, cluster: str, named: Set[str], end: datetime) -> str:
    """Move the watermark of a run for ``cluster`` whose output's Cluster fields were ``named`` to ``end`` (never
    back), merging ``sacct:default`` into the local cluster's name once one is known; returns the watermark's
    name."""
    clusters = {name for name in named if name and name != DEFAULT_CLUSTER}
    name = watermark_name(cluster)
    value = end
    if cluster == DEFAULT_CLUSTER and len(clusters) == 1:
        name = watermark_name(next(iter(clusters)))
        unnamed = session.get(Watermark, watermark_name(DEFAULT_CLUSTER))
        if unnamed is not None:
            value = max(value, unnamed.value)
            session.execute(delete(Watermark).where(Watermark.name == unnamed.name))
    mark = session.get(Watermark, name)
    if mark is None:
        session.add(Watermark(name=name, value=value))
    elif mark.value < value:
        mark.value = value
    return name
