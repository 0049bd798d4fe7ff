"""Per-job SM utilisation of GPUs shared by several jobs at once (time-slicing, MPS), per GPU-hour, for the ledger.

Collectors ship, for each reading of a GPU whose compute processes belonged to more than one job, each job's SM
utilisation ratio (:class:`collector.contract.wire.JobUtilization`); ingest stores them in ``gpu_job_utilization``
(:class:`finops.db.models.GpuJobUtilization`). A GPU held by one job has no such rows: its readings'
``utilization_ratio`` is that job's.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Connection, func, select, type_coerce
from sqlalchemy.orm import Session

from finops.db.models import GpuJobUtilization
from finops.timeutil import HOUR


def job_utilization_by_gpu_hour(
    session: Session | Connection, h0: int, h1: int
) -> dict[tuple[int, int], dict[str, float]]:
    """The per-job SM utilisation of the GPU-hours in [h0, h1) that have any.

    Args:
        session: a session or connection (the caller's transaction; nothing is written).
        h0, h1: hour starts, epoch seconds (UTC), h0 <= h1; the half-open range [h0, h1) of hours read.

    Returns:
        ``{(gpu_id, hour): {job_id: ratio}}``: ``gpu_id`` is ``gpus.id``, ``hour`` the hour's start in epoch
        seconds, ``job_id`` as in ``gpu_samples.job_id`` (Slurm ``JobIDRaw`` or ``pod/<uid>``), and ``ratio`` (0..1)
        the mean of the job's stored ratios in that hour: per reading at which the GPU was shared, the fraction of
        the collector's cycle a kernel of the job's processes ran (sum of their NVML ``smUtil`` / 100, capped at 1).
        A reading at which the job had no process on the GPU, or the GPU was not shared, has no row and does not
        enter the mean. Only GPU-hours with rows appear; within one, the ratios of different jobs need not sum to
        1 (idle time and overlapping MPS clients).

    Raises:
        ValueError: h0 or h1 is not an hour start, or h1 < h0.
    """
    if h0 % HOUR or h1 % HOUR or h1 < h0:
        raise ValueError(f"[{h0}, {h1}) is not a range of whole hours (epoch seconds)")
    table = GpuJobUtilization
    ts = type_coerce(table.ts, BigInteger)
    hour = (ts - ts % HOUR).label("hour")
    query = (
        select(table.gpu_id, hour, table.job_id, func.avg(table.utilization_ratio))
        .where(ts >= h0, ts < h1)
        .group_by(table.gpu_id, hour, table.job_id)
    )
    result: dict[tuple[int, int], dict[str, float]] = {}
    for gpu_id, start, job_id, mean in session.execute(query):
        result.setdefault((int(gpu_id), int(start)), {})[job_id] = float(mean)
    return result
