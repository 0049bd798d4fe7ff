"""Cost reports from the ledger: per team, job, user, node or GPU model over [start, end), hour resolution.

Money is summed exactly in SQL (NUMERIC, or integer micro-units on SQLite) and rounded to cents by
:func:`finops.ledger.costmodel.round_preserving_total`, column by column, so the rows add up to the total.

GPU-hours whose GPU model has no price (unpriced ledger rows) are counted in GPU-hours, never in money: each row
says how many of its GPU-hours are unpriced, a row with nothing but unpriced GPU-hours has no cost (None, not 0),
and :func:`unpriced_by_model` names the models and the fix; the table's TOTAL line adds them.

Hardware activity (docs/cost-model.md, "Hardware activity"): per group the mean SM, tensor-pipe and DRAM activity
over the GPU-seconds that measured it (Σ profiled seconds × the row's mean ÷ Σ profiled seconds of the rows with one),
the SM-active cost (Σ of the rows', rounded like the other money) and the profiled share of the held GPU-seconds.
What nothing measured is None ("not measured"), never 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import Select, func, null, select
from sqlalchemy.orm import Session

from finops.analysis.filters import Scope, ledger_conditions
from finops.csv_cells import dict_rows_csv
from finops.db.ledger_tables import LedgerEntry, LedgerTeamHour
from finops.db.models import UNALLOCATED_TEAM, Gpu, Job, Node, Team
from finops.ledger.costmodel import JOULES_PER_KWH, quantize, round_preserving_total
from finops.ledger.rollup import unpriced_fix
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
        """The model's unpriced GPU-hours (:func:`_hours` of its seconds)."""
        return _hours(self.gpu_seconds)

    @property
    def fix(self) -> str:
        """How to price the model, in one sentence (:func:`finops.ledger.rollup.unpriced_fix`)."""
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
    return [_merged(key, group) for key, group in groups.items()]


def _merged(key: str, group: Sequence[ReportRow]) -> ReportRow:
    """One row of key ``key`` whose GPU-seconds, money and activity sums are those of ``group`` (not empty)."""
    return replace(
        group[0],
        key=key,
        **{name: sum(getattr(row, name) for row in group) for name in _SUMMED_FIELDS},
        **{name: sum_known(getattr(row, name) for row in group) for name in _KNOWN_SUMMED_FIELDS},
    )


def sum_known(values: Iterable[Any]) -> Any:
    """Σ of the values that are not None; None when all are (nothing measured is not 0)."""
    known = [value for value in values if value is not None]
    return sum(known[1:], known[0]) if known else None


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 6)


def _ratio(value: float | None) -> float | None:
    """A ratio as reported: 6 decimals, None kept."""
    return None if value is None else round(value, 6)


def printed_cents(rows: Sequence[ReportRow], field: str) -> list[Decimal]:
    """Money column ``field`` (one of :data:`MONEY_FIELDS`) of ``rows``, in row order, in the cents the report
    prints: :func:`finops.ledger.costmodel.round_preserving_total` of the exact amounts, so they add up to the
    rounded total. A row's cents can thus differ by one from its own amount rounded alone; whatever shows a group's
    cost beside a report (the budgets' month-to-date spend) takes it from here to agree to the cent."""
    return round_preserving_total([getattr(row, field) for row in rows])


def printed_sm_active_cents(rows: Sequence[ReportRow]) -> list[Decimal | None]:
    """The SM-active cost of ``rows`` in row order, in cents by
    :func:`finops.ledger.costmodel.round_preserving_total` over the rows that have one (they add up to their rounded
    total); None for a row without one (not measured, or unpriced)."""
    known = [i for i, row in enumerate(rows) if row.sm_active_cost is not None]
    rounded = round_preserving_total([rows[i].sm_active_cost or Decimal(0) for i in known])
    cents: list[Decimal | None] = [None] * len(rows)
    for i, amount in zip(known, rounded, strict=True):
        cents[i] = amount
    return cents


def report_dicts(rows: Sequence[ReportRow], by: GroupBy = "team") -> list[dict[str, object]]:
    """JSON-ready rows: ``{team|job, allocated_gpu_hours, used_gpu_hours, idle_gpu_hours, allocated_cost,
    used_cost, idle_cost, energy_kwh, energy_cost, currency}`` plus ``allocated_gpu_seconds``,
    ``unmetered_gpu_hours``, ``unmetered_share`` (:attr:`ReportRow.unmetered_share`, 6 decimals, None for
    ``__unallocated__``) and ``unpriced_gpu_hours``; by job also ``name``, ``team``, ``user``, ``start``, ``end``
    (ISO 8601 UTC, null while running), ``state`` (:class:`JobFacts`) and ``gpus``; money as decimal strings in
    cents that add up to the rounded totals. The money of the GPU-hours with a price only; a row whose GPU-hours
    are all unpriced has allocated, used and idle cost None (unknown, not 0).

    Then the hardware activity: ``sm_active_ratio``, ``tensor_active_ratio``, ``dram_active_ratio``
    (:meth:`ReportRow.activity_ratio`, 6 decimals), ``sm_active_cost`` (cents, :func:`printed_sm_active_cents`) and
    ``profiled_share`` (:attr:`ReportRow.profiled_share`, 6 decimals); each None where nothing measured it."""
    rounded = {name: printed_cents(rows, name) for name in MONEY_FIELDS}
    sm_active_cents = printed_sm_active_cents(rows)
    result = []
    for i, row in enumerate(rows):
        item: dict[str, object] = {by: row.key}
        if by == "job":
            job = row.job
            item.update(
                name=job.name if job else None,
                team=row.team,
                user=row.user,
                start=job.start.isoformat() if job and job.start else None,
                end=job.end.isoformat() if job and job.end else None,
                state=job.state if job else None,
                gpus=job.gpus if job else None,
            )
        item.update(
            allocated_gpu_hours=_hours(row.allocated_gpu_seconds),
            allocated_gpu_seconds=row.allocated_gpu_seconds,
            used_gpu_hours=_hours(row.used_gpu_seconds),
            idle_gpu_hours=_hours(row.idle_gpu_seconds),
            unmetered_gpu_hours=_hours(row.unmetered_gpu_seconds),
            unmetered_share=_ratio(row.unmetered_share),
            unpriced_gpu_hours=_hours(row.unpriced_gpu_seconds),
            allocated_cost=None if row.unpriced_only else str(rounded["allocated_cost"][i]),
            used_cost=None if row.unpriced_only else str(rounded["used_cost"][i]),
            idle_cost=None if row.unpriced_only else str(rounded["idle_cost"][i]),
            energy_kwh=float(quantize(Decimal(repr(row.energy_joules)) / JOULES_PER_KWH, Decimal("0.001"))),
            energy_cost=str(rounded["energy_cost"][i]),
            currency=row.currency,
            **{field: _ratio(row.activity_ratio(field)) for field in ACTIVITY_FIELDS},
            sm_active_cost=None if (cents := sm_active_cents[i]) is None else str(cents),
            profiled_share=_ratio(row.profiled_share),
        )
        result.append(item)
    return result


def dicts_csv(dicts: Sequence[Mapping[str, object]]) -> str:
    """``dicts`` (rows with the same keys, in order) as CSV text (RFC 4180, ``\\r\\n`` line ends, text cells escaped
    against formula injection: :mod:`finops.csv_cells`) with a header line of the first row's keys; empty text
    without rows."""
    return dict_rows_csv(list(dicts[0]), dicts, end="\r\n") if dicts else ""


def report_csv(rows: Sequence[ReportRow], by: GroupBy = "team") -> str:
    """The rows of :func:`report_dicts` as CSV text with a header line."""
    return dicts_csv(report_dicts(rows, by))


def report_table(rows: Sequence[ReportRow], by: GroupBy = "team", unpriced: Sequence[UnpricedModel] = ()) -> str:
    """The rows as a fixed-width text table with a total line. ``unmetered GPU-h``: the held GPU-hours without a
    reading (neither used nor idle), with their share of the row's held GPU-hours in parentheses. When some
    GPU-hours have no price, an
    ``unpriced GPU-h`` column, the TOTAL line ends ``+ N unpriced GPU-hours (models …)`` (money totals cover the
    priced GPU-hours only), and a line per model of ``unpriced`` (:func:`unpriced_by_model`) says how to fix it.

    The hardware activity follows the existing columns: SM, tensor and DRAM activity and the profiled share as
    percentages, the SM-active cost in cents; ``not measured`` where nothing measured it (``unpriced`` for the
    SM-active cost of a measured row whose GPU-hours are all unpriced). The TOTAL line has the activity of all rows
    together (weighted by profiled seconds, as a row's)."""
    dicts = report_dicts(rows, by)
    if not dicts:
        return "No ledger rows in this period."
    with_unpriced = any(row.unpriced_gpu_seconds for row in rows) or bool(unpriced)
    headers = ["alloc GPU-h", "used GPU-h", "idle GPU-h", "unmetered GPU-h", "allocated", "used", "idle"]
    headers += ["energy kWh", "energy"]
    keys = ["allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "unmetered_gpu_hours", *MONEY_FIELDS[:3]]
    keys += ["energy_kwh", "energy_cost"]
    if with_unpriced:
        headers.insert(4, "unpriced GPU-h")
        keys.insert(4, "unpriced_gpu_hours")
    labels = [by, *(_JOB_HEADERS if by == "job" else ())]
    lines = [
        [*_labels(row, d[by], by), *(_cell(d[k], k, row) for k in keys), *_activity_cells(row, d)]
        for row, d in zip(rows, dicts, strict=True)
    ]
    total = _merged("TOTAL", rows)
    totals = ["TOTAL", *[""] * (len(labels) - 1)]
    totals += [_cell(sum((Decimal(str(d[k] or 0)) for d in dicts), Decimal(0)), k, total) for k in keys]
    total_sm_active = None if total.sm_active_cost is None else quantize(total.sm_active_cost, Decimal("0.01"))
    totals += _activity_cells(total, {"sm_active_cost": total_sm_active})
    headers = [*labels, *headers, *_ACTIVITY_HEADERS]
    widths = [max(len(h), *(len(line[i]) for line in [*lines, totals])) for i, h in enumerate(headers)]
    out = [f"Costs in {dicts[0]['currency']}"]
    for line in [headers, *lines, totals]:
        cells = [
            cell.ljust(width) if i < len(labels) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    if with_unpriced:
        seconds = sum(row.unpriced_gpu_seconds for row in rows)
        models = ", ".join(u.model for u in unpriced) or "see gpu_model report"
        out[-1] += f"  + {seconds / 3600:,.2f} unpriced GPU-hours (models {models})"
        out.extend(f"unpriced: {u.gpu_hours:,.2f} GPU-hours of {u.model}: {u.fix}" for u in unpriced)
    return "\n".join(out)


_ACTIVITY_HEADERS = ("SM active", "tensor active", "DRAM active", "SM-active cost", "profiled")
_JOB_HEADERS = ("name", "team", "user", "start (UTC)", "end (UTC)", "state", "GPUs")
_JOB_NAME_WIDTH = 24


def _labels(row: ReportRow, key: object, by: GroupBy) -> list[str]:
    """The left-hand cells of a table row: the group's key, and by job its name (cut to 24 characters), team,
    user, start and end (``running`` while it runs), state and GPUs."""
    if by != "job":
        return [str(key)]
    job = row.job
    if job is None:
        return [str(key), "", row.team or "", "", "", "", "", ""]
    name = job.name if len(job.name) <= _JOB_NAME_WIDTH else job.name[: _JOB_NAME_WIDTH - 1] + "…"
    start = f"{job.start:%Y-%m-%d %H:%M}" if job.start else ""
    end = f"{job.end:%Y-%m-%d %H:%M}" if job.end else "running"
    return [str(key), name, row.team or "", row.user or "", start, end, job.state, str(job.gpus)]


def _activity_cells(row: ReportRow, printed: Mapping[str, object]) -> list[str]:
    """The activity cells of a table row: SM, tensor and DRAM activity and the profiled share as percentages, and
    the SM-active cost as ``printed`` has it (cents); ``not measured`` for None (``unpriced`` for the SM-active cost
    of a row whose SM activity was measured but whose GPU-hours are all unpriced)."""
    ratios = [row.activity_ratio(field) for field in ACTIVITY_FIELDS]
    cost = printed["sm_active_cost"]
    if cost is None:
        cost_cell = "unpriced" if row.unpriced_only and ratios[0] is not None else NOT_MEASURED
    else:
        cost_cell = _cell(cost)
    return [*(_percent(ratio) for ratio in ratios), cost_cell, _percent(row.profiled_share)]


def _percent(ratio: float | None) -> str:
    return NOT_MEASURED if ratio is None else f"{ratio:.1%}"


def _cell(value: object, key: str = "", row: ReportRow | None = None) -> str:
    """A table cell: None is ``unpriced``, numbers with two decimals and thousands separators; the unmetered
    GPU-hours of a ``row`` that held some are followed by their share of its held GPU-hours, ``12.00 (25.0%)``."""
    if key == "unmetered_gpu_hours" and row is not None and (share := row.unmetered_share):
        return f"{_cell(value)} ({share:.1%})"
    if value is None:
        return "unpriced"
    if isinstance(value, (float, Decimal)):
        return f"{value:,.2f}"
    if isinstance(value, str) and value.replace(".", "", 1).lstrip("-").isdigit():
        return f"{Decimal(value):,.2f}"
    return str(value)


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
