"""Importing Slurm jobs: upsert jobs, place them on GPUs, record allocation intervals.

Slurm's sacct names a job's nodes and GPU count, not its GPU indices. Placement is first-fit, as Slurm's
``select/cons_tres`` does by default: on each node the lowest-numbered GPUs free over the job's whole
[Start, End). ``gres/gpu=N`` over k nodes is N/k per node (the remainder, if any, to the first nodes).
A job already placed whose start, nodes and GPU count did not change keeps its GPUs and only has its
end updated (a running job that finished). GPUs a node has not reported yet are created as placeholders
(model: that of the node's other GPUs when they are all one model, else the TRES GPU type, else
``unknown``) and take their UUID when its collector first reports.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, tzinfo

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from finops.hours import hours_between, mark_hours_dirty, mark_job_hours_dirty
from finops.models import Allocation, Gpu, Job, Node
from finops.rows import get_or_create
from finops.slurm import SacctJob, SacctLineError, parse_sacct
from finops.teams import TeamRules
from finops.timeutil import from_epoch, to_epoch

OPEN_END = 2**62


@dataclass
class ImportResult:
    """What an import did: jobs stored, lines skipped because they hold no GPU, and bad lines."""

    jobs: int = 0
    without_gpus: int = 0
    errors: list[SacctLineError] = field(default_factory=list)


@dataclass
class _GpuCalendar:
    """Busy intervals of one GPU, sorted by start, scanned in start order by :class:`_Placer`."""

    gpu: Gpu
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def is_free(self, start: int, end: int) -> bool:
        # Bookings on one GPU never overlap, so sorted by start they are sorted by end too: only the last
        # booking that starts before `end` can reach past `start`.
        upto = bisect.bisect_left(self.starts, end)
        return upto == 0 or self.ends[upto - 1] <= start

    def book(self, start: int, end: int) -> None:
        i = bisect.bisect_right(self.starts, start)
        self.starts.insert(i, start)
        self.ends.insert(i, end)


class _Placer:
    """First-fit GPU placement over the calendars of the nodes an import touches."""

    def __init__(self, session: Session, hostnames: Iterable[str], since: int) -> None:
        self.session = session
        self.nodes: dict[str, list[_GpuCalendar]] = {}
        node_ids = {name: get_or_create(session, Node, hostname=name).id for name in sorted(set(hostnames))}
        gpus = session.scalars(select(Gpu).where(Gpu.node_id.in_(node_ids.values())).order_by(Gpu.gpu_index)).all()
        by_gpu: dict[int, _GpuCalendar] = {}
        by_node: dict[int, list[_GpuCalendar]] = defaultdict(list)
        for gpu in gpus:
            calendar = _GpuCalendar(gpu)
            by_node[gpu.node_id].append(calendar)
            by_gpu[gpu.id] = calendar
        busy = session.execute(
            select(Allocation.gpu_id, Allocation.start, Allocation.end)
            .where(Allocation.gpu_id.in_(by_gpu.keys()), (Allocation.end.is_(None)) | (Allocation.end > since))
            .order_by(Allocation.start)
        ).all()
        for gpu_id, start, end in busy:
            by_gpu[gpu_id].book(to_epoch(start), OPEN_END if end is None else to_epoch(end))
        self.node_ids = node_ids
        self.nodes = {name: by_node[node_id] for name, node_id in node_ids.items()}

    def place(self, hostname: str, count: int, start: int, end: int, gpu_type: str | None) -> list[Gpu]:
        calendars = self.nodes[hostname]
        chosen = [c for c in calendars if c.is_free(start, end)][:count]
        known_models = {c.gpu.model for c in calendars}
        model = known_models.pop() if len(known_models) == 1 else (gpu_type or "unknown")
        while len(chosen) < count:
            placeholder = Gpu(
                node_id=self.node_ids[hostname],
                gpu_index=len(calendars),
                model=model,
                in_service_from=from_epoch(start),
            )
            self.session.add(placeholder)
            self.session.flush()
            calendars.append(_GpuCalendar(placeholder))
            chosen.append(calendars[-1])
        for calendar in chosen:
            calendar.book(start, end)
        return [c.gpu for c in chosen]


def per_node_counts(gpus: int, nodes: int) -> list[int]:
    """Split ``gpus`` over ``nodes``: equal shares, the remainder one each to the first nodes."""
    share, extra = divmod(gpus, nodes)
    return [share + (1 if i < extra else 0) for i in range(nodes)]


def import_sacct(
    session: Session, lines: Iterable[str], *, source: str, cluster: str = "default", tz: tzinfo = UTC
) -> ImportResult:
    """Parse sacct ``--parsable2`` output and store its GPU jobs in the caller's transaction.

    Bad lines are returned in ``errors`` (with line numbers) and the rest is imported. An empty
    Cluster field takes ``cluster``. Times are read in ``tz``, the zone sacct printed them in (its host's
    local time). Re-importing the same lines changes nothing.
    """
    parsed = parse_sacct(lines, source=source, tz=tz)
    result = ImportResult(errors=list(parsed.errors))
    jobs = sorted((j for j in parsed.jobs if j.start is not None), key=lambda j: (j.start, j.job_id_raw))
    result.without_gpus = sum(1 for j in parsed.jobs if j.gpus == 0 or not j.nodes)
    jobs = [j for j in jobs if j.gpus > 0 and j.nodes]
    if not jobs:
        return result
    since = min(to_epoch(j.start) for j in jobs if j.start is not None)
    placer = _Placer(session, (n for j in jobs for n in j.nodes), since)
    existing = {
        (job.cluster, job.job_id_raw): job
        for job in session.scalars(select(Job).where(Job.scheduler == "slurm", Job.start >= since))
    }
    teams = TeamRules(session)
    new_allocations: list[dict[str, object]] = []
    for record in jobs:
        job_cluster = record.cluster or cluster
        job = existing.get((job_cluster, record.job_id_raw))
        team_id = teams.team_id(record.account)
        if job is not None and _same_placement(job, record):
            _update_end(session, job, record)
            if (job.account, job.team_id) != (record.account, team_id):
                job.account, job.team_id = record.account, team_id
                mark_job_hours_dirty(session, job)
        else:
            if job is not None:
                mark_job_hours_dirty(session, job)
                session.delete(job)
                session.flush()
            job = _new_job(session, record, job_cluster, team_id)
            new_allocations.extend(_allocate(placer, job, record))
            mark_job_hours_dirty(session, job)
        result.jobs += 1
    if new_allocations:
        session.execute(Allocation.__table__.insert(), new_allocations)  # type: ignore[attr-defined]
    _record_partitions(session, placer.node_ids, jobs)
    session.flush()
    return result


def _record_partitions(session: Session, node_ids: dict[str, int], jobs: list[SacctJob]) -> None:
    """Set each node's ``partition`` to that of the latest-starting job on it (pricing rules select by it)."""
    latest: dict[str, str] = {}
    for record in jobs:  # sorted by start
        for hostname in record.nodes:
            latest[hostname] = record.partition
    for hostname, partition in latest.items():
        session.execute(update(Node).where(Node.id == node_ids[hostname]).values(partition=partition))


def _same_placement(job: Job, record: SacctJob) -> bool:
    return (job.start, job.gpus, job.node_list) == (record.start, record.gpus, ",".join(record.nodes))


def _update_end(session: Session, job: Job, record: SacctJob) -> None:
    if job.end == record.end and job.state == record.state:
        return
    ends = [end for end in (job.end, record.end) if end is not None]
    if ends:
        mark_hours_dirty(session, hours_between(min(ends), None))
    job.end, job.state = record.end, record.state
    session.execute(update(Allocation).where(Allocation.job_pk == job.id).values(end=record.end))


def _new_job(session: Session, record: SacctJob, cluster: str, team_id: int) -> Job:
    job = Job(
        scheduler="slurm",
        cluster=cluster,
        job_id=record.job_id,
        job_id_raw=record.job_id_raw,
        user=record.user,
        account=record.account,
        partition=record.partition,
        name=record.name,
        state=record.state,
        submit=record.submit,
        start=record.start,
        end=record.end,
        gpus=record.gpus,
        gpu_type=record.gpu_type,
        node_list=",".join(record.nodes),
        team_id=team_id,
    )
    session.add(job)
    session.flush()
    return job


def _allocate(placer: _Placer, job: Job, record: SacctJob) -> list[dict[str, object]]:
    assert record.start is not None
    start = to_epoch(record.start)
    end = OPEN_END if record.end is None else to_epoch(record.end)
    rows: list[dict[str, object]] = []
    for hostname, count in zip(record.nodes, per_node_counts(record.gpus, len(record.nodes)), strict=True):
        for gpu in placer.place(hostname, count, start, end, record.gpu_type):
            rows.append({"job_pk": job.id, "gpu_id": gpu.id, "start": start, "end": record.end})
    return rows
