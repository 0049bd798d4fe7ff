"""Cost queries behind the dashboard pages that the cost report does not answer: filter choices, spend by day,
the ledger cube the pages slice (with the report's hardware activity sums), month-to-date spend and forecast, the
biggest idle costs and node names.
Telemetry (GPU, job and node readings, fabric throughput) is :mod:`finops.analysis.telemetry`.

Every function takes a :class:`~sqlalchemy.orm.Session` and returns plain frozen dataclasses. Money is exact
(``Decimal``, 6 decimals), instants are aware UTC, periods are [start, end). Filters are those of
:mod:`finops.analysis.filters` (None selects everything).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import BigInteger, select, type_coerce, union
from sqlalchemy.orm import Session

from finops.analysis.budgets import (
    BudgetStatus,
    budget_status,
    month_spend,
    month_start,
    next_month_start,
    run_rate_forecast,
    run_rate_seconds,
)
from finops.analysis.filters import Scope, ledger_conditions, nodes_in
from finops.analysis.report import ReportRow
from finops.db.ledger_tables import LedgerEntry
from finops.db.models import UNALLOCATED_TEAM, Job, Node, Team
from finops.ledger.team_hours import TEAM_ACTIVITIES, ledger_team_sums
from finops.timeutil import from_epoch

DAY_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class FilterChoices:
    """The values each filter can take, sorted: job clusters, team names, partitions (of jobs and nodes)."""

    clusters: list[str]
    teams: list[str]
    partitions: list[str]


def filter_choices(session: Session) -> FilterChoices:
    """Every cluster and partition a job names (and partitions of nodes), and every team."""
    clusters = session.scalars(select(Job.cluster).distinct().where(Job.cluster != "")).all()
    teams = session.scalars(select(Team.name)).all()
    partitions = session.scalars(
        union(
            select(Job.partition).where(Job.partition != ""),
            select(Node.partition).where(Node.partition.is_not(None), Node.partition != ""),
        )
    ).all()
    return FilterChoices(sorted(clusters), sorted(teams), sorted({p for p in partitions if p}))


@dataclass(frozen=True, slots=True)
class DailyCost:
    """One team's ledger totals over one UTC day [day, day + 24 h) (the part inside the period asked for).
    Money exact (6 decimals) in ``currency``; ``team`` ``__unallocated__`` is capacity no job held."""

    day: datetime
    team: str
    allocated_cost: Decimal
    used_cost: Decimal
    idle_cost: Decimal
    currency: str


@dataclass(frozen=True, slots=True)
class CubeCell:
    """Ledger totals of one UTC day, team and holder (``job_pk`` None: capacity no job held), with the job's
    id and user. Seconds are GPU-seconds; money is exact; the columns are those of :class:`ReportRow`, the sums of
    :func:`finops.ledger.team_hours.ledger_team_sums` (hardware activity: ``profiled_gpu_seconds``, per activity of
    :data:`~finops.ledger.team_hours.TEAM_ACTIVITIES` its ``<activity>_gpu_seconds``, None when not measured, and
    ``<activity>_measured_gpu_seconds``, and ``sm_active_cost``, None when not measured or unpriced)."""

    day: datetime
    team: str
    job_pk: int | None
    job_id: str | None
    user: str | None
    seconds: int
    used_gpu_seconds: float
    metered_gpu_seconds: int
    unmetered_gpu_seconds: int
    allocated_cost: Decimal
    used_cost: Decimal
    idle_cost: Decimal
    energy_joules: float
    energy_cost: Decimal
    currency: str
    unpriced_gpu_seconds: int = 0
    profiled_gpu_seconds: int = 0
    sm_active_gpu_seconds: float | None = None
    sm_active_measured_gpu_seconds: int = 0
    tensor_active_gpu_seconds: float | None = None
    tensor_active_measured_gpu_seconds: int = 0
    dram_active_gpu_seconds: float | None = None
    dram_active_measured_gpu_seconds: int = 0
    sm_active_cost: Decimal | None = None


CubeBy = Literal["team", "job", "user"]


_GroupKey = tuple[str, str | None, str | None, int | None]
"""(report key, team, user, job primary key) of a group of :meth:`LedgerCube.report`."""


def _group_key(cell: CubeCell, by: CubeBy) -> _GroupKey:
    if by == "team":
        return (cell.team, cell.team, None, None)
    if by == "job":
        return (cell.job_id if cell.job_id is not None else UNALLOCATED_TEAM, cell.team, cell.user, cell.job_pk)
    user = cell.user if cell.user is not None else UNALLOCATED_TEAM
    return (user, None, user, None)


_ACTIVITY_SUMS = (
    "profiled_gpu_seconds",
    *(f"{name}_{part}" for name in TEAM_ACTIVITIES for part in ("gpu_seconds", "measured_gpu_seconds")),
    "sm_active_cost",
)
"""The hardware activity sums of a :class:`CubeCell`, which are those of :class:`ReportRow` by the same names."""
_FIRST_ACTIVITY = 11
"""Where the sums of :data:`_ACTIVITY_SUMS` start in a group's totals of :meth:`LedgerCube.report`."""


def _plus(total: Any, value: Any) -> Any:
    """``total`` + ``value`` where None is "not measured": the sum of those that are not None, None when neither
    is (a group's activity is not measured only when none of its cells measured it)."""
    if value is None:
        return total
    return value if total is None else total + value


def _check_by(by: str) -> None:
    if by not in ("team", "job", "user"):
        raise ValueError(f"group by must be one of team, job, user, not {by!r}")


@dataclass(frozen=True, slots=True)
class LedgerCube:
    """A period's ledger summed per UTC day, team and job (:func:`ledger_cube`): one read of the ledger from which
    the dashboard takes the cost report by team, job and user and the spend by day."""

    start: datetime
    end: datetime
    cells: list[CubeCell]

    def report(self, by: CubeBy = "team") -> list[ReportRow]:
        """The rows :func:`finops.analysis.report.cost_report` gives for the same period and filters, grouped ``by``
        team, job or user, in its order: money equal to the micro-unit, GPU-seconds equal (the float sums of used
        seconds and joules may differ in their last bits: they are added in another order). ValueError for
        another ``by``."""
        _check_by(by)
        return self._report(by, None)

    def top_idle(self, by: CubeBy = "job", count: int = 5) -> list[ReportRow]:
        """:func:`top_idle` of :meth:`report`, building the report rows of those ``count`` groups only (a month's
        report by job has thousands). ValueError for a ``by`` other than team, job or user."""
        _check_by(by)
        idle: dict[_GroupKey, Decimal] = {}
        for c in self.cells:
            key = _group_key(c, by)
            idle[key] = idle.get(key, Decimal(0)) + c.idle_cost
        candidates = [key for key, amount in idle.items() if amount > 0 and key[0] != UNALLOCATED_TEAM]
        chosen = set(heapq.nsmallest(count, candidates, key=lambda key: (-idle[key], key[0])))
        return top_idle(self._report(by, chosen), count)

    def _report(self, by: CubeBy, only: set[_GroupKey] | None) -> list[ReportRow]:
        totals: dict[_GroupKey, list[Any]] = {}
        for c in self.cells:
            key = _group_key(c, by)
            if only is not None and key not in only:
                continue
            found = totals.get(key)
            if found is None:
                totals[key] = [
                    c.seconds, c.used_gpu_seconds, c.metered_gpu_seconds, c.unmetered_gpu_seconds, c.allocated_cost,
                    c.used_cost, c.idle_cost, c.energy_joules, c.energy_cost, c.currency, c.unpriced_gpu_seconds,
                    *(getattr(c, name) for name in _ACTIVITY_SUMS),
                ]  # fmt: skip
                continue
            found[0] += c.seconds
            found[1] += c.used_gpu_seconds
            found[2] += c.metered_gpu_seconds
            found[3] += c.unmetered_gpu_seconds
            found[4] += c.allocated_cost
            found[5] += c.used_cost
            found[6] += c.idle_cost
            found[7] += c.energy_joules
            found[8] += c.energy_cost
            found[9] = min(found[9], c.currency)
            found[10] += c.unpriced_gpu_seconds
            for i, name in enumerate(_ACTIVITY_SUMS, _FIRST_ACTIVITY):
                found[i] = _plus(found[i], getattr(c, name))
        rows = [
            ReportRow(
                key=name, team=team, user=user, allocated_gpu_seconds=t[0], used_gpu_seconds=t[1],
                idle_gpu_seconds=max(t[2] - t[1], 0.0), unmetered_gpu_seconds=t[3], allocated_cost=t[4],
                used_cost=t[5], idle_cost=t[6], energy_joules=t[7], energy_cost=t[8], currency=t[9],
                unpriced_gpu_seconds=t[10], held_gpu_seconds=t[2] + t[3],
                **dict(zip(_ACTIVITY_SUMS, t[_FIRST_ACTIVITY:], strict=True)),
            )
            for (name, team, user, _), t in totals.items()
        ]  # fmt: skip
        return sorted(rows, key=lambda row: (row.key == UNALLOCATED_TEAM, -row.allocated_cost, row.key))

    def daily(self) -> list[DailyCost]:
        """Spend per UTC day and team, by day then team name; a team's days add up to its :meth:`report` row."""
        totals: dict[tuple[datetime, str], list[Any]] = {}
        for c in self.cells:
            found = totals.get((c.day, c.team))
            if found is None:
                totals[(c.day, c.team)] = [c.allocated_cost, c.used_cost, c.idle_cost, c.currency]
            else:
                found[0] += c.allocated_cost
                found[1] += c.used_cost
                found[2] += c.idle_cost
                found[3] = min(found[3], c.currency)
        return [DailyCost(day, team, *t) for (day, team), t in sorted(totals.items())]


def ledger_cube(
    session: Session,
    start: datetime,
    end: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> LedgerCube:
    """Ledger hours starting in [start, end) of the filters' rows (:mod:`finops.analysis.filters`) summed per UTC day,
    team and job in one query: the ledger is aggregated on its own columns first, and team names and job ids
    joined to the (few) groups after."""
    hour = type_coerce(LedgerEntry.hour, BigInteger)
    day = (hour - hour % DAY_SECONDS).label("day")
    sums = (
        select(
            day,
            LedgerEntry.team_id,
            LedgerEntry.job_pk,
            *(column.label(name) for name, column in ledger_team_sums().items()),
        )
        .where(
            LedgerEntry.hour >= start,
            LedgerEntry.hour < end,
            *ledger_conditions(Scope(cluster=cluster, team=team, partition=partition)),
        )
        .group_by(day, LedgerEntry.team_id, LedgerEntry.job_pk)
        .subquery()
    )
    c = sums.c
    query = (
        select(
            c.day, Team.name, c.job_pk, Job.job_id, Job.user, c.seconds, c.used_gpu_seconds, c.metered_gpu_seconds,
            c.unmetered_gpu_seconds, c.allocated_cost, c.used_cost, c.idle_cost, c.energy_joules, c.energy_cost,
            c.currency, c.unpriced_gpu_seconds, *(c[name] for name in _ACTIVITY_SUMS),
        )
        .join(Team, Team.id == c.team_id)
        .outerjoin(Job, Job.id == c.job_pk)
    )  # fmt: skip
    # Core rows in CubeCell's field order (~10,000 for a month of 1,000 GPUs: the ORM's row handling would cost
    # more than the conversion below).
    days: dict[int, datetime] = {}
    cells = [
        CubeCell(
            days.get(day) or days.setdefault(day, from_epoch(day)), team, job_pk, job_id, user, int(seconds),
            float(used), int(metered), int(unmetered), allocated, used_cost, idle, float(joules), energy, currency,
            int(unpriced), int(profiled or 0), _float(sm), int(sm_n or 0), _float(tensor), int(tensor_n or 0),
            _float(dram), int(dram_n or 0), sm_cost,
        )
        for (
            day, team, job_pk, job_id, user, seconds, used, metered, unmetered, allocated, used_cost, idle, joules,
            energy, currency, unpriced, profiled, sm, sm_n, tensor, tensor_n, dram, dram_n, sm_cost,
        ) in session.connection().execute(query)
    ]  # fmt: skip
    return LedgerCube(start, end, cells)


def _float(value: Any) -> float | None:
    """A sum of GPU-seconds × activity as a float; None (not measured) kept."""
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class MonthOverview:
    """The calendar month (UTC) holding ``at``: spend of the ledger hours before ``at`` (of the filters' rows),
    the month-end forecast by the budgets' run-rate rule (:func:`finops.analysis.budgets.run_rate_forecast`), and the
    status of the budgets (of the team filter's team, or all; budgets are per team, so the cluster and
    partition filters do not narrow them). Money exact; currency '' when there is no ledger row."""

    month: datetime
    at: datetime
    spent: Decimal
    forecast: Decimal
    currency: str
    budgets: list[BudgetStatus]


def month_overview(
    session: Session,
    at: datetime,
    *,
    cluster: str | None = None,
    team: str | None = None,
    partition: str | None = None,
) -> MonthOverview:
    """:class:`MonthOverview` at ``at``. Without cluster and partition filters the team-hours are read once for
    the month's spend and the budgets (:func:`finops.analysis.budgets.month_spend` per team), otherwise the ledger's
    rows for the spend and the team-hours for the budgets."""
    spend = month_spend(session, at, scope=Scope(cluster=cluster, team=team, partition=partition))
    shared = cluster is None and partition is None
    statuses = budget_status(session, at, team=team, spend=spend if shared else None)
    spent = sum((s.spent for s in spend.values()), Decimal(0))
    recent = sum((s.recent for s in spend.values()), Decimal(0))
    left = (next_month_start(at) - at).total_seconds()
    forecast = run_rate_forecast(spent, recent, run_rate_seconds(session, at), left)
    currency = session.scalar(select(LedgerEntry.currency).limit(1)) or ""
    return MonthOverview(month_start(at), at, spent, forecast, currency, statuses)


def top_idle(rows: Sequence[ReportRow], count: int = 5) -> list[ReportRow]:
    """The ``count`` rows of a cost report (by job or by team) with the highest idle cost, highest first; capacity
    no job held (``__unallocated__``) and rows without idle cost are left out."""
    wasters = [row for row in rows if row.key != UNALLOCATED_TEAM and row.idle_cost > 0]
    return sorted(wasters, key=lambda row: (-row.idle_cost, row.key))[:count]


def node_names(session: Session, cluster: str | None = None, partition: str | None = None) -> list[str]:
    """Hostnames of the nodes in ``cluster`` and ``partition`` (:func:`finops.analysis.filters.nodes_in`), sorted."""
    query = select(Node.hostname).where(Node.id.in_(nodes_in(cluster, partition))).order_by(Node.hostname)
    return list(session.scalars(query))
