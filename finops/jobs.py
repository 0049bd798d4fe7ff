"""Importing Slurm jobs: upsert jobs, place them on GPUs (:mod:`finops.placement`), record allocation intervals.

sacct names a job's nodes and GPU count, not its GPU indices: ``gres/gpu=N`` over k nodes is N/k per node (the
remainder, if any, to the first nodes), placed on the GPUs the collectors' job map names, else first-fit. A
GRES type that is a MIG profile (``gres/gpu:3g.40gb``, ``gres/gpu:a100_1g.5gb``) allocates that profile's share
of a GPU per device (:mod:`finops.mig`). A job already placed whose start, nodes and GPU count did not change
keeps its GPUs and only has its end, state and team updated (a running job that finished).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from finops.hours import hours_between, mark_hours_dirty, mark_job_hours_dirty
from finops.mig import mig_share
from finops.models import Allocation, Job
from finops.placement import PlacementRequest, Unit, ensure_nodes, job_keys, node_models, place_jobs
from finops.slurm import SacctJob, SacctLineError, parse_sacct
from finops.teams import TeamRules
from finops.timeutil import to_epoch

log = logging.getLogger(__name__)

_MIG_GRES_TYPE = re.compile(r"(?:^|_)([1-9][0-9]?g\.[0-9]+gb(?:[+.][a-z][a-z.]*)?)$")


@dataclass
class ImportResult:
    """What an import did: jobs stored, lines skipped because they hold no GPU, and bad lines."""

    jobs: int = 0
    without_gpus: int = 0
    errors: list[SacctLineError] = field(default_factory=list)


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
    existing = {
        (job.cluster, job.job_id_raw): job
        for job in session.scalars(select(Job).where(Job.scheduler == "slurm", Job.start >= since))
    }
    teams = TeamRules(session)
    requests: list[PlacementRequest] = []
    mig_jobs = [record for record in jobs if _mig_profile(record.gpu_type)]
    models = node_models(session, (n for record in mig_jobs for n in record.nodes)) if mig_jobs else {}
    for record in jobs:
        job_cluster = record.cluster or cluster
        job = existing.get((job_cluster, record.job_id_raw))
        team_id = teams.team_id(record.account)
        if job is not None and _same_placement(job, record):
            update_end(session, job, record.end, record.state)
            if (job.account, job.team_id) != (record.account, team_id):
                job.account, job.team_id = record.account, team_id
                mark_job_hours_dirty(session, job)
        else:
            if job is not None:
                mark_job_hours_dirty(session, job)
                session.delete(job)
                session.flush()
            job = _new_job(session, record, job_cluster, team_id)
            requests.append(_request(job, record, models))
            mark_job_hours_dirty(session, job)
        result.jobs += 1
    place_jobs(session, requests)
    _record_partitions(session, jobs)
    session.flush()
    return result


def _record_partitions(session: Session, jobs: list[SacctJob]) -> None:
    """Set each node's ``partition`` to that of the latest-starting job on it (pricing rules select by it)."""
    latest: dict[str, str] = {}
    for record in jobs:  # sorted by start
        for hostname in record.nodes:
            latest[hostname] = record.partition
    nodes = ensure_nodes(session, latest)
    for hostname, partition in latest.items():
        if nodes[hostname].partition != partition:
            nodes[hostname].partition = partition


def _same_placement(job: Job, record: SacctJob) -> bool:
    return (job.start, job.gpus, job.node_list) == (record.start, record.gpus, ",".join(record.nodes))


def update_end(session: Session, job: Job, end: datetime | None, state: str) -> None:
    """Give an imported job its new ``end`` (None: still running) and ``state``, cutting its allocations at the
    new end and marking the ledger hours from the earlier of the two ends onward dirty."""
    if job.end == end and job.state == state:
        return
    ends = [value for value in (job.end, end) if value is not None]
    if ends:
        mark_hours_dirty(session, hours_between(min(ends), None))
    job.end, job.state = end, state
    session.execute(update(Allocation).where(Allocation.job_pk == job.id).values(end=end))


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


def _mig_profile(gpu_type: str | None) -> str | None:
    """The MIG profile a GRES type names (``3g.40gb``, ``a100_1g.5gb`` -> ``1g.5gb``), else None."""
    match = _MIG_GRES_TYPE.search(gpu_type or "")
    return match.group(1) if match else None


def _request(job: Job, record: SacctJob, models: dict[str, str | None]) -> PlacementRequest:
    """What to place for a new job: its GPUs split over its nodes, whole or MIG instances."""
    assert record.start is not None
    profile = _mig_profile(record.gpu_type)
    nodes: list[tuple[str, Sequence[Unit]]] = []
    for hostname, count in zip(record.nodes, per_node_counts(record.gpus, len(record.nodes)), strict=True):
        unit = Unit()
        if profile is not None:
            try:
                unit = Unit(mig_share(profile, models.get(hostname)), profile)
            except ValueError as exc:
                log.warning("job %s on %s: %s; placed as whole GPUs", record.job_id, hostname, exc)
        nodes.append((hostname, [unit] * count))
    return PlacementRequest(
        job_pk=job.id,
        start=to_epoch(record.start),
        end=None if record.end is None else to_epoch(record.end),
        nodes=nodes,
        gpu_type=None if profile else record.gpu_type,
        keys=job_keys("slurm", record.job_id, record.job_id_raw),
    )
