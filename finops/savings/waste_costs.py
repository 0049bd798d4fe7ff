"""Idle cost by waste reason, per team and calendar month (UTC), and the jobs whose mean utilisation is low with
their reasons: what the cost report by reason, the REST API, the monthly showback and the savings page show.

The money is the ledger's: a GPU-hour a job held has an idle cost (allocated − used, :mod:`finops.ledger.costmodel`)
when it was metered, and is unmetered otherwise. Each job-held GPU-hour of the period goes to one reason
(:mod:`finops.analysis.waste`):

- an unmetered GPU-hour: **no reading**, counted with its allocated cost (whether it was used is unknown);
- a GPU-hour an idle episode of the job on that GPU overlaps: that episode's reason (the episode covering most of
  the hour when two do). Hours, not seconds: the ledger's resolution, so an episode's first and last hours carry
  their busy part's small idle share with them;
- any other: the reason of the job on that GPU (:func:`finops.analysis.waste.judge_job_gpu`), or
  :data:`~finops.analysis.waste.BUSY_JOB` when the job's mean utilisation is not low (the idle share of jobs that
  work: not a waste reason).

So a team's rows add up to its idle cost in the cost report by team over the same months, plus the allocated cost of its
unmetered GPU-hours (the ``no_reading`` row). That row is not idle waste (whether those GPUs worked is unknown): every
output keeps it apart from the idle rows (``kind`` ``unmetered`` against ``idle``; its own table and total). GPU-hours
whose model has no price count in GPU-hours only (``unpriced_gpu_seconds``), never as 0. Episodes stored before reasons
were (reason NULL) do not claim hours: their hours take the job's reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, case, column, func, literal, select, table, text
from sqlalchemy.orm import Session

from finops.analysis.waste import BUSY_JOB, NO_READING, REASONS, RULES, ReasonPolicy, Verdict, judge_job_gpu
from finops.analysis.waste_facts import episode_summaries, gpu_usage, job_gpu_facts, usage_means
from finops.db.dialect import analyze, insert_rows
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import IdleEpisode, Job, Team
from finops.db.sqltypes import Money
from finops.timeutil import HOUR, month_start, next_month_start, to_epoch

REASON_ORDER: tuple[str, ...] = (*(rule.reason for rule in RULES), BUSY_JOB)
"""The reasons in their rules' precedence, then the busy jobs' idle share: the order rows are listed in."""
BUSY_JOB_TITLE = "idle share of busy jobs"
IDLE_KIND = "idle"
UNMETERED_KIND = "unmetered"
EPISODE_HOURS_TABLE = "waste_episode_hours"
"""The session-local temporary table of the GPU-hours idle episodes claim (job, GPU, hour, reason)."""


def reason_title(reason: str) -> str:
    """How people read ``reason`` (a key of :data:`~finops.analysis.waste.REASONS`, or ``busy_job``)."""
    return BUSY_JOB_TITLE if reason == BUSY_JOB else REASONS[reason].title


@dataclass(frozen=True, slots=True)
class ReasonCost:
    """A team's idle cost of one reason in one month (``month``: its first instant, UTC).

    ``gpu_seconds``: idle GPU-seconds (metered seconds − used GPU-seconds), or for ``no_reading`` the unmetered
    GPU-seconds; ``cost``: their exact cost (6 decimals; allocated cost for ``no_reading``), the priced GPU-hours'
    only; ``unpriced_gpu_seconds``: the part of ``gpu_seconds`` whose GPU model has no price."""

    team: str
    month: datetime
    reason: str
    gpu_seconds: float
    cost: Decimal
    unpriced_gpu_seconds: float
    currency: str

    @property
    def title(self) -> str:
        """The reason as people read it."""
        return reason_title(self.reason)

    @property
    def kind(self) -> str:
        """``unmetered`` for the ``no_reading`` row (GPU-hours without a reading and their allocated cost: not
        known to be idle), ``idle`` for the others (idle GPU-seconds and their idle cost)."""
        return UNMETERED_KIND if self.reason == NO_READING else IDLE_KIND


@dataclass(frozen=True, slots=True)
class JobWaste:
    """A job whose mean utilisation is low (or with a GPU left at ~0 % beside busy ones) over the period: its idle
    cost in the period outside its idle episodes' hours and its verdict (the reason of its GPUs with the most idle
    GPU-seconds, with that GPU's evidence). ``mean_utilization`` is over the whole job (None: never metered)."""

    job_id: str
    team: str
    user: str
    name: str
    gpus: int
    mean_utilization: float | None
    idle_gpu_seconds: float
    idle_cost: Decimal
    currency: str
    verdict: Verdict


@dataclass(slots=True)
class _Sums:
    """Idle GPU-seconds, priced idle cost and unpriced idle GPU-seconds of some job-held GPU-hours."""

    seconds: float = 0.0
    cost: Decimal = Decimal(0)
    unpriced: float = 0.0
    currency: str = ""

    def add(self, seconds: float, cost: Decimal | None, unpriced: float, currency: str | None) -> None:
        self.seconds += seconds
        self.cost += cost or Decimal(0)
        self.unpriced += unpriced
        self.currency = self.currency or (currency or "")

    def less(self, other: _Sums) -> _Sums:
        seconds, unpriced = self.seconds - other.seconds, self.unpriced - other.unpriced
        return _Sums(seconds, self.cost - other.cost, unpriced, self.currency)


@dataclass(slots=True)
class _Attribution:
    """Where a period's idle cost went: (team id, month, reason) → sums, and per job its verdicts' sums."""

    cells: dict[tuple[int, datetime, str], _Sums] = field(default_factory=lambda: defaultdict(_Sums))
    jobs: dict[int, dict[int, tuple[_Sums, Verdict]]] = field(default_factory=lambda: defaultdict(dict))
    job_means: dict[int, float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WasteReport:
    """Idle cost by reason (:class:`ReasonCost` rows, sorted by team, month and reason precedence) and the
    low-utilisation jobs (:class:`JobWaste`, costliest first) of one period."""

    rows: list[ReasonCost]
    jobs: list[JobWaste]


def waste_report(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    team: str | None = None,
    policy: ReasonPolicy = ReasonPolicy(),  # noqa: B008 - frozen dataclass: a safe default
) -> WasteReport:
    """Idle cost by reason per team and month over the ledger hours in [start, end) (UTC), and the jobs with such
    hours whose mean utilisation is low or that left a GPU at ~0 % beside busy ones; ``team``'s only when given.
    ``policy``: the thresholds of the jobs' reasons (those of stored episodes were applied when they were judged)."""
    attribution = _attribute(session, start, end, team, policy)
    return WasteReport(_reason_rows(session, attribution), _jobs(session, attribution))


def idle_cost_by_reason(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    team: str | None = None,
    policy: ReasonPolicy = ReasonPolicy(),  # noqa: B008 - frozen dataclass: a safe default
) -> list[ReasonCost]:
    """The idle cost by reason per team and month of :func:`waste_report` (without reading its jobs): one row per
    team, month and reason with GPU time, sorted by team, month and reason precedence (:data:`REASON_ORDER`)."""
    return _reason_rows(session, _attribute(session, start, end, team, policy))


def low_utilization_jobs(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    team: str | None = None,
    policy: ReasonPolicy = ReasonPolicy(),  # noqa: B008 - frozen dataclass: a safe default
) -> list[JobWaste]:
    """The low-utilisation jobs of :func:`waste_report`, costliest first: each with its verdict (:func:`finops.analysis.
    waste.judge_job_gpu`) and its idle cost in the period outside its episodes' hours."""
    return _jobs(session, _attribute(session, start, end, team, policy))


def _reason_rows(session: Session, attribution: _Attribution) -> list[ReasonCost]:
    """The :class:`ReasonCost` rows of ``attribution``'s cells with GPU time or cost, by team, month and reason
    precedence."""
    names = _team_names(session, {team_id for team_id, _, _ in attribution.cells})
    rows = [
        ReasonCost(names[team_id], month, reason, sums.seconds, sums.cost, sums.unpriced, sums.currency)
        for (team_id, month, reason), sums in attribution.cells.items()
        if sums.seconds > 0 or sums.cost
    ]
    rows.sort(key=lambda r: (r.team, r.month, REASON_ORDER.index(r.reason)))
    return rows


def _jobs(session: Session, attribution: _Attribution) -> list[JobWaste]:
    """The :class:`JobWaste` of the jobs ``attribution`` gave a verdict, costliest first."""
    if not attribution.jobs:
        return []
    found = []
    query = select(Job.id, Job.job_id, Team.name, Job.user, Job.name, Job.gpus).join(Team, Team.id == Job.team_id)
    for job_pk, job_id, team_name, user, name, gpus in _chunked(session, query, Job.id, set(attribution.jobs)):
        verdicts = attribution.jobs[job_pk]
        _, verdict = max(verdicts.values(), key=lambda item: (item[0].seconds, item[1].reason))
        total = _Sums()
        for part, _ in verdicts.values():
            total.add(part.seconds, part.cost, part.unpriced, part.currency)
        mean = attribution.job_means.get(job_pk)
        found.append(
            JobWaste(job_id, team_name, user, name, gpus, mean, total.seconds, total.cost, total.currency, verdict)
        )
    return sorted(found, key=lambda j: (-j.idle_cost, -j.idle_gpu_seconds, j.job_id))


def _attribute(
    session: Session, start: datetime, end: datetime, team: str | None, policy: ReasonPolicy
) -> _Attribution:
    """Every job-held GPU-hour of [start, end) given its reason (module docstring)."""
    result = _Attribution()
    team_ids = None if team is None else list(session.scalars(select(Team.id).where(Team.name == team)))
    remainders: dict[tuple[int, int, int, datetime], tuple[_Sums, _Sums]] = {}
    for lo, hi in _months(start, end):
        month = month_start(lo)
        claimed = _claimed_by_episodes(session, lo, hi, team_ids)
        for (team_id, job_pk, gpu_id), (whole, unmetered) in _job_gpu_sums(session, lo, hi, team_ids).items():
            if unmetered.seconds:
                result.cells[team_id, month, NO_READING].add(unmetered.seconds, unmetered.cost, unmetered.unpriced,
                                                             unmetered.currency)  # fmt: skip
            left = whole
            for reason, sums in claimed.get((job_pk, gpu_id), {}).items():
                result.cells[team_id, month, reason].add(sums.seconds, sums.cost, sums.unpriced, sums.currency)
                left = left.less(sums)
            remainders[team_id, job_pk, gpu_id, month] = (left, unmetered)
    if not remainders:
        return result
    job_pks = {job_pk for _, job_pk, _, _ in remainders}
    usage = gpu_usage(session, job_pks)
    jobs = {
        job_pk: (partition, name)
        for job_pk, partition, name in _chunked(session, select(Job.id, Job.partition, Job.name), Job.id, job_pks)
    }
    episodes: dict[int, list[tuple[str | None, datetime, datetime, str | None]]] = defaultdict(list)
    episode_query = select(IdleEpisode.job_pk, IdleEpisode.reason, IdleEpisode.start, IdleEpisode.end,
                           IdleEpisode.evidence)  # fmt: skip
    for job_pk, reason, lo, hi, evidence in _chunked(session, episode_query, IdleEpisode.job_pk, job_pks):
        episodes[job_pk].append((reason, lo, hi, evidence))
    summaries = {job_pk: episode_summaries(rows) for job_pk, rows in episodes.items()}
    means = {job_pk: usage_means(usage.get(job_pk, {})) for job_pk in job_pks}
    for (team_id, job_pk, gpu_id, month), (left, unmetered) in remainders.items():
        partition, name = jobs[job_pk]
        facts = job_gpu_facts(
            *means[job_pk], gpu_id, partition=partition, job_name=name, episodes=summaries.get(job_pk, {})
        )
        result.job_means[job_pk] = facts.job_mean
        verdict = judge_job_gpu(facts, policy)
        if left.seconds > 0 or left.cost:
            reason = BUSY_JOB if verdict is None else verdict.reason
            result.cells[team_id, month, reason].add(left.seconds, left.cost, left.unpriced, left.currency)
        if verdict is not None:
            judged = unmetered if verdict.reason == NO_READING else left
            sums = result.jobs[job_pk][gpu_id][0] if gpu_id in result.jobs[job_pk] else _Sums()
            sums.add(judged.seconds, judged.cost, judged.unpriced, judged.currency)
            result.jobs[job_pk][gpu_id] = (sums, verdict)
    return result


def _months(start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
    """[start, end) cut at month boundaries (UTC)."""
    lo = start
    while lo < end:
        hi = min(end, next_month_start(lo))
        yield lo, hi
        lo = hi


def _idle_columns() -> tuple[Any, Any, Any, Any]:
    """Per ledger row group: idle GPU-seconds, priced idle cost, unpriced idle GPU-seconds, currency."""
    metered = LedgerEntry.sample_count > 0
    idle_seconds = case((metered, LedgerEntry.seconds - LedgerEntry.used_gpu_seconds), else_=0.0)
    unpriced = case((metered & LedgerEntry.allocated_cost.is_(None), idle_seconds), else_=0.0)
    return (
        func.sum(idle_seconds),
        func.coalesce(func.sum(LedgerEntry.idle_cost), literal(0, Money())),
        func.sum(unpriced),
        func.min(LedgerEntry.currency),
    )


def _job_gpu_sums(
    session: Session, lo: datetime, hi: datetime, team_ids: list[int] | None
) -> dict[tuple[int, int, int], tuple[_Sums, _Sums]]:
    """Per (team id, job, GPU) over the ledger hours in [lo, hi): (idle sums of its metered hours, allocated sums of
    its unmetered hours)."""
    unmetered = LedgerEntry.sample_count == 0
    zero = literal(0, Money())
    query = (
        select(
            LedgerEntry.team_id, LedgerEntry.job_pk, LedgerEntry.gpu_id, *_idle_columns(),
            func.sum(case((unmetered, LedgerEntry.seconds), else_=0)),
            func.coalesce(func.sum(case((unmetered, LedgerEntry.allocated_cost), else_=zero)), zero),
            func.sum(case((unmetered & LedgerEntry.allocated_cost.is_(None), LedgerEntry.seconds), else_=0)),
        )
        .where(LedgerEntry.job_pk.is_not(None), LedgerEntry.hour >= lo, LedgerEntry.hour < hi)
        .group_by(LedgerEntry.team_id, LedgerEntry.job_pk, LedgerEntry.gpu_id)
    )  # fmt: skip
    if team_ids is not None:
        query = query.where(LedgerEntry.team_id.in_(team_ids))
    sums = {}
    for row in session.execute(query):
        team_id, job_pk, gpu_id, idle, cost, unpriced, currency, u_seconds, u_cost, u_unpriced = row
        sums[team_id, job_pk, gpu_id] = (
            _Sums(float(idle or 0.0), Decimal(cost), float(unpriced or 0.0), currency),
            _Sums(float(u_seconds or 0), Decimal(u_cost), float(u_unpriced or 0), currency),
        )
    return sums


_EPISODE_HOURS = table(EPISODE_HOURS_TABLE, column("job_pk"), column("gpu_id"), column("hour"), column("reason"))


def _claimed_by_episodes(
    session: Session, lo: datetime, hi: datetime, team_ids: list[int] | None
) -> dict[tuple[int, int], dict[str, _Sums]]:
    """Per (job, GPU): the idle sums of its ledger hours in [lo, hi) that its idle episodes claim, by the claiming
    episode's reason. An hour goes to the episode covering most of it."""
    episode = (IdleEpisode.job_pk, IdleEpisode.gpu_id, IdleEpisode.start, IdleEpisode.end, IdleEpisode.reason)
    query = select(*episode).where(IdleEpisode.start < hi, IdleEpisode.end > lo, IdleEpisode.reason.is_not(None))
    if team_ids is not None:
        query = query.where(IdleEpisode.job_pk.in_(select(Job.id).where(Job.team_id.in_(team_ids))))
    claims: dict[tuple[int, int, int], tuple[int, str]] = {}
    first, last = to_epoch(lo), to_epoch(hi)
    for job_pk, gpu_id, start, end, reason in session.execute(query):
        a, b = max(to_epoch(start), first), min(to_epoch(end), last)
        for hour in range(a - a % HOUR, b, HOUR):
            overlap = min(b, hour + HOUR) - max(a, hour)
            key = (job_pk, gpu_id, hour)
            if overlap > claims.get(key, (0, ""))[0]:
                claims[key] = (overlap, str(reason))
    if not claims:
        return {}
    connection = session.connection()
    _load_claims(connection, [(job, gpu, hour, reason) for (job, gpu, hour), (_, reason) in claims.items()])
    ledger = (
        select(_EPISODE_HOURS.c.job_pk, _EPISODE_HOURS.c.gpu_id, _EPISODE_HOURS.c.reason, *_idle_columns())
        .join(
            LedgerEntry,
            (LedgerEntry.job_pk == _EPISODE_HOURS.c.job_pk)
            & (LedgerEntry.gpu_id == _EPISODE_HOURS.c.gpu_id)
            & (LedgerEntry.hour == _EPISODE_HOURS.c.hour),
        )
        .where(LedgerEntry.hour >= lo, LedgerEntry.hour < hi)
        .group_by(_EPISODE_HOURS.c.job_pk, _EPISODE_HOURS.c.gpu_id, _EPISODE_HOURS.c.reason)
    )
    claimed: dict[tuple[int, int], dict[str, _Sums]] = defaultdict(dict)
    for job_pk, gpu_id, reason, idle, cost, unpriced, currency in session.execute(ledger):
        claimed[job_pk, gpu_id][reason] = _Sums(float(idle or 0.0), Decimal(cost), float(unpriced or 0.0), currency)
    session.execute(text(f"DELETE FROM {EPISODE_HOURS_TABLE}"))  # noqa: S608 - a constant
    return claimed


def _load_claims(connection: Connection, rows: Sequence[tuple[int, int, int, str]]) -> None:
    """Put the claimed GPU-hours in the session's temporary table :data:`EPISODE_HOURS_TABLE`, made if missing and
    emptied first."""
    connection.execute(
        text(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {EPISODE_HOURS_TABLE} (job_pk INTEGER NOT NULL, "
            "gpu_id INTEGER NOT NULL, hour BIGINT NOT NULL, reason VARCHAR(32) NOT NULL, "
            "PRIMARY KEY (job_pk, gpu_id, hour))"
        )
    )
    connection.execute(text(f"DELETE FROM {EPISODE_HOURS_TABLE}"))  # noqa: S608 - a constant
    names = ("job_pk", "gpu_id", "hour", "reason")
    insert_rows(connection, _EPISODE_HOURS, [dict(zip(names, row, strict=True)) for row in rows])
    analyze(connection, EPISODE_HOURS_TABLE)


def _chunked(session: Session, query: Any, key: Any, values: set[int], chunk: int = 1000) -> Iterator[Any]:
    """The rows of ``query`` with ``key`` in ``values``, asked ``chunk`` values at a time."""
    ordered = sorted(values)
    for first in range(0, len(ordered), chunk):
        yield from session.execute(query.where(key.in_(ordered[first : first + chunk])))


def _team_names(session: Session, team_ids: set[int]) -> dict[int, str]:
    return {team_id: name for team_id, name in session.execute(select(Team.id, Team.name).where(Team.id.in_(team_ids)))}
