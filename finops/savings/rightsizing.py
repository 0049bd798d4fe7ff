"""Right-sizing: jobs that held more GPUs, or larger GPUs, than their use needed, and what the smaller request saves.

Over a period [start, end) (the ledger hours starting in it, as :mod:`finops.analysis.report` reads them), for each
job that held whole GPUs (:func:`rightsizing`):

- **Use of a GPU.** Each of the job's GPUs has its mean **use** over the job's ledger rows of the period: Σ use ÷
  Σ ``seconds`` of its metered rows (rows with samples), where a row's use is, over the ``profiled_seconds`` of a row
  that measured SM activity, ``sm_active_ratio`` × those seconds, and over the rest of its seconds its utilisation
  (``used_gpu_seconds`` ÷ ``seconds``) × those seconds — the row's utilisation standing for its unprofiled readings'.
  A row without SM activity is judged by utilisation alone. Why: utilisation
  (``utilization.gpu``, DCGM_FI_DEV_GPU_UTIL) is, in NVIDIA's words (nvidia-smi), the "percent of time over the
  past sample period during which one or more kernels was executing on the GPU", so one small kernel, or collective
  kernels spinning while they wait on peers, reads 100 %; SM activity (DCGM_FI_PROF_SM_ACTIVE, NVML GPM
  ``SM_UTIL``) is "the fraction of time at least one warp was active on a multiprocessor, averaged over all
  multiprocessors", and DCGM's user guide ("Feature Overview" → "Profiling Metrics") reads a value below 0.5 as
  likely "ineffective GPU usage" (:mod:`finops.savings.efficiency_policy`). Where it is measured, SM activity says
  how much of the GPU was used; where it is not, utilisation is all there is. A finding says which measure it used
  (:attr:`~finops.savings.rightsizing_policy.JobFinding.measure`) beside both means.
- **GPU count.** A GPU whose mean use is at or below :attr:`RightsizingPolicy.idle_ratio` (default 5 %: the idle
  detection's default threshold, DESIGN.md "Idle episode", ``FINOPS_IDLE_THRESHOLD_RATIO``) is idle; the others
  are busy (k of them). A job that requested N
  GPUs and kept k < N busy would have needed max(k, 1): the idle GPUs, least used first, are dropped, keeping at
  least the busiest one (a GPU without readings is kept: nothing says it was idle). The GPU-hours and cost saved are
  those the ledger allocated to the dropped GPUs (:attr:`~finops.db.ledger_tables.LedgerEntry.allocated_cost`, the
  prices in force at the time), exact to the ledger's quantum.
- **Memory.** When the kept GPUs' mean use is at or below :attr:`RightsizingPolicy.low_utilization_ratio`
  (default 15 %, Job Defense Shield's ``gpu_util_threshold`` for jobs that "could have used a less powerful GPU
  model or MIG": the job does not need the whole GPU's compute, which a smaller model or a MIG slice lacks), the
  job's memory peak — the most memory in use on any of its GPUs while it held them, from ``gpu_samples``
  (``memory_used_bytes``) and from the TSDB mode's segments (``tsdb_gpu_metering.memory_max_bytes``) — times
  :attr:`RightsizingPolicy.memory_headroom` (default :data:`finops.savings.mig_profiles.MEMORY_HEADROOM`, 1.2:
  readings every 10-60 s miss short peaks; a 20 % margin) is compared with the price catalog's memory sizes
  (:class:`finops.pricing.catalog.MemorySize`):

  - **MIG profile**: for a job left with one GPU, the smallest MIG profile of its model that holds it
    (:func:`finops.savings.mig_profiles.smallest_profile`, the rule the nudges use too: smallest share of the GPU,
    then least memory, the whole GPU never). A slice costs its share of the GPU's rate, as the ledger prices one
    (:func:`finops.jobs.mig.mig_share`: ``1g.10gb`` on an H100 is 1/7); saving = kept GPU-hours × rate × (1 −
    share). One slice only: MIG instances have no NVLink or peer-to-peer between them, so a multi-GPU job is not
    moved to several.
  - **Smaller model**: the cheapest catalog model of the same vendor whose memory holds it and whose rate in the
    job's pricing model is below its own; saving = kept GPU-hours × (rate − smaller rate).

  Both at the catalog's prices at ``priced_at`` (current prices). A job at low use without any memory
  reading is listed with a note saying its memory is unknown, never dropped.

A job's **saving** is its GPU-count saving plus the larger of its MIG and smaller-model savings (these apply to the
GPUs it keeps, so they add). Each finding carries the fix as a job script or pod spec would say it
(:mod:`finops.savings.fix_lines`): Slurm ``#SBATCH --gres=gpu:h100:2`` (one node; ``--gpus=h100:9`` when the
GPUs it keeps span several nodes, since ``--gres`` counts per node), ``#SBATCH --gres=gpu:1g.10gb:1`` for a MIG
slice (Slurm's MIG GRES types are the profile names), Kubernetes ``nvidia.com/gpu: 2`` or
``nvidia.com/mig-1g.10gb: 1`` under ``resources.limits``.

Jobs that held MIG shares are left out (their GPUs' memory and utilisation readings are the whole GPU's). On a
time-sliced GPU the memory in use is every holder's, so a peak can only be too high: no slice is proposed that the
job's own use would not fit.

The thresholds and the findings' shape: :mod:`finops.savings.rightsizing_policy`; the findings summed per user or
team and rendered: :mod:`finops.savings.rightsizing_report`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from sqlalchemy import ColumnElement, case, exists, func, select
from sqlalchemy.orm import Session

from finops.analysis.filters import Scope, ledger_conditions
from finops.db.dialect import transaction_settings
from finops.db.ledger_tables import LedgerEntry, TsdbGpuMetering
from finops.db.models import Allocation, Gpu, GpuSample, Job, Team
from finops.jobs.mig import gres_mig_type
from finops.ledger.costmodel import SECONDS_PER_HOUR, round_exact
from finops.pricing.catalog import GpuModel, PriceCatalog, PriceNotFound, PricingModel
from finops.savings.fix_lines import mig_line, request_line
from finops.savings.mig_profiles import smallest_profile
from finops.savings.rightsizing_policy import NO_MEMORY_READING, JobFinding, RightsizingPolicy, RightsizingReport
from finops.timeutil import to_epoch

_IN_CHUNK = 1000
"""Job ids per SQL IN list of the memory queries."""
_NO_JIT = {"jit": "off"}
"""PostgreSQL settings of the memory queries: their plans reach every day partition of the period, whose JIT
compilation took longer (~2.4 s a query on a month) than the index lookups it would speed up (~1 s)."""


@dataclass(slots=True)
class _GpuUse:
    """One GPU's rows of one job in the period: seconds, metered seconds, used GPU-seconds (utilisation), priced
    cost, seconds without a price; ``sm_seconds`` of the metered seconds measured SM activity, ``sm_active_seconds``
    = Σ their SM activity × seconds, ``sm_used_seconds`` = the utilisation's GPU-seconds over them (module
    docstring, "Use of a GPU")."""

    gpu_id: int
    seconds: int
    metered_seconds: int
    used_gpu_seconds: float
    cost: Decimal
    unpriced_seconds: int
    sm_seconds: int = 0
    sm_active_seconds: float = 0.0
    sm_used_seconds: float = 0.0

    @property
    def use_seconds(self) -> float:
        """GPU-seconds of use: SM activity over the seconds that measured it, utilisation over the rest."""
        if not self.sm_seconds:
            return self.used_gpu_seconds
        return self.used_gpu_seconds - self.sm_used_seconds + self.sm_active_seconds

    @property
    def mean(self) -> float | None:
        """Mean use over the metered seconds (None: no reading)."""
        return self.use_seconds / self.metered_seconds if self.metered_seconds else None


@dataclass(slots=True)
class _JobUse:
    gpus: list[_GpuUse] = field(default_factory=list)
    pricing_models: Counter[str] = field(default_factory=Counter)
    currency: str = ""


def rightsizing(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    catalog: PriceCatalog,
    priced_at: datetime,
    policy: RightsizingPolicy | None = None,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
    user: str | None = None,
) -> RightsizingReport:
    """Right-sizing findings of the jobs with ledger rows in the hours starting in [start, end) (module docstring),
    largest saving first. ``catalog``: the price catalog in force (memory sizes, MIG profiles, current rates);
    ``priced_at``: the instant whose prices the memory savings use (now). ``cluster``, ``team``, ``partition``
    select ledger rows as :func:`finops.analysis.report.cost_report` does, ``user`` the jobs of that user.

    Reads the period's ledger rows once (grouped per job and GPU), the jobs, the GPUs, and the memory readings of the
    low-utilisation jobs only, each query bounded by the job's holdings and the period."""
    policy = policy or RightsizingPolicy()
    conditions = [LedgerEntry.hour >= start, LedgerEntry.hour < end, LedgerEntry.job_pk.is_not(None)]
    conditions += ledger_conditions(Scope(cluster=cluster, team=team, partition=partition))
    if user is not None:
        conditions.append(LedgerEntry.job_pk.in_(select(Job.id).where(Job.user == user)))
    uses = _job_uses(session, conditions)
    jobs = _jobs(session, conditions)
    gpus = {row.id: (row.model, row.node_id) for row in session.execute(select(Gpu.id, Gpu.model, Gpu.node_id))}
    context = _Context(catalog, priced_at, policy, gpus, _fleet_models(gpus.values(), catalog), _site_types(session))
    # Both reads select by the same conditions; a rollup committing between them may leave a job in one only.
    judged = [(job, uses[job.id]) for job in jobs if not job.holds_mig and job.id in uses]
    unmetered = sum(1 for _, use in judged if not any(g.metered_seconds for g in use.gpus))
    drafts = [_Draft.of(job, use, context) for job, use in judged]
    low = [draft for draft in drafts if draft.low_utilization]
    peaks = _memory_peaks(session, [draft.job.id for draft in low], start, end)
    findings = [f for f in (draft.finding(peaks.get(draft.job.id), context) for draft in drafts) if f is not None]
    findings.sort(key=lambda f: (-(f.saving or Decimal(0)), -f.gpu_seconds, f.job_id))
    return RightsizingReport(start, end, priced_at, policy, findings, len(judged), unmetered)


def _job_uses(session: Session, conditions: list[ColumnElement[bool]]) -> dict[int, _JobUse]:
    """Per job id, its GPUs' sums over the ledger rows ``conditions`` select."""
    metered = LedgerEntry.sample_count > 0
    sm_measured = metered & (LedgerEntry.seconds > 0) & LedgerEntry.sm_active_ratio.is_not(None)
    query = (
        select(
            LedgerEntry.job_pk,
            LedgerEntry.gpu_id,
            LedgerEntry.pricing_model,
            func.min(LedgerEntry.currency).label("currency"),
            func.sum(LedgerEntry.seconds).label("seconds"),
            func.sum(case((metered, LedgerEntry.seconds), else_=0)).label("metered_seconds"),
            func.sum(case((metered, LedgerEntry.used_gpu_seconds), else_=0.0)).label("used_gpu_seconds"),
            func.sum(LedgerEntry.allocated_cost).label("cost"),
            func.sum(case((LedgerEntry.allocated_cost.is_(None), LedgerEntry.seconds), else_=0)).label("unpriced"),
            func.sum(case((sm_measured, LedgerEntry.profiled_seconds), else_=0)).label("sm_seconds"),
            func.sum(case((sm_measured, LedgerEntry.profiled_seconds * LedgerEntry.sm_active_ratio), else_=0.0)).label(
                "sm_active_seconds"
            ),
            func.sum(
                case(
                    (sm_measured, LedgerEntry.used_gpu_seconds * LedgerEntry.profiled_seconds / LedgerEntry.seconds),
                    else_=0.0,
                )
            ).label("sm_used_seconds"),
        )
        .where(*conditions)
        .group_by(LedgerEntry.job_pk, LedgerEntry.gpu_id, LedgerEntry.pricing_model)
    )
    uses: dict[int, _JobUse] = defaultdict(_JobUse)
    per_gpu: dict[tuple[int, int], _GpuUse] = {}
    for r in session.execute(query):
        use = uses[r.job_pk]
        use.currency = min(use.currency or r.currency, r.currency)
        if r.pricing_model is not None:
            use.pricing_models[r.pricing_model] += int(r.seconds)
        gpu = per_gpu.get((r.job_pk, r.gpu_id))
        if gpu is None:
            gpu = per_gpu[r.job_pk, r.gpu_id] = _GpuUse(r.gpu_id, 0, 0, 0.0, Decimal(0), 0)
            use.gpus.append(gpu)
        gpu.seconds += int(r.seconds)
        gpu.metered_seconds += int(r.metered_seconds)
        gpu.used_gpu_seconds += float(r.used_gpu_seconds)
        gpu.cost += Decimal(r.cost) if r.cost is not None else Decimal(0)
        gpu.unpriced_seconds += int(r.unpriced)
        gpu.sm_seconds += int(r.sm_seconds or 0)
        gpu.sm_active_seconds += float(r.sm_active_seconds or 0.0)
        gpu.sm_used_seconds += float(r.sm_used_seconds or 0.0)
    return uses


@dataclass(frozen=True, slots=True)
class _JobRow:
    id: int
    job_id: str
    name: str
    scheduler: str
    cluster: str
    user: str
    account: str
    team: str
    partition: str
    start: datetime | None
    end: datetime | None
    gpus: int
    gpu_type: str | None
    holds_mig: bool


def _jobs(session: Session, conditions: list[ColumnElement[bool]]) -> list[_JobRow]:
    """The jobs with ledger rows that ``conditions`` select, with their team and whether they held a MIG share."""
    holds_mig = exists().where(Allocation.job_pk == Job.id, Allocation.share_num < Allocation.share_den)
    query = (
        select(
            Job.id, Job.job_id, Job.name, Job.scheduler, Job.cluster, Job.user, Job.account, Team.name.label("team"),
            Job.partition, Job.start, Job.end, Job.gpus, Job.gpu_type, holds_mig.label("holds_mig"),
        )
        .join(Team, Team.id == Job.team_id)
        .where(Job.id.in_(select(LedgerEntry.job_pk).where(*conditions).distinct()))
    )  # fmt: skip
    return [_JobRow(**row._asdict()) for row in session.execute(query)]


def _memory_peaks(session: Session, job_pks: Sequence[int], start: datetime, end: datetime) -> dict[int, int]:
    """The most memory in use (bytes) on any GPU of each job while the job held it within [start, end), from the
    readings (``gpu_samples``) and the TSDB mode's segments (``tsdb_gpu_metering``: a segment starting inside a
    holding lies in it, segments being cut where holdings start and end); a job without a memory reading is absent.
    Each lookup's instants are bounded on both sides by the holding's and the period's, so PostgreSQL reads only the
    day partitions and the (GPU, instant) index ranges those cover."""
    peaks: dict[int, int] = {}
    until = to_epoch(end)  # a running holding's end: both bounds of every lookup are index conditions
    for i in range(0, len(job_pks), _IN_CHUNK):
        chunk = job_pks[i : i + _IN_CHUNK]
        readings = (
            select(Allocation.job_pk, func.max(GpuSample.memory_used_bytes))
            .join(GpuSample, GpuSample.gpu_id == Allocation.gpu_id)
            .where(
                Allocation.job_pk.in_(chunk),
                GpuSample.ts >= Allocation.start,
                GpuSample.ts < func.coalesce(Allocation.end, until),
                GpuSample.ts >= start,
                GpuSample.ts < end,
                GpuSample.memory_used_bytes.is_not(None),
            )
            .group_by(Allocation.job_pk)
        )
        segments = (
            select(Allocation.job_pk, func.max(TsdbGpuMetering.memory_max_bytes))
            .join(TsdbGpuMetering, TsdbGpuMetering.gpu_id == Allocation.gpu_id)
            .where(
                Allocation.job_pk.in_(chunk),
                TsdbGpuMetering.start >= Allocation.start,
                TsdbGpuMetering.start < func.coalesce(Allocation.end, until),
                TsdbGpuMetering.start >= start,
                TsdbGpuMetering.start < end,
                TsdbGpuMetering.memory_max_bytes.is_not(None),
            )
            .group_by(Allocation.job_pk)
        )
        with transaction_settings(session.connection(), _NO_JIT):
            for query in (readings, segments):
                for job_pk, peak in session.execute(query):
                    if peak is not None:
                        peaks[job_pk] = max(peaks.get(job_pk, 0), int(peak))
    return peaks


def _fleet_models(gpus: Iterable[tuple[str, int]], catalog: PriceCatalog) -> frozenset[str]:
    """The catalog models the database has GPUs of."""
    return frozenset(key for key in (catalog.resolve(model) for model, _ in gpus) if key is not None)


def _site_types(session: Session) -> list[str]:
    """The GRES types Slurm jobs were given (``gres/gpu:<type>``), most used first: the names a site's gres.conf
    gives its GPU models."""
    count = func.count()
    query = (
        select(Job.gpu_type, count)
        .where(Job.scheduler == "slurm", Job.gpu_type.is_not(None))
        .group_by(Job.gpu_type)
        .order_by(count.desc(), Job.gpu_type)
    )
    return [gpu_type for gpu_type, _ in session.execute(query) if gpu_type is not None]


@dataclass(frozen=True, slots=True)
class _Context:
    catalog: PriceCatalog
    priced_at: datetime
    policy: RightsizingPolicy
    gpus: dict[int, tuple[str, int]]
    fleet: frozenset[str]
    site_types: list[str]

    def rate(self, model: str, pricing_model: str | None) -> Decimal | None:
        """``model``'s rate under ``pricing_model`` at :attr:`priced_at`; None when there is none."""
        if pricing_model is None:
            return None
        try:
            return self.catalog.rate(model, PricingModel(pricing_model), self.priced_at)
        except (PriceNotFound, ValueError):
            return None

    def gres_type(self, model: str) -> str:
        """The GRES type a Slurm job names ``model`` by: the site's most used type for it, else the catalog's
        shortest alias of lowercase letters and digits (``l40s``), else the catalog key."""
        for gpu_type in self.site_types:
            if self.catalog.resolve(gpu_type) == model:
                return gpu_type
        aliases = [a for a in self.catalog.models[model].aliases if a.isalnum() and a.islower()]
        return min(aliases, key=lambda a: (len(a), a)) if aliases else model


@dataclass(frozen=True, slots=True)
class _Draft:
    """A job's GPU-count judgement, before its memory is read (module docstring). ``multi_node``: the GPUs it keeps
    are on several nodes (the fix then counts them with ``--gpus``)."""

    job: _JobRow
    use: _JobUse
    model_name: str
    model: str | None
    kept: list[_GpuUse]
    dropped: list[_GpuUse]
    busy: int
    unmetered: int
    multi_node: bool
    low_utilization: bool

    @staticmethod
    def of(job: _JobRow, use: _JobUse, context: _Context) -> _Draft:
        """Which of the job's GPUs are idle and which it keeps; whether the kept ones are at low use (module
        docstring: SM activity where measured, else utilisation)."""
        metered = sorted((g for g in use.gpus if g.metered_seconds), key=lambda g: (g.mean or 0.0, g.gpu_id))
        idle = [g for g in metered if (g.mean or 0.0) <= context.policy.idle_ratio]
        dropped = idle if len(idle) < len(use.gpus) else idle[:-1]
        dropped_ids = {g.gpu_id for g in dropped}
        kept = [g for g in use.gpus if g.gpu_id not in dropped_ids]
        kept_metered = sum(g.metered_seconds for g in kept)
        kept_mean = sum(g.use_seconds for g in kept) / kept_metered if kept_metered else None
        by_model = Counter[str]()
        for g in use.gpus:
            by_model[context.gpus[g.gpu_id][0]] += g.seconds
        model_name = by_model.most_common(1)[0][0]
        return _Draft(
            job, use, model_name, context.catalog.resolve(model_name), kept, dropped,
            busy=len(metered) - len(idle),
            unmetered=len(use.gpus) - len(metered),
            multi_node=len({context.gpus[g.gpu_id][1] for g in kept}) > 1,
            low_utilization=kept_mean is not None and kept_mean <= context.policy.low_utilization_ratio,
        )  # fmt: skip

    def finding(self, peak: int | None, context: _Context) -> JobFinding | None:
        """The job's finding given its memory peak (bytes; None: not read, or no reading), or None when there is
        nothing to say."""
        job, use = self.job, self.use
        priced = not any(g.unpriced_seconds for g in use.gpus)
        pricing_model = use.pricing_models.most_common(1)[0][0] if use.pricing_models else None
        entry = context.catalog.models[self.model] if self.model is not None else None
        vendor = entry.vendor if entry is not None else None
        requested = job.gpus or len(use.gpus)
        suggested = max(requested - len(self.dropped), 1)
        notes: list[str] = []
        if not priced:
            notes.append(f"unpriced: {self.model_name} has no price for some of these hours; savings left out")
        if self.unmetered:
            notes.append(f"{self.unmetered} GPU(s) without a utilisation reading, kept")
        memory = _MemoryFit()
        if self.low_utilization:
            if peak is None:
                notes.append(f"{NO_MEMORY_READING} for this job: whether a MIG slice or a smaller GPU model would do "
                             "is unknown")  # fmt: skip
            else:
                memory = self._memory_fit(peak, entry, pricing_model, suggested, context, notes)
        if not self.dropped and memory.empty and not (self.low_utilization and peak is None):
            return None
        metered = sum(g.metered_seconds for g in use.gpus)
        sm_seconds = sum(g.sm_seconds for g in use.gpus)
        return JobFinding(
            job_pk=job.id, job_id=job.job_id, name=job.name, scheduler=job.scheduler, cluster=job.cluster,
            user=job.user, account=job.account, team=job.team, partition=job.partition, start=job.start, end=job.end,
            gpu_model=self.model or self.model_name, pricing_model=pricing_model, currency=use.currency,
            gpus_requested=requested, gpus_held=len(use.gpus), gpus_busy=self.busy, gpus_unmetered=self.unmetered,
            gpus_suggested=suggested if self.dropped else requested,
            gpu_seconds=sum(g.seconds for g in use.gpus),
            allocated_cost=sum((g.cost for g in use.gpus), Decimal(0)) if priced else None,
            mean_utilization=sum(g.used_gpu_seconds for g in use.gpus) / metered if metered else None,
            sm_active=sum(g.sm_active_seconds for g in use.gpus) / sm_seconds if sm_seconds else None,
            sm_active_share=sm_seconds / metered if metered else None,
            saved_gpu_seconds=sum(g.seconds for g in self.dropped),
            count_saving=sum((g.cost for g in self.dropped), Decimal(0)) if self.dropped and priced else None,
            memory_peak_bytes=peak if self.low_utilization else None,
            mig_profile=memory.mig_profile, mig_saving=memory.mig_saving,
            smaller_model=memory.smaller_model, smaller_model_in_fleet=memory.smaller_model in context.fleet,
            smaller_model_saving=memory.smaller_model_saving,
            count_fix=request_line(job.scheduler, suggested, gres_type=_whole_gpu_type(job), vendor=vendor,
                                   multi_node=self.multi_node) if self.dropped else None,
            mig_fix=mig_line(job.scheduler, memory.mig_profile) if memory.mig_profile else None,
            model_fix=memory.model_fix,
            notes=tuple(notes),
        )  # fmt: skip

    def _memory_fit(
        self,
        peak: int,
        entry: GpuModel | None,
        pricing_model: str | None,
        suggested: int,
        context: _Context,
        notes: list[str],
    ) -> _MemoryFit:
        """The MIG profile and the smaller model that hold ``peak`` × headroom, with their savings over the kept
        GPU-hours at the rates of ``context.priced_at``."""
        need = Decimal(peak) * context.policy.memory_headroom
        kept_hours = Fraction(sum(g.seconds for g in self.kept), SECONDS_PER_HOUR)
        rate = context.rate(self.model_name, pricing_model)
        fit = _MemoryFit()
        if entry is None:
            return fit
        if len(self.kept) == 1:
            slice_ = smallest_profile(entry, self.model_name, peak, context.policy.memory_headroom, notes)
            if slice_ is not None:
                fit.mig_profile = slice_.profile
                if rate is not None:
                    fit.mig_saving = round_exact(kept_hours * Fraction(rate) * (1 - slice_.share))
        if entry.vendor is not None and rate is not None and self.model is not None:
            candidates = []
            for key, other in context.catalog.models.items():
                if key == self.model or other.vendor != entry.vendor or other.memory is None:
                    continue
                other_rate = context.rate(key, pricing_model)
                if other.memory.bytes >= need and other_rate is not None and other_rate < rate:
                    candidates.append((other_rate, key))
            cheapest = min(candidates, default=None)
            if cheapest is not None:
                fit.smaller_model = cheapest[1]
                fit.smaller_model_saving = round_exact(kept_hours * (Fraction(rate) - Fraction(cheapest[0])))
                fit.model_fix = request_line(
                    self.job.scheduler, suggested, gres_type=context.gres_type(cheapest[1]), vendor=entry.vendor,
                    multi_node=self.multi_node, product=_product_label(context.catalog.models[cheapest[1]]),
                )  # fmt: skip
        return fit


@dataclass(slots=True)
class _MemoryFit:
    mig_profile: str | None = None
    mig_saving: Decimal | None = None
    smaller_model: str | None = None
    smaller_model_saving: Decimal | None = None
    model_fix: str | None = None

    @property
    def empty(self) -> bool:
        return self.mig_profile is None and self.smaller_model is None


def _whole_gpu_type(job: _JobRow) -> str | None:
    """The GRES type of a Slurm job's whole GPUs (``h100``), None when untyped or a MIG type."""
    if job.scheduler != "slurm" or job.gpu_type is None or gres_mig_type(job.gpu_type) is not None:
        return None
    return job.gpu_type


def _product_label(model: GpuModel) -> str | None:
    """The Kubernetes ``nvidia.com/gpu.product`` label value of an NVIDIA model: its first alias that is a product
    name (``NVIDIA L40S``) with ``-`` for spaces, as GPU feature discovery writes it; None for other vendors."""
    if model.vendor != "nvidia":
        return None
    names = [alias for alias in model.aliases if alias.startswith("NVIDIA ")]
    return names[0].replace(" ", "-") if names else None
