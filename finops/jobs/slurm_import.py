"""Importing Slurm jobs: upsert jobs, place them on GPUs (:mod:`finops.jobs.placement`), record allocation intervals.

sacct names a job's nodes and GPU count, not its GPU indices: ``gres/gpu=N`` over k nodes is N/k per node (the
remainder, if any, to the first nodes), placed on the GPUs the collectors' job map names, else first-fit. A
GRES type that is a MIG profile (``gres/gpu:3g.40gb``, ``gres/gpu:a100_1g.5gb``) allocates that profile's share
of a GPU per device (:mod:`finops.jobs.mig`). A job already placed whose start, nodes and GPU count did not change
keeps its GPUs and only has its end, state and team updated (a running job that finished). Each run of a
requeued job (``sacct --duplicates``) is a job row of its own, keyed by its start.

:func:`run_sacct` runs sacct itself over the window since the last run (the ``sacct:<cluster>`` watermark) and
imports its output; :class:`ScheduledSacct` does so every few minutes in the scheduler.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.db.hours import HourMarks
from finops.db.models import Job
from finops.errors import FinopsError
from finops.jobs.gpu_calendar import Unit
from finops.jobs.mig import gres_mig_type, mig_share
from finops.jobs.nodes import ensure_nodes, node_models
from finops.jobs.placement import PlacementRequest, job_keys, place_jobs
from finops.jobs.sacct_watermark import advance, resume_from
from finops.jobs.slurm import SACCT_FIELDS, SacctJob, SacctLineError, parse_sacct
from finops.jobs.slurm_hostlist import compress_hostlist, expand_hostlist
from finops.jobs.store import replace_job, update_end
from finops.jobs.teams import TeamRules
from finops.timeutil import to_epoch, utc_now

log = logging.getLogger(__name__)


@dataclass
class ImportResult:
    """What an import did: jobs stored, lines skipped because they hold no GPU, bad lines, and the clusters the
    lines' Cluster fields named."""

    jobs: int = 0
    without_gpus: int = 0
    errors: list[SacctLineError] = field(default_factory=list)
    clusters: set[str] = field(default_factory=set)


def per_node_counts(gpus: int, nodes: int) -> list[int]:
    """Split ``gpus`` over ``nodes``: equal shares, the remainder one each to the first nodes."""
    share, extra = divmod(gpus, nodes)
    return [share + (1 if i < extra else 0) for i in range(nodes)]


def import_sacct(
    session: Session,
    lines: Iterable[str],
    *,
    source: str,
    cluster: str = "default",
    tz: tzinfo = UTC,
    not_after: datetime | None = None,
) -> ImportResult:
    """Parse sacct ``--parsable2`` output and store its GPU jobs in the caller's transaction.

    Bad lines are returned in ``errors`` (with line numbers) and the rest is imported. An empty
    Cluster field takes ``cluster``. Times are read in ``tz``, the zone sacct printed them in (its host's
    local time). Re-importing the same lines changes nothing.

    Every run of a job is stored as a job row of its own, keyed by (cluster, JobIDRaw, Start): a requeued job's
    earlier runs (``sacct --duplicates`` lists each, State ``REQUEUED``, ``NODE_FAIL``, ``PREEMPTED``...) keep
    their own GPUs, nodes, times and account, and are billed like any job. A stored run of the same job that
    overlaps an imported run in time but started at another instant is the same run read differently (an
    earlier listing, a listing without ``--duplicates`` whose last run replaces a run still open in the store):
    it is replaced. A stored run disjoint from every imported run of its job is kept: an earlier run that this
    listing does not show. ``not_after``: the import's time; lines with a time after it are refused
    (:func:`finops.jobs.slurm.parse_sacct`).
    """
    parsed = parse_sacct(lines, source=source, tz=tz, not_after=not_after)
    result = ImportResult(errors=list(parsed.errors), clusters={j.cluster for j in parsed.jobs if j.cluster})
    result.without_gpus = sum(1 for j in parsed.jobs if j.gpus == 0 or not j.nodes)
    # One record per run (the last listed, if a listing repeats one), in start order.
    runs = {
        (j.cluster or cluster, j.job_id_raw, j.start): j
        for j in parsed.jobs
        if j.start is not None and j.gpus > 0 and j.nodes
    }
    jobs = sorted(runs.values(), key=lambda j: (j.start, j.job_id_raw))
    if not jobs:
        return result
    stored = _stored_runs(session, jobs, cluster)
    teams = TeamRules(session)
    marks = HourMarks()
    added: list[tuple[Job, SacctJob]] = []
    mig_jobs = [record for record in jobs if _profile_of(record.gpu_type)]
    models = node_models(session, (n for record in mig_jobs for n in record.nodes)) if mig_jobs else {}
    # No flush until all are added (update_end's UPDATE would flush): the new jobs go in batched inserts.
    with session.no_autoflush:
        for key, superseded in _superseded(stored, jobs, cluster):
            marks.add_job(superseded)
            session.delete(superseded)
            stored[key].remove(superseded)
        session.flush()
        for record in jobs:
            job_cluster = record.cluster or cluster
            job = next(
                (run for run in stored.get((job_cluster, record.job_id_raw), ()) if run.start == record.start), None
            )
            team_id = teams.team_id(record.account)
            if job is not None and _same_placement(job, record):
                update_end(session, job, record.end, record.state, marks)
                if (job.account, job.team_id) != (record.account, team_id):
                    job.account, job.team_id = record.account, team_id
                    marks.add_job(job)
            else:
                new = _new_job(record, job_cluster, team_id)
                replace_job(session, job, new, marks)
                added.append((new, record))
            result.jobs += 1
    session.flush()  # the new jobs' ids, in batched inserts
    place_jobs(session, [_request(job, record, models) for job, record in added])
    marks.mark(session)
    _record_partitions(session, jobs)
    session.flush()
    return result


def _stored_runs(session: Session, jobs: list[SacctJob], cluster: str) -> dict[tuple[str, str], list[Job]]:
    """The stored runs of the listed jobs, by (cluster, JobIDRaw), whatever their start."""
    clusters = sorted({j.cluster or cluster for j in jobs})
    raw_ids = sorted({j.job_id_raw for j in jobs})
    stored: dict[tuple[str, str], list[Job]] = defaultdict(list)
    for i in range(0, len(raw_ids), 2000):
        chunk = raw_ids[i : i + 2000]
        query = select(Job).where(Job.scheduler == "slurm", Job.cluster.in_(clusters), Job.job_id_raw.in_(chunk))
        for job in session.scalars(query):
            stored[(job.cluster, job.job_id_raw)].append(job)
    return stored


def _superseded(
    stored: dict[tuple[str, str], list[Job]], jobs: list[SacctJob], cluster: str
) -> list[tuple[tuple[str, str], Job]]:
    """The stored runs an imported run of the same job replaces: those overlapping it in time with another start
    (runs of one job never overlap: Slurm starts a requeued job again only after its earlier run ended)."""
    listed: dict[tuple[str, str], list[SacctJob]] = defaultdict(list)
    for record in jobs:
        listed[(record.cluster or cluster, record.job_id_raw)].append(record)
    superseded = []
    for key, records in listed.items():
        for run in stored.get(key, ()):
            if any(run.start != r.start and _overlap(run.start, run.end, r.start, r.end) for r in records):
                superseded.append((key, run))
    return superseded


def _overlap(a0: datetime | None, a1: datetime | None, b0: datetime | None, b1: datetime | None) -> bool:
    """Whether [a0, a1) and [b0, b1) meet; a None end is open (still running)."""
    assert a0 is not None and b0 is not None
    return (a1 is None or b0 < a1) and (b1 is None or a0 < b1)


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
    return (job.start, job.gpus) == (record.start, record.gpus) and expand_hostlist(job.node_list) == list(record.nodes)


def _new_job(record: SacctJob, cluster: str, team_id: int) -> Job:
    """The new (not yet added) job of ``record``."""
    return Job(
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
        node_list=compress_hostlist(record.nodes),
        team_id=team_id,
    )


def _profile_of(gpu_type: str | None) -> str | None:
    """The MIG profile a job's GRES type names, else None (:func:`finops.jobs.mig.gres_mig_type`)."""
    mig = gres_mig_type(gpu_type)
    return mig[1] if mig else None


def _request(job: Job, record: SacctJob, models: dict[str, str | None]) -> PlacementRequest:
    """What to place for a new job: its GPUs split over its nodes, whole or MIG instances."""
    assert record.start is not None
    profile = _profile_of(record.gpu_type)
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


SACCT_STATES = ("RUNNING",)
"""``--state`` of the scheduled sacct run. sacct(1): with ``--state``, jobs are selected by their state *during*
[--starttime, --endtime], and "the RUNNING state will return any jobs completed (cancelled or otherwise) in the
time period requested as the job was also RUNNING during that time": every job that held its nodes at any
instant of the window, whatever its final state, and no job that never started."""

SACCT_ENVIRONMENT = ("TZ=UTC", "SLURM_TIME_FORMAT=standard")
"""What sacct runs with, through ``env`` (:func:`sacct_argv`): times written and read in UTC, in the
``YYYY-MM-DDTHH:MM:SS`` form (``SLURM_TIME_FORMAT=standard``, sacct(1) ENVIRONMENT VARIABLES)."""


class SacctError(FinopsError, RuntimeError):
    """sacct could not be run, timed out or exited non-zero; the message holds its stderr."""


@dataclass(frozen=True, slots=True)
class SacctRun:
    """One scheduled import: the window [start, end) asked of sacct, the command line, the import result, and the
    watermark moved (:mod:`finops.jobs.sacct_watermark`)."""

    start: datetime
    end: datetime
    argv: list[str]
    result: ImportResult
    watermark: str = ""


def sacct_argv(command: str, start: datetime, end: datetime, cluster: str | None = None) -> list[str]:
    """The sacct command line for jobs that ran in [start, end] (aware datetimes, written in UTC).

    ``command`` is split like a shell word list whose last word is the sacct program (``sacct``,
    ``/opt/slurm/bin/sacct``, ``ssh -i /keys/id head sacct``); ``cluster`` adds ``--clusters``. Times are
    ``YYYY-MM-DDTHH:MM:SS``, which sacct reads and prints in its local time: :func:`run_sacct` runs it with
    :data:`SACCT_ENVIRONMENT`, and when words come before the program (``ssh … sacct``, which passes no
    environment to the remote command) ``env`` and those settings go right before it, so that sacct runs with
    ``TZ=UTC`` wherever it runs. ValueError for a command without words.
    """
    *before, program = shlex.split(command) or [""]
    if not program:
        raise ValueError("empty sacct command")
    argv = [
        *before,
        *(("env", *SACCT_ENVIRONMENT) if before else ()),
        program,
        "--allusers",
        "--allocations",
        "--duplicates",
        "--parsable2",
        "--noheader",
        f"--format={','.join(SACCT_FIELDS)}",
        f"--starttime={_sacct_time(start)}",
        f"--endtime={_sacct_time(end)}",
        f"--state={','.join(SACCT_STATES)}",
    ]
    if cluster:
        argv.append(f"--clusters={cluster}")
    return argv


def _sacct_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def run_sacct(
    sessions: sessionmaker[Session],
    *,
    command: str = "sacct",
    cluster: str = "default",
    overlap: timedelta = timedelta(minutes=10),
    lookback: timedelta = timedelta(days=1),
    timeout_seconds: float = 300.0,
    now: datetime | None = None,
) -> SacctRun:
    """Run sacct for the jobs that held GPUs since the last run, import them, move the watermark forward.

    Window: from the cluster's watermark (:mod:`finops.jobs.sacct_watermark`) minus ``overlap`` (the first time:
    ``now`` minus ``lookback``) to ``now``. sacct is asked for jobs RUNNING at any instant of it
    (:data:`SACCT_STATES`), so a job is read again on every run while it runs, and once more after it ended; the
    watermark itself moves to ``now`` (the window's end). The overlap re-reads the last minutes for records slurmdbd
    stores late.
    ``cluster`` names the watermark and the lines with an empty Cluster field, and other than ``default`` is
    passed to sacct as ``--clusters``.

    sacct runs with ``TZ=UTC`` and ``SLURM_TIME_FORMAT=standard`` (:func:`sacct_argv`, also at the far end of an
    ``ssh`` command) so that its times read back as UTC. Bad lines
    are logged and skipped; they do not hold the watermark back. Raises :class:`SacctError` (logged, nothing
    imported, watermark unchanged) when sacct cannot be started, runs longer than ``timeout_seconds`` or
    exits non-zero.
    """
    end = (now or utc_now()).astimezone(UTC).replace(microsecond=0)
    with sessions() as session:
        mark = resume_from(session, cluster)
        start = mark - overlap if mark is not None else end - lookback
    argv = sacct_argv(command, start, end, None if cluster == "default" else cluster)
    env = {**os.environ, **dict(setting.split("=", 1) for setting in SACCT_ENVIRONMENT)}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_seconds, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise _failed(f"{shlex.join(argv)} timed out after {timeout_seconds:g} s", stderr) from None
    except OSError as exc:
        raise _failed(f"{shlex.join(argv)} could not be run: {exc.strerror}", "") from None
    if done.returncode != 0:
        raise _failed(f"{shlex.join(argv)} exited with status {done.returncode}", done.stderr)
    source = f"sacct {_sacct_time(start)}..{_sacct_time(end)}"
    with sessions.begin() as session:
        result = import_sacct(session, done.stdout.splitlines(), source=source, cluster=cluster, tz=UTC)
        name = advance(session, cluster, result.clusters, end)
    for error in result.errors:
        log.warning("skipped %s", error.message)
    anything = result.jobs or result.without_gpus or result.errors
    log.log(
        logging.INFO if anything else logging.DEBUG,  # quiet when sacct had nothing new
        "%s: %d GPU jobs imported, %d without GPUs, %d bad lines; watermark %s at %s",
        source, result.jobs, result.without_gpus, len(result.errors), name, end.isoformat(),
    )  # fmt: skip
    return SacctRun(start, end, argv, result, name)


def _failed(what: str, stderr: str) -> SacctError:
    message = f"{what}: {stderr.strip()}" if stderr.strip() else what
    log.error("sacct import failed, watermark not moved: %s", message)
    return SacctError(message)


@dataclass(frozen=True, slots=True)
class ScheduledSacct:
    """The scheduler's periodic :func:`run_sacct` (settings ``FINOPS_SACCT_*``); a failing run is logged and
    retried at the next interval from the same watermark."""

    command: str
    cluster: str
    interval_seconds: int
    overlap_seconds: int
    lookback_seconds: int
    timeout_seconds: float

    def run(self, sessions: sessionmaker[Session]) -> SacctRun | None:
        """One run; None when sacct failed (already logged)."""
        try:
            return run_sacct(
                sessions,
                command=self.command,
                cluster=self.cluster,
                overlap=timedelta(seconds=self.overlap_seconds),
                lookback=timedelta(seconds=self.lookback_seconds),
                timeout_seconds=self.timeout_seconds,
            )
        except SacctError:
            return None
