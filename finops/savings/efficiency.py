"""How efficiently jobs and teams used the GPUs they held over a period [start, end) — their SM activity band
(:mod:`finops.savings.efficiency_policy`, NVIDIA's DCGM guidance) — and the "busy but inefficient" jobs, costliest
first, each with its probable bottleneck (:mod:`finops.savings.bottlenecks`).

Per job, one SQL aggregation over its ledger rows of the hours starting in the period reads what the cost report
reads (:func:`finops.ledger.team_hours.ledger_team_sums`: GPU-seconds, utilisation, money, profiled seconds, SM,
tensor and DRAM activity) plus the other activities the ledger keeps (SM occupancy, FP32/FP16/FP64 pipes, with the
same :func:`~finops.ledger.team_hours.activity_sums`): an activity's mean is Σ profiled seconds × the row's mean ÷
Σ profiled seconds of the rows that measured it, as in the cost report; None when no row did. A job's mean
utilisation is its used ÷ metered GPU-seconds.

- **Band** of a job or a team: :meth:`EfficiencyPolicy.band` of its SM activity mean (a team's over all its jobs'
  profiled GPU-seconds); ``not measured`` when nothing measured it.
- **Busy but inefficient**: mean utilisation ≥ :attr:`EfficiencyPolicy.busy_utilization_ratio` with SM activity
  measured and below :attr:`EfficiencyPolicy.ineffective_ratio`; never a job without profiling data. Ordered by
  allocated cost (the priced GPU-hours'), then GPU-seconds.
- **Inactive cost** = allocated cost of the GPU-hours that measured SM activity − their SM-active cost (allocated ×
  SM activity, :mod:`finops.ledger.costmodel`): what the SMs sat empty cost. Restricted to the measured GPU-hours so
  that an unmeasured hour is never counted as inactive; None when no priced GPU-hour measured SM activity.

For the busy-but-inefficient jobs only, two more reads feed the bottleneck rules: their hourly SM activity means
(the same weighting per hour) and their nodes' fabric and storage rates over the hours they held them
(:func:`finops.ingest.node_io.node_rates`; per kind, the nodes' means weighted by the seconds with readings, and
the highest peak).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session

from finops.analysis.filters import Scope, ledger_conditions
from finops.analysis.report import sum_known
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import Gpu, Job, Team
from finops.ingest.node_io import NodeRate, node_rates
from finops.ledger.team_hours import TEAM_ACTIVITIES, activity_sums, ledger_team_sums
from finops.savings.bottlenecks import Bottleneck, JobFacts, judge
from finops.savings.efficiency_policy import BANDS, EfficiencyPolicy

OTHER_ACTIVITIES = ("sm_occupancy", "fp32_active", "fp16_active", "fp64_active")
"""The activities read per job beside the cost report's (:data:`~finops.ledger.team_hours.TEAM_ACTIVITIES`)."""
ACTIVITIES = (*TEAM_ACTIVITIES, *OTHER_ACTIVITIES)
"""Every activity a job's efficiency shows, SM activity first."""
_IN_CHUNK = 1000
"""Job ids per SQL IN list of the bottleneck reads."""


@dataclass(frozen=True, slots=True)
class ActivitySum:
    """One activity of a group: ``gpu_seconds`` = Σ profiled seconds × mean (None: not measured) over
    ``measured_gpu_seconds``; their quotient is the mean."""

    gpu_seconds: float | None
    measured_gpu_seconds: int

    @property
    def mean(self) -> float | None:
        """The activity's mean over the GPU-seconds that measured it; None when none did."""
        if self.gpu_seconds is None or not self.measured_gpu_seconds:
            return None
        return self.gpu_seconds / self.measured_gpu_seconds


@dataclass(frozen=True, slots=True)
class JobEfficiency:
    """One job over the period. Seconds are GPU-seconds; money exact (6 decimals) in ``currency``, of the priced
    GPU-hours only (``allocated_cost`` None when all are unpriced: ``unpriced_gpu_seconds`` = ``gpu_seconds``).

    ``utilization``: used ÷ metered GPU-seconds (None: no reading); ``profiled_gpu_seconds`` of the
    ``held_gpu_seconds``; ``activities``: name → :class:`ActivitySum`; ``sm_active_cost``: Σ of the ledger rows'
    (None: not measured or unpriced); ``measured_cost``: the allocated cost of the rows that have one; ``band``;
    ``bottleneck``: for a busy-but-inefficient job only."""

    job_pk: int
    job_id: str
    name: str
    team: str
    user: str
    gpus: int
    start: datetime | None
    end: datetime | None
    gpu_seconds: int
    held_gpu_seconds: int
    profiled_gpu_seconds: int
    utilization: float | None
    activities: Mapping[str, ActivitySum]
    allocated_cost: Decimal | None
    unpriced_gpu_seconds: int
    sm_active_cost: Decimal | None
    measured_cost: Decimal | None
    currency: str
    band: str
    bottleneck: Bottleneck | None = None

    def mean(self, activity: str) -> float | None:
        """The job's mean of ``activity`` (a name of :data:`ACTIVITIES`); None when not measured."""
        found = self.activities.get(activity)
        return None if found is None else found.mean

    @property
    def sm_active(self) -> float | None:
        """The job's mean SM activity (None: not measured)."""
        return self.mean("sm_active")

    @property
    def profiled_share(self) -> float | None:
        """Profiled ÷ held GPU-seconds (None when it held none)."""
        return self.profiled_gpu_seconds / self.held_gpu_seconds if self.held_gpu_seconds else None

    @property
    def inactive_cost(self) -> Decimal | None:
        """Allocated cost of the GPU-hours that measured SM activity − their SM-active cost (module docstring)."""
        if self.sm_active_cost is None or self.measured_cost is None:
            return None
        return self.measured_cost - self.sm_active_cost


@dataclass(frozen=True, slots=True)
class TeamEfficiency:
    """One team over the period, summed over its jobs (:class:`JobEfficiency`): its GPU-seconds, profiled and held
    GPU-seconds, SM/tensor/DRAM activity (``activities``), band, allocated, SM-active and inactive cost; per band its
    jobs and their allocated cost (``band_jobs``, ``band_costs``, every band present); its busy-but-inefficient
    jobs' count and allocated cost."""

    team: str
    currency: str
    gpu_seconds: int
    held_gpu_seconds: int
    profiled_gpu_seconds: int
    activities: Mapping[str, ActivitySum]
    band: str
    allocated_cost: Decimal
    sm_active_cost: Decimal | None
    inactive_cost: Decimal | None
    band_jobs: Mapping[str, int]
    band_costs: Mapping[str, Decimal]
    inefficient_jobs: int
    inefficient_cost: Decimal

    def mean(self, activity: str) -> float | None:
        """The team's mean of ``activity`` over its jobs' profiled GPU-seconds; None when not measured."""
        found = self.activities.get(activity)
        return None if found is None else found.mean

    @property
    def profiled_share(self) -> float | None:
        """Profiled ÷ held GPU-seconds (None when it held none)."""
        return self.profiled_gpu_seconds / self.held_gpu_seconds if self.held_gpu_seconds else None


@dataclass(frozen=True, slots=True)
class EfficiencyReport:
    """The period's efficiency: ``teams`` by allocated cost, ``jobs`` (every job that held a GPU in it) and
    ``inefficient``, the busy-but-inefficient jobs costliest first with their bottleneck, under ``policy``."""

    start: datetime
    end: datetime
    policy: EfficiencyPolicy
    teams: list[TeamEfficiency]
    jobs: list[JobEfficiency]
    inefficient: list[JobEfficiency] = field(default_factory=list)


def efficiency_report(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    policy: EfficiencyPolicy | None = None,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> EfficiencyReport:
    """Bands per job and team and the busy-but-inefficient jobs of the ledger hours starting in [start, end)
    (module docstring); ``cluster``, ``team``, ``partition`` select ledger rows as the cost report does."""
    policy = policy or EfficiencyPolicy()
    conditions = [LedgerEntry.hour >= start, LedgerEntry.hour < end, LedgerEntry.job_pk.is_not(None)]
    conditions += ledger_conditions(Scope(cluster=cluster, team=team, partition=partition))
    jobs = _jobs(session, conditions, policy)
    candidates = [job for job in jobs if policy.busy_but_inefficient(job.utilization, job.sm_active)]
    hourly = _hourly_sm_active(session, conditions, [job.job_pk for job in candidates])
    rates = _job_node_rates(session, conditions, [job.job_pk for job in candidates])
    judged = {
        job.job_pk: judge(JobFacts(_means(job), hourly.get(job.job_pk, ()), rates.get(job.job_pk, {})), policy)
        for job in candidates
    }
    jobs = [_with_bottleneck(job, judged.get(job.job_pk)) for job in jobs]
    inefficient = sorted(
        (job for job in jobs if job.bottleneck is not None),
        key=lambda job: (-(job.allocated_cost or Decimal(0)), -job.gpu_seconds, job.job_id),
    )
    return EfficiencyReport(start, end, policy, _teams(jobs, policy), jobs, inefficient)


def _means(job: JobEfficiency) -> dict[str, float | None]:
    return {name: job.mean(name) for name in ACTIVITIES}


def _with_bottleneck(job: JobEfficiency, bottleneck: Bottleneck | None) -> JobEfficiency:
    return job if bottleneck is None else replace(job, bottleneck=bottleneck)


def _jobs(session: Session, conditions: list[ColumnElement[bool]], policy: EfficiencyPolicy) -> list[JobEfficiency]:
    """Per job, the sums of its ledger rows ``conditions`` select: one aggregation."""
    sums = {**ledger_team_sums(), **activity_sums(OTHER_ACTIVITIES)}
    measured_cost = func.sum(case((LedgerEntry.sm_active_cost.is_not(None), LedgerEntry.allocated_cost)))
    query = (
        select(
            Job.id, Job.job_id, Job.name, Job.user, Job.gpus, Job.start, Job.end, Team.name.label("team"),
            *(column.label(name) for name, column in sums.items()), measured_cost.label("measured_cost"),
        )
        .join(Job, Job.id == LedgerEntry.job_pk)
        .join(Team, Team.id == LedgerEntry.team_id)
        .where(*conditions)
        .group_by(Job.id, Job.job_id, Job.name, Job.user, Job.gpus, Job.start, Job.end, Team.name)
    )  # fmt: skip
    jobs = []
    for r in session.execute(query):
        activities = {name: _activity_sum(r, name) for name in ACTIVITIES}
        metered = int(r.metered_gpu_seconds)
        seconds, unpriced = int(r.seconds), int(r.unpriced_gpu_seconds)
        jobs.append(
            JobEfficiency(
                job_pk=r.id, job_id=r.job_id, name=r.name, team=r.team, user=r.user, gpus=r.gpus, start=r.start,
                end=r.end, gpu_seconds=seconds, held_gpu_seconds=metered + int(r.unmetered_gpu_seconds),
                profiled_gpu_seconds=int(r.profiled_gpu_seconds or 0),
                utilization=float(r.used_gpu_seconds) / metered if metered else None, activities=activities,
                allocated_cost=None if unpriced >= seconds > 0 else Decimal(r.allocated_cost),
                unpriced_gpu_seconds=unpriced,
                sm_active_cost=None if r.sm_active_cost is None else Decimal(r.sm_active_cost),
                measured_cost=None if r.measured_cost is None else Decimal(r.measured_cost),
                currency=r.currency, band=policy.band(activities["sm_active"].mean),
            )
        )  # fmt: skip
    return jobs


def _activity_sum(r: Any, name: str) -> ActivitySum:
    total = getattr(r, f"{name}_gpu_seconds")
    return ActivitySum(None if total is None else float(total), int(getattr(r, f"{name}_measured_gpu_seconds") or 0))


def _chunks(job_pks: Sequence[int]) -> Iterable[list[int]]:
    wanted = sorted(set(job_pks))
    for first in range(0, len(wanted), _IN_CHUNK):
        yield wanted[first : first + _IN_CHUNK]


def _hourly_sm_active(
    session: Session, conditions: list[ColumnElement[bool]], job_pks: Sequence[int]
) -> dict[int, list[float]]:
    """Per job of ``job_pks``, its SM activity mean of each hour that measured it, in hour order."""
    sm = activity_sums(("sm_active",))
    hourly: dict[int, list[float]] = defaultdict(list)
    for chunk in _chunks(job_pks):
        query = (
            select(LedgerEntry.job_pk, LedgerEntry.hour, *(column.label(name) for name, column in sm.items()))
            .where(*conditions, LedgerEntry.job_pk.in_(chunk))
            .group_by(LedgerEntry.job_pk, LedgerEntry.hour)
            .order_by(LedgerEntry.job_pk, LedgerEntry.hour)
        )
        for row in session.execute(query):
            total, measured = row.sm_active_gpu_seconds, row.sm_active_measured_gpu_seconds
            if total is not None and measured:
                hourly[int(row.job_pk or 0)].append(float(str(total)) / int(str(measured)))
    return hourly


def _job_node_rates(
    session: Session, conditions: list[ColumnElement[bool]], job_pks: Sequence[int]
) -> dict[int, dict[str, NodeRate]]:
    """Per job of ``job_pks``: kind → its nodes' rate over the hours it held GPUs on each (module docstring)."""
    spans: list[tuple[int, int, datetime, datetime]] = []
    for chunk in _chunks(job_pks):
        query = (
            select(LedgerEntry.job_pk, Gpu.node_id, func.min(LedgerEntry.hour), func.max(LedgerEntry.hour))
            .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
            .where(*conditions, LedgerEntry.job_pk.in_(chunk))
            .group_by(LedgerEntry.job_pk, Gpu.node_id)
        )
        spans += [
            (int(job or 0), node, first, last + timedelta(hours=1)) for job, node, first, last in session.execute(query)
        ]
    rates = node_rates(session, [(node, first, end) for _, node, first, end in spans])
    per_job: dict[int, dict[str, list[NodeRate]]] = defaultdict(lambda: defaultdict(list))
    for job, node, first, end in spans:
        for kind, rate in rates[node, first, end].items():
            per_job[job][kind].append(rate)
    return {job: {kind: _combined(found) for kind, found in kinds.items()} for job, kinds in per_job.items()}


def _combined(rates: Sequence[NodeRate]) -> NodeRate:
    """Several nodes' rates of one kind as one: means weighted by their seconds with readings, the highest peak."""
    seconds = sum(rate.seconds for rate in rates)
    mean = sum(rate.mean * rate.seconds for rate in rates) / seconds if seconds else 0.0
    return NodeRate(mean, max(rate.peak for rate in rates), seconds)


def _teams(jobs: Sequence[JobEfficiency], policy: EfficiencyPolicy) -> list[TeamEfficiency]:
    """The jobs summed per team, by allocated cost descending."""
    groups: dict[str, list[JobEfficiency]] = defaultdict(list)
    for job in jobs:
        groups[job.team].append(job)
    teams = []
    for name, members in groups.items():
        activities = {
            activity: ActivitySum(
                sum_known(job.activities[activity].gpu_seconds for job in members),
                sum(job.activities[activity].measured_gpu_seconds for job in members),
            )
            for activity in TEAM_ACTIVITIES
        }
        inefficient = [job for job in members if job.bottleneck is not None]
        teams.append(
            TeamEfficiency(
                team=name, currency=min(job.currency for job in members),
                gpu_seconds=sum(job.gpu_seconds for job in members),
                held_gpu_seconds=sum(job.held_gpu_seconds for job in members),
                profiled_gpu_seconds=sum(job.profiled_gpu_seconds for job in members),
                activities=activities, band=policy.band(activities["sm_active"].mean),
                allocated_cost=_money(job.allocated_cost for job in members),
                sm_active_cost=sum_known(job.sm_active_cost for job in members),
                inactive_cost=sum_known(job.inactive_cost for job in members),
                band_jobs={band: sum(1 for job in members if job.band == band) for band in BANDS},
                band_costs={band: _money(job.allocated_cost for job in members if job.band == band) for band in BANDS},
                inefficient_jobs=len(inefficient), inefficient_cost=_money(job.allocated_cost for job in inefficient),
            )
        )  # fmt: skip
    return sorted(teams, key=lambda t: (-t.allocated_cost, t.team))


def _money(amounts: Iterable[Decimal | None]) -> Decimal:
    """Σ of the known amounts (an unpriced job adds nothing: its cost is unknown, and said so elsewhere)."""
    return sum((amount for amount in amounts if amount is not None), Decimal(0))
