"""Nudges: per-user findings about wasteful GPU jobs, with their cost and the fix, as Job Defense Shield sends them.

Princeton's Job Defense Shield (JDS, https://github.com/PrincetonUniversity/job_defense_shield; its alerts in
``docs/alert/*.md``) e-mails Slurm users about their wasteful jobs; these are its GPU alerts over the ledger.

Five kinds (:data:`NUDGE_KINDS`), each one finding per user (:class:`Nudge`) listing the jobs concerned
(:class:`NudgeJob`); thresholds are :class:`NudgePolicy`'s, defaults JDS's:

- ``idle-running-job`` (JDS "Cancel 0% GPU Jobs", ``first_warning_minutes: 60``): a running job with a GPU in an
  idle episode (:mod:`finops.analysis.idle`: utilisation at or below the idle threshold, 5 % by default) that
  began at least :attr:`NudgePolicy.idle_running` ago (1 h) and is still open (its newest reading at most
  :attr:`NudgePolicy.idle_fresh` old). As JDS's default ``gpu_frac_threshold: 1.0``, one idle GPU is enough.
  Cost: the open episodes' so far. Fix: ``scancel`` when every GPU it holds is idle, else the request line of the
  busy ones for its next run.
- ``zero-util-gpu-hours`` (JDS "GPU-Hours at 0% Utilization", ``gpu_hours_threshold_user: 24``): a user's GPU-hours
  at 0 % over the last :attr:`NudgePolicy.period` (7 days, JDS's ``--days``) at least 24. As JDS, a GPU of a job
  is at 0 % when every reading of it over the period was 0 (the ledger's metered hours of it have no used
  GPU-seconds) and only those GPUs' hours count; hours without readings are not counted. Cost: those ledger rows'
  ``allocated_cost``. Fix: the request line of the GPUs the job did use.
- ``low-gpu-efficiency`` (JDS "Low GPU Utilization", ``eff_thres_pct: 25``, ``absolute_thres_hours: 50``): a user
  whose mean GPU utilisation over the period (Σ used GPU-seconds ÷ Σ metered GPU-seconds of the ledger) is at or
  below 25 % over more than 50 allocated GPU-hours. Cost: the ledger's idle cost of the user's jobs. Fix per job:
  fewer GPUs when some were at 0 %, else a MIG slice when it fits (below), else none (the job must use its GPUs
  better).
- ``mig-candidate`` (JDS "GPU Model Too Powerful", ``gpu_util_threshold: 20``, ``gpu_mem_usage_max: 10`` GB, which
  JDS reads as GiB): a job of one GPU, not already on a MIG slice, with mean utilisation above 0 (JDS leaves 0 %
  jobs to the alert above) and at most 20 %, whose memory peak — the most ``memory_used_bytes`` of its GPU while it
  held it in the period, from ``gpu_samples`` or the TSDB mode's ``tsdb_gpu_metering`` — is at most 10 GiB, and
  whose GPU's price-catalog model has a MIG profile holding that peak with right-sizing's headroom
  (:func:`finops.savings.mig_profiles.smallest_profile`: peak × :attr:`NudgePolicy.memory_headroom`, 1.2 by
  default, within the profile's memory; the smallest share of the GPU, then the least memory; never the whole GPU).
  Cost: the job's ``allocated_cost``; the saving is that less the slice's share of it
  (:func:`finops.jobs.mig.mig_share`: compute slices over the GPU's). Fix: that profile
  (:func:`finops.savings.fix_lines.mig_line`).
- ``busy-but-inefficient`` (no JDS counterpart: JDS reads utilisation only): a user's jobs that kept their GPUs
  running kernels while the SMs sat mostly empty — the efficiency report's busy-but-inefficient jobs
  (:func:`finops.savings.efficiency.efficiency_report`: mean utilisation ≥ 0.8 with SM activity measured and below
  0.5, NVIDIA's DCGM guidance; :attr:`NudgePolicy.efficiency`, the ``FINOPS_EFFICIENCY_*`` settings), when they add
  up to at least :attr:`NudgePolicy.inefficient_gpu_hours` (24, the zero-utilisation nudge's JDS default: a day of
  one GPU). A job without profiling data is never one. Cost: the jobs' ``allocated_cost``, with their inactive cost
  (the allocated cost of their profiled GPU-hours less its SM-active share). Per job its probable bottleneck and the
  evidence (:mod:`finops.savings.bottlenecks`); fix: the bottleneck rule's usual fix.

The period is the ledger hours starting in [now − period, now); costs are the ledger's (exact decimals, the prices
in force then); a ledger row of a GPU whose model has no price is unpriced, counted in ``unpriced_gpu_seconds``,
never as 0. Jobs of no user (a pod without a ``user`` label) are left out: there is nobody to tell. What the ledger
says of each job's GPUs, read once for every kind: :mod:`finops.savings.nudge_usage`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from finops.db.models import Allocation, Gpu, IdleEpisode, Job, Team
from finops.ledger.costmodel import round_exact
from finops.pricing.catalog import GIB, PriceCatalog
from finops.savings.efficiency import efficiency_report
from finops.savings.efficiency_policy import EfficiencyPolicy
from finops.savings.fix_lines import cancel_line, mig_line, request_line
from finops.savings.mig_profiles import MEMORY_HEADROOM, smallest_profile
from finops.savings.nudge_usage import JobUse, chunks, ledger_uses, peak_memory

IDLE_RUNNING = "idle-running-job"
ZERO_UTILIZATION = "zero-util-gpu-hours"
LOW_EFFICIENCY = "low-gpu-efficiency"
MIG_CANDIDATE = "mig-candidate"
BUSY_INEFFICIENT = "busy-but-inefficient"
NUDGE_KINDS = (IDLE_RUNNING, ZERO_UTILIZATION, LOW_EFFICIENCY, MIG_CANDIDATE, BUSY_INEFFICIENT)
"""Every kind of nudge, as settings, messages and the nudge log name them."""


@dataclass(frozen=True, slots=True)
class NudgePolicy:
    """When each kind of nudge is due (module docstring; defaults: Job Defense Shield's).

    ``period``: how far back the ledger is read; ``idle_running``: how long a running job's GPU must have been idle;
    ``idle_fresh``: how old an idle episode's end may be and still count as open (a rollup interval and the idle max
    gap: episodes are extended at each rollup); ``zero_util_gpu_hours``: GPU-hours at 0 % from which a user is told;
    ``low_efficiency_ratio`` and ``low_efficiency_gpu_hours``: mean utilisation at or below which, over more than how
    many GPU-hours; ``mig_max_utilization_ratio`` and ``mig_max_memory_bytes``: a single-GPU job at or below both
    is a MIG candidate; ``memory_headroom`` (≥ 1, right-sizing's default): what its memory peak is multiplied by
    before it is matched to a MIG profile; ``inefficient_gpu_hours``: the GPU-hours of a user's busy-but-inefficient
    jobs from which they are told, judged under ``efficiency``; ``kinds``: the kinds looked for. ValueError for a
    ratio outside [0, 1], a negative threshold, a headroom below 1 or an unknown kind."""

    period: timedelta = timedelta(days=7)
    idle_running: timedelta = timedelta(hours=1)
    idle_fresh: timedelta = timedelta(seconds=450)
    zero_util_gpu_hours: float = 24.0
    low_efficiency_ratio: float = 0.25
    low_efficiency_gpu_hours: float = 50.0
    mig_max_utilization_ratio: float = 0.20
    mig_max_memory_bytes: int = 10 * GIB
    memory_headroom: Decimal = MEMORY_HEADROOM
    inefficient_gpu_hours: float = 24.0
    efficiency: EfficiencyPolicy = field(default_factory=EfficiencyPolicy)
    kinds: frozenset[str] = frozenset(NUDGE_KINDS)

    def __post_init__(self) -> None:
        for name in ("low_efficiency_ratio", "mig_max_utilization_ratio"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be a ratio from 0 to 1, not {getattr(self, name)!r}")
        for name in (
            "zero_util_gpu_hours",
            "low_efficiency_gpu_hours",
            "mig_max_memory_bytes",
            "inefficient_gpu_hours",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)!r}")
        if not self.memory_headroom.is_finite() or self.memory_headroom < 1:
            raise ValueError(f"memory_headroom must be at least 1, not {self.memory_headroom}")
        unknown = sorted(set(self.kinds) - set(NUDGE_KINDS))
        if unknown:
            raise ValueError(f"unknown nudge kind {unknown[0]!r} (kinds: {', '.join(NUDGE_KINDS)})")


@dataclass(frozen=True, slots=True)
class NudgeJob:
    """One job a nudge lists.

    ``job_id`` as the scheduler names it (Slurm JobID, ``namespace/pod``), ``scheduler`` ``slurm`` or
    ``kubernetes``; ``gpu_model`` the product name of its GPUs; ``gpus`` the GPUs it held (in the period, or now for
    a running job), ``gpus_at_zero`` those at 0 % (idle, for ``idle-running-job``); ``gpu_seconds`` the GPU-seconds
    the nudge is about (at 0 %, idle so far, allocated); ``utilization`` its mean over its metered time (None:
    no reading); ``cost`` the money the nudge is about in ``currency`` (None: all unpriced), ``unpriced_gpu_seconds``
    of them without a price; ``saving`` (MIG) what a slice would have saved; ``peak_memory_bytes`` (MIG);
    ``profile`` the MIG profile proposed; ``since`` (idle running) when its GPUs became idle; ``fix`` the exact line
    (:mod:`finops.savings.fix_lines`), or a sentence when no line fixes it, or None. Busy but inefficient: its mean
    ``sm_active``, ``inactive_cost`` (None: unpriced), probable ``bottleneck`` (its title) and ``evidence``."""

    job_id: str
    scheduler: str
    name: str
    team: str
    partition: str
    gpu_model: str
    gpus: int
    gpus_at_zero: int
    gpu_seconds: float
    utilization: float | None
    cost: Decimal | None
    unpriced_gpu_seconds: float
    currency: str
    fix: str | None
    saving: Decimal | None = None
    peak_memory_bytes: int | None = None
    profile: str | None = None
    since: datetime | None = None
    sm_active: float | None = None
    inactive_cost: Decimal | None = None
    bottleneck: str | None = None
    evidence: str | None = None


@dataclass(frozen=True, slots=True)
class Nudge:
    """One user's finding of one kind over [start, end): the ``jobs`` (largest cost first), the GPU-seconds and
    cost they add up to (``cost`` None when every job is unpriced), ``allocated_cost`` and ``allocated_gpu_seconds``
    of all the user's jobs in the period and ``utilization`` (their mean) for ``low-gpu-efficiency``, ``saving``
    for ``mig-candidate``, ``inactive_cost`` for ``busy-but-inefficient``, the ``teams`` of the jobs."""

    kind: str
    user: str
    teams: tuple[str, ...]
    start: datetime
    end: datetime
    jobs: tuple[NudgeJob, ...]
    gpu_seconds: float
    cost: Decimal | None
    unpriced_gpu_seconds: float
    currency: str
    utilization: float | None = None
    allocated_gpu_seconds: float | None = None
    allocated_cost: Decimal | None = None
    saving: Decimal | None = None
    inactive_cost: Decimal | None = None

    @property
    def gpu_hours(self) -> float:
        """:attr:`gpu_seconds` in hours."""
        return self.gpu_seconds / 3600


# --- the kinds -------------------------------------------------------------------------------------------


def find_nudges(
    session: Session, now: datetime, policy: NudgePolicy, *, catalog: PriceCatalog, user: str | None = None
) -> list[Nudge]:
    """Every nudge due at ``now`` under ``policy`` (its kinds only; ``user``'s only when given), by user then kind
    (:data:`NUDGE_KINDS` order). ``catalog``: the price catalog in force, whose models' MIG profiles the slices are
    chosen from. Whether a user was told lately is not looked at here (:mod:`alerts.nudges`)."""
    start = now - policy.period
    found: list[Nudge] = []
    if IDLE_RUNNING in policy.kinds:
        found += _idle_running(session, now, policy, user, catalog)
    if policy.kinds & {ZERO_UTILIZATION, LOW_EFFICIENCY, MIG_CANDIDATE}:
        uses = ledger_uses(session, start, now, user)
        for use in uses.values():
            use.vendor = _vendor(catalog, use.model)
        _fit_mig(session, uses, start, now, policy, catalog)
        by_user: dict[str, list[JobUse]] = defaultdict(list)
        for use in uses.values():
            by_user[use.job.user].append(use)
        for name, jobs in by_user.items():
            for kind, build in ((ZERO_UTILIZATION, _zero), (LOW_EFFICIENCY, _low), (MIG_CANDIDATE, _mig)):
                if kind in policy.kinds:
                    nudge = build(name, jobs, start, now, policy)
                    if nudge is not None:
                        found.append(nudge)
    if BUSY_INEFFICIENT in policy.kinds:
        found += _busy_inefficient(session, start, now, policy, user)
    return sorted(found, key=lambda n: (n.user, NUDGE_KINDS.index(n.kind)))


def _mig_eligible(use: JobUse, policy: NudgePolicy) -> bool:
    """One GPU, not on a MIG slice, mean utilisation in (0, the MIG threshold]."""
    utilization = use.utilization
    return (
        len(use.gpus) == 1
        and not use.on_mig
        and utilization is not None
        and 0 < utilization <= policy.mig_max_utilization_ratio
    )


def _fit_mig(
    session: Session,
    uses: dict[int, JobUse],
    start: datetime,
    end: datetime,
    policy: NudgePolicy,
    catalog: PriceCatalog,
) -> None:
    """Set the memory peak of the jobs that could fit a MIG slice (only those: it reads raw readings) and, when the
    peak is within the policy's, the slice that holds it (module docstring)."""
    eligible = sorted(pk for pk, use in uses.items() if _mig_eligible(use, policy))
    for job_pk, peak in peak_memory(session, eligible, start, end).items():
        use = uses[job_pk]
        use.peak_memory_bytes = peak
        if peak <= policy.mig_max_memory_bytes:
            key = catalog.resolve(use.model)
            model = catalog.models[key] if key is not None else None
            use.mig_fit = smallest_profile(model, use.model, peak, policy.memory_headroom)


def _teams(jobs: Iterable[JobUse]) -> tuple[str, ...]:
    return tuple(sorted({j.team for j in jobs}))


def _sum_cost(jobs: Sequence[NudgeJob]) -> Decimal | None:
    priced = [j.cost for j in jobs if j.cost is not None]
    return sum(priced, Decimal(0)) if priced else None


def _by_cost(jobs: Iterable[NudgeJob]) -> tuple[NudgeJob, ...]:
    return tuple(sorted(jobs, key=lambda j: (-(j.cost or Decimal(0)), -j.gpu_seconds, j.job_id)))


def _priced(cost: Decimal, seconds: float, unpriced: float) -> Decimal | None:
    """``cost`` of ``seconds`` GPU-seconds of which ``unpriced`` have no price: None when none has one."""
    return None if seconds > 0 and unpriced >= seconds else cost


def _nudge_job(
    use: JobUse,
    gpu_seconds: float,
    cost: Decimal | None,
    unpriced: float,
    fix: str | None,
    *,
    saving: Decimal | None = None,
    profile: str | None = None,
) -> NudgeJob:
    job = use.job
    return NudgeJob(
        job_id=job.job_id, scheduler=job.scheduler, name=job.name, team=use.team, partition=job.partition,
        gpu_model=use.model, gpus=len(use.gpus), gpus_at_zero=len(use.zero), gpu_seconds=gpu_seconds,
        utilization=use.utilization, cost=cost, unpriced_gpu_seconds=unpriced, currency=use.currency, fix=fix,
        saving=saving, peak_memory_bytes=use.peak_memory_bytes if profile else None, profile=profile,
    )  # fmt: skip


def _zero(user: str, uses: list[JobUse], start: datetime, end: datetime, policy: NudgePolicy) -> Nudge | None:
    jobs = []
    for use in uses:
        zero = use.zero
        if zero:
            seconds = sum(g.metered for g in zero)
            unpriced = sum(g.metered_unpriced for g in zero)
            cost = _priced(sum((g.metered_cost for g in zero), Decimal(0)), seconds, unpriced)
            jobs.append(_nudge_job(use, seconds, cost, unpriced, use.fewer_gpus_fix()))
    total = sum(j.gpu_seconds for j in jobs)
    if not jobs or total < policy.zero_util_gpu_hours * 3600:
        return None
    listed = _by_cost(jobs)
    return Nudge(
        ZERO_UTILIZATION, user, _teams(u for u in uses if u.zero), start, end, listed, total, _sum_cost(listed),
        sum(j.unpriced_gpu_seconds for j in listed), listed[0].currency,
    )  # fmt: skip


def _low(user: str, uses: list[JobUse], start: datetime, end: datetime, policy: NudgePolicy) -> Nudge | None:
    seconds = sum(u.seconds for u in uses)
    metered = sum(u.metered for u in uses)
    if not metered or seconds <= policy.low_efficiency_gpu_hours * 3600:
        return None
    utilization = sum(u.used for u in uses) / metered
    if utilization > policy.low_efficiency_ratio:
        return None
    jobs = []
    for use in uses:
        if not use.metered:
            continue
        unpriced = sum(g.metered_unpriced for g in use.gpus.values())
        idle = _priced(sum((g.idle_cost for g in use.gpus.values()), Decimal(0)), use.metered, unpriced)
        profile = use.mig_fit.profile if use.mig_fit is not None else None
        fix = use.fewer_gpus_fix() or (mig_line(use.job.scheduler, profile) if profile else None)
        jobs.append(_nudge_job(use, use.seconds, idle, unpriced, fix, profile=profile))
    listed = _by_cost(jobs)
    allocated = [g.cost for u in uses for g in u.gpus.values() if g.seconds > g.unpriced]
    return Nudge(
        LOW_EFFICIENCY, user, _teams(uses), start, end, listed, sum(j.gpu_seconds for j in listed), _sum_cost(listed),
        sum(j.unpriced_gpu_seconds for j in listed), listed[0].currency, utilization=utilization,
        allocated_gpu_seconds=seconds, allocated_cost=sum(allocated, Decimal(0)) if allocated else None,
    )  # fmt: skip


def _mig(user: str, uses: list[JobUse], start: datetime, end: datetime, policy: NudgePolicy) -> Nudge | None:
    jobs = []
    for use in uses:
        fit = use.mig_fit
        if fit is None:
            continue
        (gpu,) = use.gpus.values()
        cost = _priced(gpu.cost, gpu.seconds, gpu.unpriced)
        saving = None if cost is None else round_exact(Fraction(cost) * (1 - fit.share))
        jobs.append(
            _nudge_job(
                use, gpu.seconds, cost, gpu.unpriced, mig_line(use.job.scheduler, fit.profile), saving=saving,
                profile=fit.profile,
            )
        )  # fmt: skip
    if not jobs:
        return None
    listed = _by_cost(jobs)
    savings = [j.saving for j in listed if j.saving is not None]
    return Nudge(
        MIG_CANDIDATE, user, tuple(sorted({j.team for j in listed})), start, end, listed,
        sum(j.gpu_seconds for j in listed), _sum_cost(listed), sum(j.unpriced_gpu_seconds for j in listed),
        listed[0].currency, saving=sum(savings, Decimal(0)) if savings else None,
    )  # fmt: skip


def _busy_inefficient(
    session: Session, start: datetime, end: datetime, policy: NudgePolicy, user: str | None
) -> list[Nudge]:
    """The ``busy-but-inefficient`` nudges (module docstring), from the efficiency report of [start, end)."""
    report = efficiency_report(session, start, end, policy=policy.efficiency)
    chosen = [job for job in report.inefficient if job.user and (user is None or job.user == user)]
    known: dict[int, tuple[str, str, str]] = {}
    for chunk in chunks(sorted(job.job_pk for job in chosen)):
        query = (
            select(Job.id, Job.scheduler, Job.partition, func.min(Gpu.model))
            .join(Allocation, Allocation.job_pk == Job.id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .where(Job.id.in_(chunk))
            .group_by(Job.id, Job.scheduler, Job.partition)
        )
        known.update({pk: (scheduler, partition, model) for pk, scheduler, partition, model in session.execute(query)})
    by_user: dict[str, list[NudgeJob]] = defaultdict(list)
    for job in chosen:
        if job.bottleneck is None or job.job_pk not in known:
            continue
        scheduler, partition, model = known[job.job_pk]
        by_user[job.user].append(
            NudgeJob(
                job_id=job.job_id, scheduler=scheduler, name=job.name, team=job.team, partition=partition,
                gpu_model=model, gpus=job.gpus, gpus_at_zero=0, gpu_seconds=job.gpu_seconds,
                utilization=job.utilization, cost=job.allocated_cost, unpriced_gpu_seconds=job.unpriced_gpu_seconds,
                currency=job.currency, fix=job.bottleneck.fix, sm_active=job.sm_active, inactive_cost=job.inactive_cost,
                bottleneck=job.bottleneck.title, evidence=job.bottleneck.evidence,
            )
        )  # fmt: skip
    nudges = []
    for name, jobs in by_user.items():
        seconds = sum(j.gpu_seconds for j in jobs)
        if seconds < policy.inefficient_gpu_hours * 3600:
            continue
        listed = _by_cost(jobs)
        inactive = [j.inactive_cost for j in listed if j.inactive_cost is not None]
        nudges.append(
            Nudge(
                BUSY_INEFFICIENT, name, tuple(sorted({j.team for j in listed})), start, end, listed, seconds,
                _sum_cost(listed), sum(j.unpriced_gpu_seconds for j in listed), listed[0].currency,
                inactive_cost=sum(inactive, Decimal(0)) if inactive else None,
            )
        )  # fmt: skip
    return nudges


def _vendor(catalog: PriceCatalog, model: str) -> str | None:
    """The vendor of GPU model ``model`` (a name as stored) in ``catalog``, None when it resolves to no model."""
    key = catalog.resolve(model)
    return catalog.models[key].vendor if key is not None else None


def _idle_running(
    session: Session, now: datetime, policy: NudgePolicy, user: str | None, catalog: PriceCatalog
) -> list[Nudge]:
    """The ``idle-running-job`` nudges (module docstring), from the idle episodes the rollup keeps current."""
    query = (
        select(IdleEpisode, Job, Team.name, Gpu.model)
        .join(Job, Job.id == IdleEpisode.job_pk)
        .join(Team, Team.id == Job.team_id)
        .join(Gpu, Gpu.id == IdleEpisode.gpu_id)
        .where(
            IdleEpisode.start <= now - policy.idle_running,
            IdleEpisode.end >= now - policy.idle_fresh,
            or_(Job.end.is_(None), Job.end > now),
            Job.user != "",
        )
    )
    if user is not None:
        query = query.where(Job.user == user)
    episodes: dict[int, list[tuple[IdleEpisode, str]]] = defaultdict(list)
    jobs: dict[int, tuple[Job, str]] = {}
    for episode, job, team, model in session.execute(query):
        if episode.end - episode.start < policy.idle_running:
            continue
        episodes[job.id].append((episode, model))
        jobs[job.id] = (job, team)
    held: dict[int, tuple[set[int], set[int]]] = {pk: (set(), set()) for pk in jobs}
    for chunk in chunks(sorted(jobs)):
        for job_pk, gpu_id, node_id in session.execute(
            select(Allocation.job_pk, Allocation.gpu_id, Gpu.node_id)
            .join(Gpu, Gpu.id == Allocation.gpu_id)
            .where(
                Allocation.job_pk.in_(chunk),
                Allocation.start <= now,
                or_(Allocation.end.is_(None), Allocation.end > now),
            )
        ):
            held[job_pk][0].add(gpu_id)
            held[job_pk][1].add(node_id)
    by_user: dict[str, list[NudgeJob]] = defaultdict(list)
    teams: dict[str, set[str]] = defaultdict(set)
    for job_pk, found in episodes.items():
        job, team = jobs[job_pk]
        idle_gpus = {e.gpu_id for e, _ in found}
        gpus, nodes = held[job_pk]
        gpus |= idle_gpus
        seconds = sum((e.end - e.start).total_seconds() for e, _ in found)
        priced = [e.cost for e, _ in found if e.cost is not None]
        unpriced = sum((e.end - e.start).total_seconds() for e, _ in found if e.cost is None)
        kept = len(gpus) - len(idle_gpus)
        fix = (
            cancel_line(job.scheduler, job.job_id)
            if kept == 0
            else request_line(
                job.scheduler,
                kept,
                gres_type=job.gpu_type,
                vendor=_vendor(catalog, found[0][1]),
                multi_node=len(nodes) > 1,
            )
        )
        by_user[job.user].append(
            NudgeJob(
                job_id=job.job_id, scheduler=job.scheduler, name=job.name, team=team, partition=job.partition,
                gpu_model=found[0][1], gpus=len(gpus), gpus_at_zero=len(idle_gpus), gpu_seconds=seconds,
                utilization=None, cost=sum(priced, Decimal(0)) if priced else None, unpriced_gpu_seconds=unpriced,
                currency=found[0][0].currency, fix=fix, since=min(e.start for e, _ in found),
            )
        )  # fmt: skip
        teams[job.user].add(team)
    nudges = []
    for name, listed in by_user.items():
        ordered = _by_cost(listed)
        nudges.append(
            Nudge(
                IDLE_RUNNING, name, tuple(sorted(teams[name])), min(j.since or now for j in ordered), now, ordered,
                sum(j.gpu_seconds for j in ordered), _sum_cost(ordered),
                sum(j.unpriced_gpu_seconds for j in ordered), ordered[0].currency,
            )
        )  # fmt: skip
    return nudges
