"""A small cluster built through the real ingest and sacct import paths, for the alert tests.

:class:`Cluster` stores GPU readings (:class:`finops.ingest.readings.Ingestor`) and Slurm jobs
(:func:`finops.jobs.slurm_import.import_sacct`) into a migrated database; readings name the job holding the GPU, so
jobs land on exactly the GPUs a test says.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from collector.contract import metric_names as m
from collector.contract.sample import Sample
from collector.contract.wire import IngestBatch, gpu_info_dict, reading_dict
from finops.ingest.readings import Ingestor
from finops.jobs.slurm import SacctJob, format_sacct_line
from finops.jobs.slurm_import import import_sacct
from finops.jobs.teams import map_account

MODEL = "NVIDIA H100 80GB HBM3"
_NAMESPACE = uuid.UUID("0d3c1f7e-2b5a-4e8c-9f10-a1b2c3d4e5f6")
Values = Callable[[int, datetime], dict[str, float]]


def gpu_uuid(node: str, index: int) -> str:
    """A stable NVML-style UUID for a test GPU."""
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'{node}/{index}')}"


def busy(index: int, at: datetime) -> dict[str, float]:
    """An H100 at work: 95 % utilisation, 650 W, 40 GiB in use, no clocks-event reason."""
    return {m.GPU_UTILIZATION: 0.95, m.GPU_POWER: 650.0, m.GPU_MEMORY_USED: 40.0 * 2**30,
            m.GPU_TEMPERATURE: 70.0, m.GPU_CLOCKS_EVENT_REASONS: 0.0}  # fmt: skip


def idle(index: int, at: datetime) -> dict[str, float]:
    """An H100 doing nothing: 0 % utilisation, 70 W, nothing in memory, the ``gpu_idle`` reason only."""
    return {m.GPU_UTILIZATION: 0.0, m.GPU_POWER: 70.0, m.GPU_MEMORY_USED: 0.0, m.GPU_TEMPERATURE: 35.0,
            m.GPU_CLOCKS_EVENT_REASONS: 1.0}  # fmt: skip


def minute_floor(at: datetime) -> datetime:
    """``at`` with seconds and microseconds dropped."""
    return at.replace(second=0, microsecond=0)


def gpu_samples(
    node: str,
    gpus: Sequence[int],
    start: datetime,
    end: datetime,
    *,
    step: timedelta = timedelta(minutes=1),
    values: Values = busy,
    job: str | None = None,
    model: str = MODEL,
) -> list[Sample]:
    """One reading per GPU of ``node`` every ``step`` over [start, end), the GPUs of ``model``, naming ``job``;
    ``values`` gives each reading's figures, the energy counter starts at 0 J and climbs 600 W × ``step``."""
    samples = []
    at = start
    energy = 0.0
    while at < end:
        for index in gpus:
            reading = {**values(index, at), m.GPU_ENERGY: energy, m.GPU_MEMORY_TOTAL: 80.0 * 2**30}
            labels = {"gpu": str(index), "uuid": gpu_uuid(node, index), "model": model}
            samples.append(Sample("gpu", labels, reading, at, job))
        energy += 600.0 * step.total_seconds()
        at += step
    return samples


def sacct_line(
    job_id: str,
    account: str,
    user: str,
    node: str,
    gpus: int,
    start: datetime,
    end: datetime | None,
    gpu_type: str | None = None,
) -> str:
    """A ``sacct`` output line of Slurm job ``job_id`` on cluster orion, running from ``start`` (to ``end``, else
    still running), its GPUs of GRES type ``gpu_type`` (None: untyped)."""
    record = SacctJob(
        job_id=job_id, job_id_raw=job_id, cluster="orion", partition="gpu", account=account, user=user,
        submit=start, start=start, end=end, elapsed=((end or datetime.now(UTC)) - start),
        state="RUNNING" if end is None else "COMPLETED", cancelled_by=None, gpus=gpus, gpu_type=gpu_type,
        nodes=(node,), name=f"job-{job_id}",
    )  # fmt: skip
    return format_sacct_line(record, tz=UTC)


class Cluster:
    """Writes readings and jobs into the database behind ``sessions``."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.ingestor = Ingestor()

    def readings(
        self,
        node: str,
        gpus: Sequence[int],
        start: datetime,
        end: datetime,
        *,
        step: timedelta = timedelta(minutes=1),
        values: Values = busy,
        job: str | None = None,
        model: str = MODEL,
    ) -> int:
        """Store one reading per GPU every ``step`` over [start, end), the GPUs of ``model``; returns how many."""
        samples = gpu_samples(node, gpus, start, end, step=step, values=values, job=job, model=model)
        if not samples:
            return 0
        inventory = {s.labels["uuid"]: gpu_info_dict(s) for s in samples}
        batch = IngestBatch.model_validate(
            {"node": node, "gpus": list(inventory.values()), "samples": [reading_dict(s) for s in samples]}
        )
        with self.sessions.begin() as session:
            self.ingestor.store(session, batch)
        return len(samples)

    def job(
        self,
        job_id: str,
        account: str,
        user: str,
        node: str,
        gpus: int,
        start: datetime,
        end: datetime | None = None,
        *,
        team: str | None = None,
        gpu_type: str | None = None,
    ) -> None:
        """Import one Slurm job through the sacct importer (``team``: map ``account`` to it first; ``gpu_type``: its
        GRES type)."""
        line = sacct_line(job_id, account, user, node, gpus, start, end, gpu_type)
        with self.sessions.begin() as session:
            if team is not None:
                map_account(session, account, team, actor="system:test")
            result = import_sacct(session, [line], source="test")
        assert result.errors == [] and result.jobs == 1, result.errors
