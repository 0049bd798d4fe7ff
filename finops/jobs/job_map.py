"""Reconciling placements with the collectors' job map: jobs whose samples, arrived after they were placed, name
other GPUs are placed again on those (:func:`reconcile_job_map`, run by the scheduled rollup before it rebuilds dirty
ledger hours)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session

from finops.db.hours import HourMarks
from finops.db.ledger_tables import DirtyHour
from finops.db.models import Allocation, Gpu, GpuSample, Job, Node
from finops.jobs.gpu_calendar import OPEN_END, Unit
from finops.jobs.nodes import in_chunks
from finops.jobs.observed_gpus import Observations, in_windows
from finops.jobs.placement import PlacementRequest, job_keys, place_jobs
from finops.jobs.slurm_hostlist import expand_hostlist
from finops.timeutil import HOUR, from_epoch, to_epoch

log = logging.getLogger(__name__)


def reconcile_job_map(session: Session, until: int) -> int:
    """Re-place jobs whose samples, newly arrived in the ledger's dirty hours before ``until`` (epoch seconds),
    name GPUs their allocations are not on. Returns how many (job, node) placements moved.

    For each such job and node, the job's allocations on that node are rewritten by
    :func:`~finops.jobs.placement.place_jobs` (so on the observed GPUs, other jobs displaced) and the job's hours are
    marked dirty, for the rollup that follows.
    Four queries when nothing disagrees: dirty hours, samples of those hours (grouped by GPU and job id alone: joined
    to the nodes first, PostgreSQL sorts every sample, 3.5 × slower at 3.6 M), the hostnames of the GPUs they name,
    the jobs they name with their allocations.
    """
    hours = sorted(
        to_epoch(h) for h in session.scalars(select(DirtyHour.hour).where(DirtyHour.hour < from_epoch(until)))
    )
    windows = _windows(hours, until)
    if not windows:
        return 0
    seen = session.execute(
        select(GpuSample.gpu_id, GpuSample.job_id, func.min(GpuSample.ts), func.max(GpuSample.ts))
        .where(in_windows(windows), GpuSample.job_id.is_not(None))
        .group_by(GpuSample.gpu_id, GpuSample.job_id)
    ).all()
    observations = Observations()
    for gpu_id, job_id, first, last in seen:
        if job_id is not None:
            observations.spans.setdefault(job_id, {})[gpu_id] = (to_epoch(first), to_epoch(last))
    host_of_gpu = _hostnames(session, {gpu_id for spans in observations.spans.values() for gpu_id in spans})
    jobs = _jobs_named(session, set(observations.spans))
    held: dict[int, list[tuple[int, int, str, Unit]]] = defaultdict(list)  # job -> (allocation, gpu, host, unit)
    for chunk in in_chunks(sorted(jobs)):
        for allocation_id, job_pk, gpu_id, num, den, profile, hostname in session.execute(
            select(
                Allocation.id,
                Allocation.job_pk,
                Allocation.gpu_id,
                Allocation.share_num,
                Allocation.share_den,
                Allocation.mig_profile,
                Node.hostname,
            )
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .join(Node, Node.id == Gpu.node_id)
            .where(Allocation.job_pk.in_(chunk))
            .order_by(Allocation.id)
        ):
            held[job_pk].append((allocation_id, gpu_id, hostname, Unit(Fraction(num, den), profile)))
    requests: list[PlacementRequest] = []
    stale: list[int] = []
    marks = HourMarks()
    for job in sorted(jobs.values(), key=lambda j: (j.start or from_epoch(0), j.id)):
        if job.start is None:
            continue
        start, end = to_epoch(job.start), OPEN_END if job.end is None else to_epoch(job.end)
        keys = job_keys(job.scheduler, job.job_id, job.job_id_raw)
        nodes = set(expand_hostlist(job.node_list))
        observed: dict[str, set[int]] = defaultdict(set)
        for gpu_id in observations.gpus(keys, start, end):
            if host_of_gpu[gpu_id] in nodes:
                observed[host_of_gpu[gpu_id]].add(gpu_id)
        moved: list[tuple[str, Sequence[Unit]]] = []
        for hostname, gpu_ids in sorted(observed.items()):
            rows = [row for row in held[job.id] if row[2] == hostname]
            if rows and not gpu_ids <= {gpu_id for _, gpu_id, _, _ in rows}:
                stale.extend(allocation_id for allocation_id, _, _, _ in rows)
                moved.append((hostname, [unit for _, _, _, unit in rows]))
        if moved:
            requests.append(
                PlacementRequest(job.id, start, None if job.end is None else end, moved, job.gpu_type, keys)
            )
            marks.add_job(job)
    if not requests:
        return 0
    marks.mark(session)
    for chunk in in_chunks(stale):
        session.execute(delete(Allocation).where(Allocation.id.in_(chunk)))
    place_jobs(session, requests)
    count = sum(len(r.nodes) for r in requests)
    log.info("job map: %d job placements moved to the GPUs their samples name", count)
    return count


def _windows(hours: list[int], until: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) runs of the given hour starts, clipped at ``until``."""
    windows: list[tuple[int, int]] = []
    for hour in hours:
        if windows and windows[-1][1] == hour:
            windows[-1] = (windows[-1][0], hour + HOUR)
        else:
            windows.append((hour, hour + HOUR))
    return [(a, min(b, until)) for a, b in windows if a < until]


def _hostnames(session: Session, gpu_ids: set[int]) -> dict[int, str]:
    """The hostname of each GPU's node, by GPU id."""
    found: dict[int, str] = {}
    for chunk in in_chunks(sorted(gpu_ids)):
        rows = session.execute(
            select(Gpu.id, Node.hostname).join(Node, Node.id == Gpu.node_id).where(Gpu.id.in_(chunk))
        )
        found.update((gpu_id, hostname) for gpu_id, hostname in rows)
    return found


def _jobs_named(session: Session, ids: set[str]) -> dict[int, Job]:
    """Jobs whose :func:`~finops.jobs.placement.job_keys` include any of ``ids``, by Job.id."""
    plain = sorted(ids)
    uids = sorted(i.removeprefix("pod/") for i in ids if i.startswith("pod/"))
    jobs: dict[int, Job] = {}
    for chunk in in_chunks(plain):
        for job in session.scalars(select(Job).where(or_(Job.job_id.in_(chunk), Job.job_id_raw.in_(chunk)))):
            jobs[job.id] = job
    for chunk in in_chunks(uids):
        for job in session.scalars(select(Job).where(Job.scheduler == "kubernetes", Job.job_id_raw.in_(chunk))):
            jobs[job.id] = job
    return {pk: job for pk, job in jobs.items() if job_keys(job.scheduler, job.job_id, job.job_id_raw) & ids}
