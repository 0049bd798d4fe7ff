"""Reconciling placements with the collectors' job map: jobs whose samples, arrived after they were placed, name
other GPUs are placed again on those (:func:`reconcile_job_map`, run by the scheduled rollup on the readings it has
just metered; when it moves a job, the rollup rebuilds the job's hours again in the same transaction)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from fractions import Fraction

import orjson
from sqlalchemy import TextClause, delete, or_, select, text
from sqlalchemy.orm import Session

from finops.db.dialect import json_rows
from finops.db.hours import HourMarks
from finops.db.models import Allocation, Gpu, Job, Node
from finops.jobs.gpu_calendar import OPEN_END, Unit
from finops.jobs.nodes import in_chunks
from finops.jobs.observed_gpus import Observations
from finops.jobs.placement import PlacementRequest, job_keys, place_jobs
from finops.jobs.slurm_hostlist import expand_hostlist
from finops.timeutil import HOUR, from_epoch, to_epoch

log = logging.getLogger(__name__)

_WINDOW_COLUMNS = {"gpu_id": "integer", "lo": "bigint", "hi": "bigint"}
# Per window, the GPU's samples in [lo, hi) that name a job: those of windows shorter than a day (the scheduled
# rollup's five minutes) read by the (gpu_id, ts) key, PostgreSQL behind LATERAL and OFFSET 0 (not flattened into a
# scan of the day partitions, which hold each day so far), SQLite by CROSS JOIN, whose order it keeps; a day or more
# (a backlog's rollup) by a scan of the partitions between the lowest start and the highest end, joined to the
# windows. lo_min and hi_max prune the partitions.
_SEEN_BY_KEY = {
    "postgresql": "SELECT w.gpu_id, s.job_id, MIN(s.ts), MAX(s.ts) FROM {windows} CROSS JOIN LATERAL ("
    "SELECT g.job_id, g.ts FROM gpu_samples g WHERE g.gpu_id = w.gpu_id AND g.ts >= w.lo AND g.ts < w.hi "
    "AND g.ts >= :lo_min AND g.ts < :hi_max AND g.job_id IS NOT NULL OFFSET 0) s GROUP BY w.gpu_id, s.job_id",
    "sqlite": "SELECT w.gpu_id, g.job_id, MIN(g.ts), MAX(g.ts) FROM {windows} CROSS JOIN gpu_samples g "
    "WHERE g.gpu_id = w.gpu_id AND g.ts >= w.lo AND g.ts < w.hi AND g.ts >= :lo_min AND g.ts < :hi_max "
    "AND g.job_id IS NOT NULL GROUP BY w.gpu_id, g.job_id",
}
_SEEN_BY_SCAN = (
    "SELECT w.gpu_id, g.job_id, MIN(g.ts), MAX(g.ts) FROM {windows} JOIN gpu_samples g ON g.gpu_id = w.gpu_id "
    "AND g.ts >= w.lo AND g.ts < w.hi WHERE g.ts >= :lo_min AND g.ts < :hi_max AND g.job_id IS NOT NULL "
    "GROUP BY w.gpu_id, g.job_id"
)


def reconcile_job_map(session: Session, windows: Mapping[int, tuple[int, int]]) -> int:
    """Re-place jobs whose samples in ``windows`` (GPU id -> [start, end), epoch seconds: the readings a rollup has
    just metered as new, :func:`finops.ledger.metering_state.metered_windows`) name GPUs their allocations are not on.
    Returns how many (job, node) placements moved.

    For each such job and node, the job's allocations on that node are rewritten by
    :func:`~finops.jobs.placement.place_jobs` (so on the observed GPUs, other jobs displaced) and the job's hours are
    marked dirty, for the rollup that follows. Samples are read once each: those of earlier rollups were reconciled
    then, and a job imported since was placed on the GPUs its samples named (:func:`~finops.jobs.placement.place_jobs`
    observes them). Three queries when nothing disagrees: the samples in the windows (per GPU by its ``(gpu_id, ts)``
    key, grouped by GPU and job id), the hostnames of the GPUs they name, the jobs they name with their allocations.
    """
    if not windows:
        return 0
    observations = Observations()
    for gpu_id, job_id, first, last in session.execute(_seen_statement(session, windows), _window_rows(windows)):
        observations.spans.setdefault(job_id, {})[gpu_id] = (int(first), int(last))
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


def _seen_statement(session: Session, windows: Mapping[int, tuple[int, int]]) -> TextClause:
    """The query of the samples in ``windows`` that name a job: per GPU and job id, the first and last instant."""
    dialect = session.get_bind().dialect.name
    long = dialect == "postgresql" and max(hi - lo for lo, hi in windows.values()) >= 24 * HOUR
    return text(
        (_SEEN_BY_SCAN if long else _SEEN_BY_KEY[dialect]).format(
            windows=json_rows(dialect, "windows", "w", _WINDOW_COLUMNS)
        )
    )


def _window_rows(windows: Mapping[int, tuple[int, int]]) -> dict[str, object]:
    """The parameters of :func:`_seen_statement`: the windows as a JSON array, and their lowest start and highest
    end (epoch seconds)."""
    return {
        "windows": orjson.dumps([{"gpu_id": g, "lo": lo, "hi": hi} for g, (lo, hi) in windows.items()]).decode(),
        "lo_min": min(lo for lo, _ in windows.values()),
        "hi_max": max(hi for _, hi in windows.values()),
    }


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
