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

from finops.analysis.report import dicts_csv
from finops.analysis.waste import BUSY_JOB, NO_READING, REASONS, RULES, ReasonPolicy, Verdict, judge_job_gpu
from finops.analysis.waste_facts import episode_summaries, gpu_usage, job_gpu_facts, usage_means
from finops.db.dialect import analyze, insert_rows
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import IdleEpisode, Job, Team
from finops.db.sqltypes import Money
from finops.ledger.costmodel import round_preserving_total
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


def reason_dicts(rows: Sequence[ReasonCost]) -> list[dict[str, object]]:
    """JSON-ready rows: ``{team, month (YYYY-MM), reason, title, kind, gpu_hours, unpriced_gpu_hours, cost,
    currency}``, ``kind`` :attr:`ReasonCost.kind` (``idle``: idle GPU-hours and idle cost; ``unmetered``: the
    ``no_reading`` GPU-hours and their allocated cost), cost a decimal string in cents (null when all the row's
    GPU-hours are unpriced), the idle rows' cents adding up to their rounded total and the unmetered rows' to theirs;
    hours rounded to 6 decimals."""
    cents = _cents_by_kind(rows)
    return [
        {
            "team": row.team,
            "month": f"{row.month:%Y-%m}",
            "reason": row.reason,
            "title": row.title,
            "kind": row.kind,
            "gpu_hours": round(row.gpu_seconds / 3600, 6),
            "unpriced_gpu_hours": round(row.unpriced_gpu_seconds / 3600, 6),
            "cost": None if row.unpriced_gpu_seconds >= row.gpu_seconds > 0 and not row.cost else str(amount),
            "currency": row.currency,
        }
        for row, amount in zip(rows, cents, strict=True)
    ]


def _cents_by_kind(rows: Sequence[ReasonCost]) -> list[Decimal]:
    """The rows' costs in cents by :func:`round_preserving_total` within each kind, in row order."""
    cents: list[Decimal] = [Decimal(0)] * len(rows)
    for kind in (IDLE_KIND, UNMETERED_KIND):
        members = [i for i, row in enumerate(rows) if row.kind == kind]
        for i, amount in zip(members, round_preserving_total([rows[i].cost for i in members]), strict=True):
            cents[i] = amount
    return cents


def job_dicts(jobs: Sequence[JobWaste]) -> list[dict[str, object]]:
    """JSON-ready :class:`JobWaste` rows: job id, team, user, name, GPUs, mean utilisation (ratio, 4 decimals),
    idle GPU-hours, idle cost (decimal string, cents), currency, reason, title, evidence and ``kind``: ``idle``, or
    ``unmetered`` for a job whose verdict is ``no_reading`` (its ``idle_gpu_hours`` and ``idle_cost`` are then
    its GPU-hours without a reading and their allocated cost, not known to be idle)."""
    return [
        {
            "job_id": job.job_id,
            "team": job.team,
            "user": job.user,
            "name": job.name,
            "gpus": job.gpus,
            "mean_utilization": None if job.mean_utilization is None else round(job.mean_utilization, 4),
            "idle_gpu_hours": round(job.idle_gpu_seconds / 3600, 6),
            "idle_cost": f"{job.idle_cost:.2f}",
            "currency": job.currency,
            "reason": job.verdict.reason,
            "title": job.verdict.title,
            "evidence": job.verdict.evidence,
            "kind": UNMETERED_KIND if job.verdict.reason == NO_READING else IDLE_KIND,
        }
        for job in jobs
    ]


def reason_csv(rows: Sequence[ReasonCost]) -> str:
    """The rows of :func:`reason_dicts` as CSV text with a header line (empty without rows)."""
    return dicts_csv(reason_dicts(rows))


def reason_table(report: WasteReport, jobs_shown: int = 10) -> str:
    """The report as fixed-width text: per team, month and reason the idle GPU-hours, unpriced GPU-hours and idle
    cost (in cents that add up to the TOTAL line), then the ``jobs_shown`` costliest low-utilisation jobs with their
    reason and evidence; the GPU-hours without a reading apart, after them: per team and month with their allocated
    cost (not idle waste: whether the GPUs worked is unknown), the jobs they belong to and how to get readings."""
    if not report.rows:
        return "No job-held GPU-hours in this period."
    currency = report.rows[0].currency
    dicts = reason_dicts(report.rows)
    idle = [d for d in dicts if d["kind"] == IDLE_KIND]
    unmetered = [d for d in dicts if d["kind"] == UNMETERED_KIND]
    out = [f"Idle cost by reason, in {currency}"]
    if idle:
        out += aligned(_reason_lines(idle, ["team", "month", "reason", "idle GPU-h", "unpriced GPU-h", "idle cost"]),
                       left=3)  # fmt: skip
    else:
        out.append("No idle GPU-hours with a reading in this period.")
    jobs = [job for job in report.jobs if job.verdict.reason != NO_READING]
    if jobs:
        out += ["", f"Low-utilisation jobs, costliest first ({min(len(jobs), jobs_shown)} of {len(jobs)}):"]
        out += _job_lines(jobs[:jobs_shown], ["idle GPU-h", "idle cost"])
    if unmetered:
        out += [
            "",
            f"No reading (not idle waste, not in the idle cost above): GPU-hours jobs held without any reading, at "
            f"their allocated cost in {currency}; whether those GPUs worked is unknown.",
        ]
        out += aligned(_reason_lines(unmetered, ["team", "month", "", "GPU-h", "unpriced GPU-h", "allocated"]), left=3)
        dark = [job for job in report.jobs if job.verdict.reason == NO_READING]
        if dark:
            out += ["", f"Jobs without readings, costliest first ({min(len(dark), jobs_shown)} of {len(dark)}):"]
            out += _job_lines(dark[:jobs_shown], ["GPU-h", "allocated"])
        out += ["", NO_READING_FIX]
    return "\n".join(out)


NO_READING_FIX = (
    "To get readings: run the collector on the nodes these jobs ran on (gpu-finops collector, docs/collector.md), "
    "or pull from a Prometheus that scrapes DCGM (gpu-finops import prometheus); the collector-silent alert and the "
    "dashboard's Data quality page name the nodes that stopped reporting."
)
"""What the report by reason says to do about GPU-hours without a reading."""


def _reason_lines(dicts: Sequence[dict[str, object]], headers: list[str]) -> list[list[str]]:
    """A table of reason rows (:func:`reason_dicts`) with ``headers``, and a TOTAL line."""
    lines = [
        [str(d["team"]), str(d["month"]), str(d["title"]) if headers[2] else "", f"{d['gpu_hours']:,.2f}",
         f"{d['unpriced_gpu_hours']:,.2f}", "unpriced" if d["cost"] is None else f"{Decimal(str(d['cost'])):,.2f}"]
        for d in dicts
    ]  # fmt: skip
    total = sum((Decimal(str(d["cost"] or 0)) for d in dicts), Decimal(0))
    hours = sum(float(str(d["gpu_hours"])) for d in dicts)
    unpriced = sum(float(str(d["unpriced_gpu_hours"])) for d in dicts)
    return [headers, *lines, ["TOTAL", "", "", f"{hours:,.2f}", f"{unpriced:,.2f}", f"{total:,.2f}"]]


def _job_lines(jobs: Sequence[JobWaste], money_headers: list[str]) -> list[str]:
    """The jobs' table: job, team, user, mean use, GPU-hours and cost (``money_headers``), reason and evidence."""
    rows = [["job", "team", "user", "mean use", *money_headers, "probable reason"]]
    rows += [
        [job.job_id, job.team, job.user, "—" if job.mean_utilization is None else f"{job.mean_utilization:.0%}",
         f"{job.idle_gpu_seconds / 3600:,.2f}", f"{job.idle_cost:,.2f}", f"{job.verdict.title}: {job.verdict.evidence}"]
        for job in jobs
    ]  # fmt: skip
    return aligned(rows, left=3, last_free=True)


def aligned(rows: Sequence[Sequence[str]], left: int, last_free: bool = False) -> list[str]:
    """``rows`` of cells as lines: the first ``left`` columns left-aligned, the others right-aligned, two spaces
    apart; with ``last_free`` the last column is left as it is (free text)."""
    fixed = len(rows[0]) - (1 if last_free else 0)
    widths = [max(len(row[i]) for row in rows) for i in range(fixed)]
    lines = []
    for row in rows:
        cells = [
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row[:fixed], widths, strict=True))
        ]
        lines.append("  ".join([*cells, *row[fixed:]]).rstrip())
    return lines
