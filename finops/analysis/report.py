"""Cost reports from the ledger: per team, job, user, node or GPU model over [start, end), hour resolution.

Money is summed exactly in SQL (NUMERIC, or integer micro-units on SQLite); :mod:`finops.analysis.report_format` prints
the rows (dicts, CSV, a text table) in cents that add up to the rounded total.

GPU-hours whose GPU model has no price (unpriced ledger rows) are counted in GPU-hours, never in money: each row
says how many of its GPU-hours are unpriced, a row with nothing but unpriced GPU-hours has no cost (None, not 0),
and :func:`unpriced_by_model` names the models and the fix; the table's TOTAL line adds them.

Hardware activity (docs/cost-model.md, "Hardware activity"): per group the mean SM, tensor-pipe and DRAM activity
over the GPU-seconds that measured it (Σ profiled seconds × the row's mean ÷ Σ profiled seconds of the rows with one),
the SM-active cost (Σ of the rows', rounded like the other money) and the profiled share of the held GPU-seconds.
What nothing measured is None ("not measured"), never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import Select, func, null, select
from sqlalchemy.orm import Session

from finops.analysis.filters import Scope, ledger_conditions
from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour
from finops.db.models import UNALLOCATED_TEAM, Gpu, Job, Node, Team
from finops.ledger.rollup_result import unpriced_fix
from finops.ledger.team_hours import TEAM_ACTIVITIES, ledger_team_sums
from finops.pricing.catalog import PriceCatalog

GroupBy = Literal["team", "job", "user", "node", "gpu_model"]
GROUP_BYS: tuple[GroupBy, ...] = ("team", "job", "user", "node", "gpu_model")
MONEY_FIELDS = ("allocated_cost", "used_cost", "idle_cost", "energy_cost")
_SUMMED_FIELDS = (
    "allocated_gpu_seconds",
    "used_gpu_seconds",
    "idle_gpu_seconds",
    "unmetered_gpu_seconds",
    *MONEY_FIELDS,
    "energy_joules",
    "unpriced_gpu_seconds",
    "held_gpu_seconds",
    "profiled_gpu_seconds",
    *(f"{name}_measured_gpu_seconds" for name in TEAM_ACTIVITIES),
)
_KNOWN_SUMMED_FIELDS = (*(f"{name}_gpu_seconds" for name in TEAM_ACTIVITIES), "sm_active_cost")
"""Summed fields that are None when no row of the group has one (not measured), never 0."""
ACTIVITY_FIELDS = tuple(f"{name}_ratio" for name in TEAM_ACTIVITIES)
"""The activity means of a report row: ``sm_active_ratio``, ``tensor_active_ratio``, ``dram_active_ratio``."""
NOT_MEASURED = "not measured"


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a job row of a report says of its job beside the id: its name (Slurm JobName, the pod's name), when it
    ran (``end`` None while it runs), the GPUs it requested (AllocTRES ``gres/gpu``, the pod's GPU limit) and its
    state as the scheduler last reported it (Slurm State: ``COMPLETED``, ``FAILED``, ``CANCELLED``, ``TIMEOUT``,
    ``RUNNING``…; a pod's phase: ``Running``, ``Succeeded``, ``Failed``…)."""

    name: str
    start: datetime | None
    end: datetime | None
    gpus: int
    state: str = ""


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One group's totals (a team, job, user, node or GPU model). Seconds are GPU-seconds; money is exact
    (6 decimals) until rendered. ``team`` and ``user`` are set for job rows (``team`` for team rows too).

    For the ``__unallocated__`` row, ``allocated_gpu_seconds`` is capacity no job held and its cost.
    ``unmetered_gpu_seconds`` are allocated seconds with no sample: neither used nor idle. ``unpriced_gpu_seconds``
    are the part of ``allocated_gpu_seconds`` whose GPU model has no price: the money covers the rest only.

    Hardware activity: ``held_gpu_seconds`` are the GPU-seconds jobs held (0 for ``__unallocated__``),
    ``profiled_gpu_seconds`` those of them metered with readings that carry a profiling field; per activity of
    :data:`finops.ledger.team_hours.TEAM_ACTIVITIES`, ``<activity>_gpu_seconds`` = Σ profiled seconds × the ledger
    row's mean (None when no row measured it) and ``<activity>_measured_gpu_seconds`` = Σ profiled seconds of the
    rows that measured it (:func:`finops.ledger.team_hours.activity_sums`); ``sm_active_cost`` = Σ of the ledger rows'
    allocated cost × SM activity, exact (None when no row has one: not measured, or unpriced).
    """

    key: str
    team: str | None
    user: str | None
    allocated_gpu_seconds: int
    used_gpu_seconds: float
    idle_gpu_seconds: float
    unmetered_gpu_seconds: int
    allocated_cost: Decimal
    used_cost: Decimal
    idle_cost: Decimal
    energy_joules: float
    energy_cost: Decimal
    currency: str
    unpriced_gpu_seconds: int = 0
    job: JobFacts | None = None
    held_gpu_seconds: int = 0
    profiled_gpu_seconds: int = 0
    sm_active_gpu_seconds: float | None = None
    sm_active_measured_gpu_seconds: int = 0
    tensor_active_gpu_seconds: float | None = None
    tensor_active_measured_gpu_seconds: int = 0
    dram_active_gpu_seconds: float | None = None
    dram_active_measured_gpu_seconds: int = 0
    sm_active_cost: Decimal | None = None

    @property
    def unpriced_only(self) -> bool:
        """True when every GPU-second of the row is unpriced: its cost is unknown, not 0."""
        return self.unpriced_gpu_seconds > 0 and self.unpriced_gpu_seconds >= self.allocated_gpu_seconds

    def activity_ratio(self, field: str) -> float | None:
        """The mean of ``field`` (one of :data:`ACTIVITY_FIELDS`, e.g. ``sm_active_ratio``) over the GPU-seconds
        that measured it, weighted by profiled seconds: Σ profiled seconds × ratio ÷ Σ profiled seconds of the rows
        with a ratio; None when none did (not measured). Raises AttributeError for another field."""
        activity = field.removesuffix("_ratio")
        total: float | None = getattr(self, f"{activity}_gpu_seconds")
        measured: int = getattr(self, f"{activity}_measured_gpu_seconds")
        return total / measured if total is not None and measured else None

    @property
    def unmetered_share(self) -> float | None:
        """Unmetered ÷ held GPU-seconds (0..1): the share of the GPU time jobs held that has no reading, neither used
        nor idle; None when jobs held none (``__unallocated__``)."""
        return self.unmetered_gpu_seconds / self.held_gpu_seconds if self.held_gpu_seconds else None

    @property
    def profiled_share(self) -> float | None:
        """Profiled ÷ held GPU-seconds (0..1); None when jobs held none (``__unallocated__``)."""
        return self.profiled_gpu_seconds / self.held_gpu_seconds if self.held_gpu_seconds else None


@dataclass(frozen=True, slots=True)
class UnpricedModel:
    """GPU-hours of one GPU model without a price in the catalog, over a report's period, and what fixes it."""

    model: str
    gpu_seconds: int

    @property
    def gpu_hours(self) -> float:
        """The model's unpriced GPU-hours (:func:`reported_hours` of its seconds)."""
        return reported_hours(self.gpu_seconds)

    @property
    def fix(self) -> str:
        """How to price the model, in one sentence (:func:`finops.ledger.rollup_result.unpriced_fix`)."""
        return unpriced_fix(self.model)


def unpriced_by_model(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> list[UnpricedModel]:
    """Unpriced GPU-seconds of the ledger hours starting in [start, end) by GPU model, most first, with the same
    filters as :func:`cost_report`. Reads only unpriced rows (the partial index ``ix_ledger_unpriced``)."""
    scope = Scope(cluster=cluster, team=team, partition=partition)
    seconds = func.sum(LedgerEntry.seconds)
    rows = session.execute(
        select(Gpu.model, seconds)
        .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
        .where(
            LedgerEntry.allocated_cost.is_(None),
            LedgerEntry.hour >= start,
            LedgerEntry.hour < end,
            *ledger_conditions(scope),
        )
        .group_by(Gpu.model)
    ).all()
    return sorted((UnpricedModel(model, int(total)) for model, total in rows), key=lambda u: (-u.gpu_seconds, u.model))


def cost_report(
    session: Session,
    start: datetime,
    end: datetime,
    by: GroupBy = "team",
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
    catalog: PriceCatalog | None = None,
) -> list[ReportRow]:
    """Ledger totals for hours starting in [start, end), one row per group, by cost descending.

    ``by``: ``team``; ``job`` (capacity no job held is one ``__unallocated__`` row; each job row has its
    :class:`JobFacts`); ``user`` (the job's Slurm user, or a pod's ``user`` label as ``claimed:<name>``; unheld
    capacity is ``__unallocated__``); ``node`` (hostname); ``gpu_model``: the ``catalog``'s models, each the one
    row of every GPU name it covers (``h100`` from a GRES type and ``NVIDIA H100 80GB HBM3`` from NVML are both
    ``H100-SXM-80GB``), a name no model covers its own row. Raises ValueError for an unknown ``by``, or
    ``gpu_model`` without a ``catalog``.

    ``cluster``, ``team``, ``partition``: only the ledger rows those filters select (:mod:`finops.analysis.filters`);
    None (the default) for all rows. By team without a cluster or partition filter, the totals are those of the
    team-hours (:mod:`finops.ledger.team_hours`), equal to the ledger's and ~80 times fewer rows.
    """
    if by not in GROUP_BYS:
        raise ValueError(f"group by must be one of {', '.join(GROUP_BYS)}, not {by!r}")
    if by == "gpu_model" and catalog is None:
        raise ValueError("a report by gpu_model needs the price catalog whose models it groups by")
    if by == "team" and cluster is None and partition is None:
        query = _team_hours_query(start, end, team)
    else:
        query = _ledger_query(start, end, by, Scope(cluster=cluster, team=team, partition=partition))
    rows = [
        ReportRow(
            key=r.key,
            team=r.team,
            user=r.user,
            allocated_gpu_seconds=int(r.seconds),
            used_gpu_seconds=float(r.used_gpu_seconds),
            idle_gpu_seconds=max(float(r.metered_gpu_seconds) - float(r.used_gpu_seconds), 0.0),
            unmetered_gpu_seconds=int(r.unmetered_gpu_seconds),
            allocated_cost=Decimal(r.allocated_cost),
            used_cost=Decimal(r.used_cost),
            idle_cost=Decimal(r.idle_cost),
            energy_joules=float(r.energy_joules),
            energy_cost=Decimal(r.energy_cost),
            currency=r.currency,
            unpriced_gpu_seconds=int(r.unpriced_gpu_seconds),
            job=JobFacts(r.job_name, r.job_start, r.job_end, int(r.job_gpus), r.job_state)
            if by == "job" and r.job_name is not None
            else None,
            held_gpu_seconds=int(r.metered_gpu_seconds) + int(r.unmetered_gpu_seconds),
            profiled_gpu_seconds=int(r.profiled_gpu_seconds or 0),
            **_activity_sums(r),
            sm_active_cost=None if r.sm_active_cost is None else Decimal(r.sm_active_cost),
        )
        for r in session.execute(query)
    ]
    if catalog is not None and by == "gpu_model":
        rows = _by_catalog_model(rows, catalog)
    return sorted(rows, key=lambda row: (row.key == UNALLOCATED_TEAM, -row.allocated_cost, row.key))


def _activity_sums(r: Any) -> dict[str, Any]:
    """The ``<activity>_gpu_seconds`` (None: not measured) and ``<activity>_measured_gpu_seconds`` of a query row."""
    sums: dict[str, Any] = {}
    for name in TEAM_ACTIVITIES:
        total = getattr(r, f"{name}_gpu_seconds")
        sums[f"{name}_gpu_seconds"] = None if total is None else float(total)
        sums[f"{name}_measured_gpu_seconds"] = int(getattr(r, f"{name}_measured_gpu_seconds") or 0)
    return sums


def _team_hours_query(start: datetime, end: datetime, team: str | None) -> Select[*tuple[Any, ...]]:
    """Team totals from the team-hours (:mod:`finops.ledger.team_hours`): ~720 rows per team and month."""
    sums = [
        (func.min if name == "currency" else func.sum)(getattr(LedgerTeamHour, name)).label(name)
        for name in ledger_team_sums()
    ]
    query = (
        select(Team.name.label("key"), Team.name.label("team"), null().label("user"), *sums)
        .join(Team, Team.id == LedgerTeamHour.team_id)
        .where(LedgerTeamHour.hour >= start, LedgerTeamHour.hour < end)
        .group_by(Team.name)
    )
    return query if team is None else query.where(Team.name == team)


def _ledger_query(start: datetime, end: datetime, by: GroupBy, scope: Scope) -> Select[*tuple[Any, ...]]:
    """Group totals from the ledger rows the scope selects."""
    columns = [column.label(name) for name, column in ledger_team_sums().items()]
    query: Select[*tuple[Any, ...]]
    if by == "team":
        query = (
            select(Team.name.label("key"), Team.name.label("team"), null().label("user"), *columns)
            .join(Team, Team.id == LedgerEntry.team_id)
            .group_by(Team.name)
        )
    elif by == "job":
        query = (
            select(
                func.coalesce(Job.job_id, UNALLOCATED_TEAM).label("key"),
                Team.name.label("team"),
                Job.user.label("user"),
                Job.name.label("job_name"),
                Job.start.label("job_start"),
                Job.end.label("job_end"),
                Job.gpus.label("job_gpus"),
                Job.state.label("job_state"),
                *columns,
            )
            .join(Team, Team.id == LedgerEntry.team_id)
            .outerjoin(Job, Job.id == LedgerEntry.job_pk)
            .group_by(Job.id, Job.job_id, Team.name, Job.user, Job.name, Job.start, Job.end, Job.gpus, Job.state)
        )
    elif by == "user":
        user = func.coalesce(Job.user, UNALLOCATED_TEAM)
        query = (
            select(user.label("key"), null().label("team"), user.label("user"), *columns)
            .outerjoin(Job, Job.id == LedgerEntry.job_pk)
            .group_by(user)
        )
    else:
        attribute = Node.hostname if by == "node" else Gpu.model
        query = (
            select(attribute.label("key"), null().label("team"), null().label("user"), *columns)
            .join(Gpu, Gpu.id == LedgerEntry.gpu_id)
            .join(Node, Node.id == Gpu.node_id)
            .group_by(attribute)
        )
    return query.where(LedgerEntry.hour >= start, LedgerEntry.hour < end, *ledger_conditions(scope))


def _by_catalog_model(rows: Sequence[ReportRow], catalog: PriceCatalog) -> list[ReportRow]:
    """``rows`` by GPU name merged into one row per catalog model (:meth:`PriceCatalog.resolve`); a name no model
    covers keeps its row."""
    groups: dict[str, list[ReportRow]] = {}
    for row in rows:
        groups.setdefault(catalog.resolve(row.key) or row.key, []).append(row)
    return [merged_row(key, group) for key, group in groups.items()]


def merged_row(key: str, group: Sequence[ReportRow]) -> ReportRow:
    """One row of key ``key`` whose GPU-seconds, money and activity sums are those of ``group`` (not empty)."""
    return replace(
        group[0],
        key=key,
        **{name: sum(getattr(row, name) for row in group) for name in _SUMMED_FIELDS},
        **{name: sum_known(getattr(row, name) for row in group) for name in _KNOWN_SUMMED_FIELDS},
    )


def reported_hours(seconds: float) -> float:
    """GPU-seconds as the reports give GPU-hours: ÷ 3600, 6 decimals."""
    return round(seconds / 3600, 6)


def sum_known(values: Iterable[Any]) -> Any:
    """Σ of the values that are not None; None when all are (nothing measured is not 0)."""
    known = [value for value in values if value is not None]
    return sum(known[1:], known[0]) if known else None


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """Headline numbers of a period: capacity cost (all GPUs), of which held by jobs, used and idle;
    ``utilization`` = used ÷ metered allocated GPU-seconds; ``allocated_share`` = held ÷ capacity GPU-seconds."""

    capacity_cost: Decimal
    allocated_cost: Decimal
    used_cost: Decimal
    idle_cost: Decimal
    utilization: float
    allocated_share: float
    currency: str


def fleet_summary(rows: Sequence[ReportRow]) -> FleetSummary:
    """Totals of :func:`cost_report` team rows (``__unallocated__`` counts in capacity only)."""
    held = [row for row in rows if row.key != UNALLOCATED_TEAM]
    capacity_seconds = sum(row.allocated_gpu_seconds for row in rows)
    held_seconds = sum(row.allocated_gpu_seconds for row in held)
    used_seconds = sum(row.used_gpu_seconds for row in held)
    metered_seconds = used_seconds + sum(row.idle_gpu_seconds for row in held)
    return FleetSummary(
        capacity_cost=sum((row.allocated_cost for row in rows), Decimal(0)),
        allocated_cost=sum((row.allocated_cost for row in held), Decimal(0)),
        used_cost=sum((row.used_cost for row in held), Decimal(0)),
        idle_cost=sum((row.idle_cost for row in held), Decimal(0)),
        utilization=used_seconds / metered_seconds if metered_seconds else 0.0,
        allocated_share=held_seconds / capacity_seconds if capacity_seconds else 0.0,
        currency=rows[0].currency if rows else "",
    )
